"""seed=None follows torch: torch.manual_seed decides the order and the
augmentations, successive loaders differ (as DataLoader's base seeds do),
every rank of a process group takes rank 0's draw, and a resume keeps the
saved seed."""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

import stoker  # noqa: E402

from conftest import PKG_ROOT, make_folder  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("seed"), classes=3, per_class=6)  # 18 images


def loader(root, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("size", 16)
    kw.setdefault("threads", 2)
    return stoker.ImageLoader(root, **kw)


def run(ld, n=None):
    out = []
    for b in ld.iter_batches():
        out.append((b.images.clone(), list(b.indices)))
        if n is not None and len(out) == n:
            break
    return out


def same(a, b):
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and x[1] == y[1]
                                    for x, y in zip(a, b))


def test_torch_manual_seed_decides_the_order_and_augmentation(folder):
    torch.manual_seed(5)
    a = loader(folder)
    torch.manual_seed(5)
    b = loader(folder)
    assert a.seed == b.seed
    assert same(run(a), run(b))
    torch.manual_seed(6)
    c = loader(folder)
    assert c.seed != a.seed
    ra, rc = run(a), run(c)
    assert [x[1] for x in ra] != [x[1] for x in rc]  # another shuffle


def test_successive_loaders_differ(folder):
    torch.manual_seed(0)
    seeds = {loader(folder).seed for _ in range(3)}
    assert len(seeds) == 3


def test_an_explicit_seed_wins(folder):
    torch.manual_seed(1)
    a = loader(folder, seed=3)
    torch.manual_seed(2)
    b = loader(folder, seed=3)
    assert a.seed == b.seed == 3
    assert same(run(a), run(b))


def test_resume_keeps_the_drawn_seed(folder):
    torch.manual_seed(11)
    a = loader(folder)
    it = a.iter_batches()
    next(it), next(it)
    state = a.state_dict()  # mid-pass: two batches yielded
    assert state["fingerprint"]["seed"] == a.seed and state["batch"] == 2
    want = [(b.images.clone(), list(b.indices)) for b in it]
    assert len(want) == 3
    # a loader drawn under another torch seed takes the saved one
    torch.manual_seed(12)
    b = loader(folder)
    assert b.seed != a.seed
    b.load_state_dict(state)
    assert b.seed == a.seed and b.state_dict()["fingerprint"] == state["fingerprint"]
    assert same(run(b), want)
    # a seed given explicitly is not overridden: the mismatch is named
    c = loader(folder, seed=1)
    with pytest.raises(ValueError, match="seed"):
        c.load_state_dict(state)


SCRIPT = textwrap.dedent("""
    import sys, torch, torch.distributed as dist
    import stoker
    rank, root, init = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    torch.manual_seed(100 + rank)  # each rank's generator differs
    mine = int(torch.empty((), dtype=torch.int64).random_().item())
    torch.manual_seed(100 + rank)
    ld = stoker.ImageLoader(root, batch_size=4, size=16, threads=1)
    print(mine, ld.seed, ld.state_dict()["fingerprint"]["rank"])
    dist.destroy_process_group()
""")


def test_ranks_share_rank_zeros_draw(folder, tmp_path):
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), PKG_ROOT) if p)
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(k, None)
    init = f"file://{tmp_path / 'pg'}"
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(r), folder, init], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append([int(v) for v in out.split()])
    (draw0, seed0, r0), (draw1, seed1, r1) = outs
    assert (r0, r1) == (0, 1)
    assert draw0 != draw1
    assert seed0 == seed1 == draw0
