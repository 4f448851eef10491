"""Epoch semantics, determinism and exact mid-epoch resume."""
import pytest

torch = pytest.importorskip("torch")

import stoker  # noqa: E402

from conftest import make_folder  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("resume"), classes=3, per_class=9,
                       sizes=((64, 48), (48, 64), (50, 50), (90, 30)))  # 27 images


def loader(root, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("size", 24)
    kw.setdefault("threads", 2)
    kw.setdefault("seed", 3)
    return stoker.ImageLoader(root, **kw)


def run_pass(ld):
    return [(b.images.clone(), b.labels.clone(), b.epoch, b.batch_index, b.indices)
            for b in ld.iter_batches()]


def same(a, b):
    return len(a) == len(b) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) and x[2:] == y[2:]
        for x, y in zip(a, b))


def test_same_seed_same_batches_for_any_thread_count(folder):
    for pipeline in ("train", "eval"):
        one = loader(folder, threads=1, pipeline=pipeline, shuffle=True)
        three = loader(folder, threads=3, pipeline=pipeline, shuffle=True)
        for _ in range(2):
            a, b = run_pass(one), run_pass(three)
            assert len(a) == len(one) == 7
            assert same(a, b)
    other = loader(folder, seed=4)
    assert not same(run_pass(loader(folder)), run_pass(other))


def test_each_completed_pass_moves_to_the_next_epoch(folder):
    ld = loader(folder)
    assert ld.epoch == 0
    e0 = run_pass(ld)
    assert ld.epoch == 1 and {b[2] for b in e0} == {0}
    e1 = run_pass(ld)
    assert {b[2] for b in e1} == {1}
    assert [b[4] for b in e0] != [b[4] for b in e1]  # a new shuffle, as DataLoader(shuffle=True)
    ld.set_epoch(0)
    assert same(run_pass(ld), e0)
    ld.set_epoch(1)
    assert same(run_pass(ld), e1)
    assert ld.epoch == 2


def test_set_epoch_during_a_pass_applies_to_the_next(folder):
    ld = loader(folder)
    ref = run_pass(loader(folder))
    got = []
    for i, (x, y) in enumerate(ld):
        if i == 0:
            ld.set_epoch(5)
        got.append(x.clone())
    assert all(torch.equal(a, b[0]) for a, b in zip(got, ref))  # this pass stays epoch 0
    assert ld.epoch == 5
    assert {b[2] for b in run_pass(ld)} == {5}


def test_a_new_pass_after_a_break_moves_on(folder):
    """As with DataLoader(shuffle=True), a new iter() after an unfinished pass
    does not replay its batches: it starts the next epoch, unless set_epoch()
    asks for that epoch again."""
    ref = loader(folder)
    ref0, ref1 = run_pass(ref), run_pass(ref)
    ld = loader(folder)
    for i, _ in enumerate(ld):
        if i == 2:
            break
    assert ld.epoch == 1 and ld.state_dict()["epoch"] == 1
    assert same(run_pass(ld), ref1)
    assert ld.epoch == 2
    # asked for again: replayed from its first batch
    for i, _ in enumerate(ld):
        if i == 1:
            break
    ld.set_epoch(0)
    assert ld.epoch == 0
    assert same(run_pass(ld), ref0)
    # an iterator made and dropped before its first batch consumes nothing
    it = iter(ld)
    del it
    assert ld.epoch == 1
    assert same(run_pass(ld), ref1)


def test_eval_is_not_shuffled_by_default(folder):
    ld = loader(folder, pipeline="eval")
    idx = [i for b in run_pass(ld) for i in b[4]]
    assert idx == list(range(27))


