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


# ---- repeated augmentation: torchvision's RASampler ---------------------------------------------

def rasampler_order(n, reps, world, rank, shuffle, seed, epoch):
    """references/classification/sampler.py's RASampler.__iter__ (torchvision), as the
    reference: the dataset is only its length here."""
    import math

    num_samples = int(math.ceil(n * float(reps) / world))
    total_size = num_samples * world
    num_selected_samples = int(math.floor(n // 256 * 256 / world))
    if shuffle:
        g = torch.Generator()
        g.manual_seed(seed + epoch)
        indices = torch.randperm(n, generator=g).tolist()
    else:
        indices = list(range(n))
    indices = [ele for ele in indices for i in range(reps)]
    indices += indices[: (total_size - len(indices))]
    assert len(indices) == total_size
    indices = indices[rank:total_size:world]
    assert len(indices) == num_samples
    return indices[:num_selected_samples]


@pytest.fixture(scope="module")
def ra_list(tmp_path_factory):
    """list_file(n): a list of n samples over 9 tiny JPEGs (the order tests read only
    indices; RASampler needs n >= 256 for a non-empty epoch)."""
    from conftest import photo, save_jpeg

    root = tmp_path_factory.mktemp("ra")
    files = []
    for i in range(9):
        path = str(root / f"{i}.jpg")
        save_jpeg(path, photo(40, 32, 100 + i))
        files.append(path)

    def make(n):
        path = root / f"list{n}.txt"
        if not path.exists():
            path.write_text("".join(f"{files[i % 9]} {i % 5}\n" for i in range(n)))
        return str(path)
    return make


def ra_loader(ra_list, n, reps, **kw):
    args = dict(batch_size=64, size=8, threads=1, pipeline="eval", ra_reps=reps)
    args.update(kw)
    return stoker.ImageLoader(list_file=ra_list(n), **args)


@pytest.mark.parametrize("n,reps,world,shuffle,seed", [
    (256, 3, 1, True, 0), (300, 3, 2, True, 5), (513, 4, 3, True, 0), (600, 2, 8, True, 1),
    (1031, 1, 4, True, 9), (300, 3, 2, False, 0), (777, 5, 3, False, 0), (520, 3, 2, True, 2**32 + 3),
])
def test_ra_order_equals_rasampler(ra_list, n, reps, world, shuffle, seed):
    for rank in range(world):
        ld = ra_loader(ra_list, n, reps, rank=rank, world_size=world, shuffle=shuffle, seed=seed)
        for epoch in (0, 3):
            ld.set_epoch(epoch)
            got = [i for b in ld.iter_batches() for i in b.indices]
            want = rasampler_order(n, reps, world, rank, shuffle, seed, epoch)
            assert got == want, (rank, epoch)
        assert len(ld) == -(-len(want) // 64)
        ld.close()


def test_ra_off_is_distributed_sampler(ra_list):
    ld = ra_loader(ra_list, 300, 0, rank=1, world_size=2, seed=4, shuffle=True)
    ld.set_epoch(2)
    assert [i for b in ld.iter_batches() for i in b.indices] == \
        sampler_order(300, 2, 1, True, 4, False, 2)


def test_ra_copies_differ(ra_list):
    """The copies of an index are augmented apart; the first keeps the draws the index
    has without repetition."""
    kw = dict(pipeline="train", size=16, dtype="uint8", seed=3, batch_size=100)
    ra = ra_loader(ra_list, 300, 3, **kw)
    plain = ra_loader(ra_list, 300, 0, **kw)
    for ld in (ra, plain):
        ld.set_epoch(1)
    copies = {}
    for b in ra.iter_batches():
        for img, i in zip(b.images, b.indices):
            copies.setdefault(i, []).append(img.clone())
    alone = {i: img.clone() for b in plain.iter_batches() for img, i in zip(b.images, b.indices)}
    assert len(copies) == 86 and all(len(c) == 3 for c in list(copies.values())[:85])
    for i, c in copies.items():
        assert torch.equal(c[0], alone[i]), i
        for a in range(len(c)):
            for b in range(a + 1, len(c)):
                assert not torch.equal(c[a], c[b]), (i, a, b)


def test_ra_threads_and_resume(ra_list):
    kw = dict(pipeline="train", size=16, dtype="uint8", seed=11, batch_size=32, rank=1,
              world_size=2, ra_reps=4)
    one = stoker.ImageLoader(list_file=ra_list(600), **{**kw, "threads": 1})
    two = stoker.ImageLoader(list_file=ra_list(600), **{**kw, "threads": 3})
    for ld in (one, two):
        ld.set_epoch(2)
    a = [(b.images.clone(), list(b.indices)) for b in one.iter_batches()]
    b = [(b.images.clone(), list(b.indices)) for b in two.iter_batches()]
    assert len(a) == len(one) == 8  # 600 // 256 * 256 / 2 = 256 samples
    assert all(torch.equal(x[0], y[0]) and x[1] == y[1] for x, y in zip(a, b))
    # resume mid-epoch from a state_dict
    one.set_epoch(2)
    it = iter(one.iter_batches())
    for _ in range(3):
        next(it)
    state = one.state_dict()
    del it
    two.load_state_dict(state)
    rest = [(b.images.clone(), list(b.indices)) for b in two.iter_batches()]
    assert len(rest) == 5
    assert all(torch.equal(x[0], y[0]) and x[1] == y[1] for x, y in zip(a[3:], rest))
    # a state_dict of another ra_reps is refused
    other = stoker.ImageLoader(list_file=ra_list(600), **{**kw, "ra_reps": 2})
    with pytest.raises(ValueError, match="ra_reps"):
        other.load_state_dict(state)


def test_ra_refusals(ra_list):
    with pytest.raises(ValueError, match="256"):
        ra_loader(ra_list, 255, 3)
    with pytest.raises(ValueError, match="256"):
        ra_loader(ra_list, 300, 3, rank=0, world_size=300)
    with pytest.raises(ValueError, match="shard_drop_last"):
        ra_loader(ra_list, 300, 3, shard_drop_last=True)
    with pytest.raises(ValueError, match="ra_reps"):
        ra_loader(ra_list, 300, 65)


# ---- weights=: torch's WeightedRandomSampler ------------------------------------------


def weighted_orders(root, weights, world, rank, seed, epochs, drop_last=False, **kw):
    args = dict(batch_size=4, size=8, threads=1, seed=seed, rank=rank, world_size=world,
                shard_drop_last=drop_last, weights=weights)
    args.update(kw)
    with stoker.ImageLoader(root, **args) as ld:
        out = {}
        for e in epochs:
            ld.set_epoch(e)
            out[e] = [i for b in ld.iter_batches() for i in b.indices]
        return out


def torch_weighted(weights, count, seed):
    """WeightedRandomSampler(weights, count) with a generator seeded seed (+ epoch)."""
    from torch.utils.data import WeightedRandomSampler

    g = torch.Generator()
    g.manual_seed(seed)
    return list(WeightedRandomSampler(weights, count, replacement=True, generator=g))


@pytest.mark.parametrize("world", [1, 2, 3, 8])
@pytest.mark.parametrize("drop_last", [False, True])
def test_weighted_order_is_weighted_random_samplers_sliced_by_rank(folder23, world, drop_last):
    """Each epoch is torch's WeightedRandomSampler draw from seed + epoch, bit for
    bit, of DistributedSampler's total size; rank r takes positions r, r + world, ..."""
    g = torch.Generator().manual_seed(11)
    weights = (torch.rand(23, generator=g, dtype=torch.float64) ** 2).tolist()
    weights[5] = 0.0  # never drawn
    per_rank = (23 - world) // world + (23 % world != 0) if drop_last and 23 % world else \
        -(-23 // world)
    whole = {}
    for rank in range(world):
        got = weighted_orders(folder23, weights, world, rank, 9, (0, 4), drop_last)
        for e in (0, 4):
            want = torch_weighted(weights, per_rank * world, 9 + e)
            assert got[e] == want[rank::world], (rank, e)
            assert 5 not in got[e]
            whole.setdefault(e, []).append(got[e])
    # the ranks' slices are one sequence: interleaved back, the global draw
    for e, parts in whole.items():
        merged = [parts[k % world][k // world] for k in range(per_rank * world)]
        assert merged == torch_weighted(weights, per_rank * world, 9 + e)


def test_weighted_sampling_is_deterministic_and_resumes(folder23):
    w = [1.0 + (i % 3) for i in range(23)]
    a = weighted_orders(folder23, w, 1, 0, 3, (0, 1, 2))
    assert a == weighted_orders(folder23, w, 1, 0, 3, (0, 1, 2), threads=3)
    assert a[0] != a[1] != a[2]
    assert a[0] != weighted_orders(folder23, w, 1, 0, 4, (0,))[0]
    # numpy arrays and tensors are weights too
    import numpy as np

    assert weighted_orders(folder23, np.array(w), 1, 0, 3, (1,))[1] == a[1]
    assert weighted_orders(folder23, torch.tensor(w), 1, 0, 3, (1,))[1] == a[1]
    # a resume repeats the rest of the epoch; other weights are another run
    ld = stoker.ImageLoader(folder23, batch_size=4, size=8, threads=1, seed=3, weights=w)
    it = ld.iter_batches()
    next(it)
    state = ld.state_dict()
    rest = [i for b in it for i in b.indices]
    ld2 = stoker.ImageLoader(folder23, batch_size=4, size=8, threads=1, seed=3, weights=w)
    ld2.load_state_dict(state)
    assert [i for b in ld2.iter_batches() for i in b.indices] == rest
    other = stoker.ImageLoader(folder23, batch_size=4, size=8, threads=1, seed=3,
                               weights=w[::-1])
    with pytest.raises(ValueError, match="weights"):
        other.load_state_dict(state)


def test_class_balanced_weights(tmp_path):
    """The class-balanced recipe: weight 1 / (its class's count) for each
    sample. 30 images of class 0 and 3 of class 1 are drawn about equally."""
    from conftest import photo, save_jpeg

    for c, k in ((0, 30), (1, 3)):
        for i in range(k):
            save_jpeg(str(tmp_path / f"c{c}" / f"{i}.jpg"), photo(12, 12, 10 * c + i))
    with stoker.ImageLoader(str(tmp_path), batch_size=33, size=8, threads=2, seed=0) as probe:
        targets = probe.dataset.targets
    counts = [targets.count(c) for c in (0, 1)]
    w = [1.0 / counts[t] for t in targets]
    ones = 0
    with stoker.ImageLoader(str(tmp_path), batch_size=33, size=8, threads=2, seed=0,
                            weights=w) as ld:
        for e in range(20):
            ld.set_epoch(e)
            for _, y in ld:
                ones += int(y.sum())
    assert 0.4 < ones / (20 * 33) < 0.6  # class 1 is 3 of 33 without weights


@pytest.mark.parametrize("weights, match", [
    ([1.0] * 22, "weights= has 22 weights for 23 samples"),
    ([1.0] * 24, "more than 23 weights for 23 samples"),
    ([1.0] * 22 + [-1.0], r"weights\[22\] is -1.0"),
    ([1.0] * 22 + [float("nan")], r"weights\[22\] is nan"),
    ([0.0] * 23, "sum to 0"),
])
def test_weighted_refusals(folder23, weights, match):
    with pytest.raises(ValueError, match=match):
        stoker.ImageLoader(folder23, batch_size=4, size=8, threads=1, weights=weights)


def test_weighted_refusals_of_other_options(folder23, tmp_path):
    with pytest.raises(ValueError, match="shuffle=False"):
        stoker.ImageLoader(folder23, batch_size=4, size=8, weights=[1.0] * 23, shuffle=False)
    with pytest.raises(ValueError, match="ra_reps and weights"):
        stoker.ImageLoader(folder23, batch_size=4, size=8, weights=[1.0] * 23, ra_reps=2)
    with pytest.raises(TypeError, match="sequence of numbers"):
        stoker.ImageLoader(folder23, batch_size=4, size=8, weights="1 2 3")
    tar = str(tmp_path / "shards")
    stoker.pack(folder23, tar, format="tar", threads=1)
    with pytest.raises(ValueError, match="not tar shards"):
        stoker.ImageLoader(tar, batch_size=4, size=8, weights=[1.0] * 23)
