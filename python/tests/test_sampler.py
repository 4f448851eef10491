"""The sample order is torch.utils.data.DistributedSampler's, read from the batch metadata."""
import itertools

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DistributedSampler  # noqa: E402

import stoker  # noqa: E402


def sampler_order(n, world, rank, shuffle, seed, drop_last, epoch):
    s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=seed,
                           drop_last=drop_last)
    s.set_epoch(epoch)
    return list(s)


def loader_orders(root, world, rank, shuffle, seed, drop_last, epochs, batch_size=4,
                  batch_drop_last=False):
    ld = stoker.ImageLoader(root, batch_size=batch_size, size=8, threads=1, pipeline="eval",
                            shuffle=shuffle, seed=seed, rank=rank, world_size=world,
                            shard_drop_last=drop_last, drop_last=batch_drop_last)
    out = {}
    for e in epochs:
        ld.set_epoch(e)
        out[e] = [i for b in ld.iter_batches() for i in b.indices]
    return ld, out


@pytest.mark.parametrize("world", [1, 2, 3, 8])
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("seed", [0, 7])
def test_order_equals_distributed_sampler(folder23, world, shuffle, drop_last, seed):
    for rank in range(world):
        ld, got = loader_orders(folder23, world, rank, shuffle, seed, drop_last, (0, 3))
        for epoch in (0, 3):
            want = sampler_order(23, world, rank, shuffle, seed, drop_last, epoch)
            assert got[epoch] == want, (rank, epoch)
        assert len(ld) == -(-len(want) // 4)


def test_ranks_cover_the_dataset(folder23):
    for world in (2, 3, 8):
        seen = []
        for rank in range(world):
            seen += loader_orders(folder23, world, rank, True, 0, False, (1,))[1][1]
        assert set(seen) == set(range(23))
        assert len(seen) == -(-23 // world) * world  # padded by wrapping, as DistributedSampler


def test_batch_drop_last_truncates_the_shard(folder23):
    for world, rank in itertools.product((1, 3), (0,)):
        ld, got = loader_orders(folder23, world, rank, True, 5, False, (2,), batch_size=3,
                                batch_drop_last=True)
        want = sampler_order(23, world, rank, True, 5, False, 2)
        full = len(want) // 3 * 3
        assert got[2] == want[:full] and len(ld) == len(want) // 3


def test_rank_and_world_size_default_to_a_single_process(folder23):
    ld = stoker.ImageLoader(folder23, batch_size=4, size=8, threads=1)
    assert len(ld) == 6  # ceil(23 / 4): the whole dataset on one rank