@pytest.mark.parametrize("k", [0, 1, 3, 6, 7])
def test_state_dict_resumes_exactly(folder, k):
    ref = loader(folder)
    ref.set_epoch(2)
    full = run_pass(ref)
    assert len(full) == 7

    ld = loader(folder)
    ld.set_epoch(2)
    sd = None
    if k == 0:
        sd = ld.state_dict()
    for i, _ in enumerate(ld):
        if i + 1 == k:
            sd = ld.state_dict()  # taken inside the loop, after k batches
            break
    assert sd["epoch"] == 2 and sd["batch"] == k
    del ld

    new = loader(folder)
    new.load_state_dict(sd)
    assert new.epoch == 2
    rest = run_pass(new)
    assert same(rest, full[k:])
    assert new.epoch == 3  # the resumed pass completed epoch 2
    assert new.state_dict()["batch"] == 0
    # The following pass is a whole epoch 3, as for the uninterrupted loader.
    assert same(run_pass(new), run_pass(ref))


def test_state_dict_outside_a_pass(folder):
    ld = loader(folder)
    assert ld.state_dict()["epoch"] == 0 and ld.state_dict()["batch"] == 0
    run_pass(ld)
    sd = ld.state_dict()
    assert (sd["epoch"], sd["batch"]) == (1, 0)
    ld.set_epoch(5)
    assert ld.state_dict()["epoch"] == 5


def test_state_dict_is_plain_data(folder, tmp_path):
    ld = loader(folder)
    it = iter(ld)
    next(it)
    path = tmp_path / "sd.pt"
    torch.save(ld.state_dict(), path)
    sd = torch.load(path)
    assert sd["batch"] == 1


def test_load_state_dict_refuses_other_options_or_data(folder, tmp_path):
    sd = loader(folder).state_dict()
    with pytest.raises(ValueError, match="batch_size"):
        loader(folder, batch_size=5).load_state_dict(sd)
    with pytest.raises(ValueError, match="seed"):
        loader(folder, seed=9).load_state_dict(sd)
    with pytest.raises(ValueError, match="world_size"):
        loader(folder, world_size=2, rank=1).load_state_dict(sd)
    other = make_folder(tmp_path, classes=3, per_class=4)
    with pytest.raises(ValueError, match="num_samples"):
        loader(other).load_state_dict(sd)
    with pytest.raises(ValueError, match="state_dict"):
        loader(folder).load_state_dict({"epoch": 1})
    # Options that do not change the order are free to differ.
    loader(folder, threads=1, dtype=torch.float16, channels_last=True).load_state_dict(sd)


def test_load_state_dict_supersedes_a_running_pass(folder):
    ld = loader(folder)
    it = iter(ld)
    next(it)
    ld.load_state_dict({**ld.state_dict(), "epoch": 4, "batch": 2})
    with pytest.raises(RuntimeError, match="superseded"):
        next(it)
    batches = run_pass(ld)
    assert batches[0][2:4] == (4, 2) and len(batches) == 5


@pytest.mark.parametrize("k", [0, 3])
def test_set_epoch_of_the_resumed_epoch_keeps_the_position(folder, k):
    """The standard loop after load_state_dict(): `for epoch in range(start, n):
    loader.set_epoch(epoch)` resumes mid-epoch instead of starting epoch 2 over."""
    ref = loader(folder)
    ref.set_epoch(2)
    full = run_pass(ref)
    sd = {**ref.state_dict(), "epoch": 2, "batch": k}

    ld = loader(folder)
    ld.load_state_dict(sd)
    ld.set_epoch(2)
    ld.set_epoch(2)  # twice changes nothing either
    assert ld.epoch == 2 and ld.state_dict()["batch"] == k
    assert same(run_pass(ld), full[k:])
    ld.set_epoch(3)  # the loop's next epoch: whole, as for the uninterrupted loader
    assert same(run_pass(ld), run_pass(ref))


def test_set_epoch_of_another_epoch_drops_the_resume(folder):
    ld = loader(folder)
    ld.load_state_dict({**ld.state_dict(), "epoch": 2, "batch": 3})
    ld.set_epoch(1)
    assert ld.state_dict()["batch"] == 0
    batches = run_pass(ld)
    assert len(batches) == 7 and batches[0][2:4] == (1, 0)
    # asked for again after another epoch: epoch 2 from its first batch
    ld.load_state_dict({**ld.state_dict(), "epoch": 2, "batch": 3})
    ld.set_epoch(0)
    ld.set_epoch(2)
    batches = run_pass(ld)
    assert len(batches) == 7 and batches[0][2:4] == (2, 0)
