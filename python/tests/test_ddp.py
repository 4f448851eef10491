"""examples/reference/train.py under torchrun: DDP on the CPU (gloo) with 2 and 3 processes.

Each rank logs the dataset indices of its batches and a checksum of its
weights (--log-indices): the ranks together must see every training sample
exactly once per epoch, run the same number of steps, finish (a timeout
catches a rank left waiting at the end of an epoch), and end with identical
weights.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import PKG_ROOT, make_folder

REPO = os.path.dirname(PKG_ROOT)
TRAIN = os.path.join(REPO, "examples", "reference", "train.py")
BATCH = 6
N_TRAIN = 36  # divisible by BATCH * world size for 2 and 3: no padding, nothing dropped


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    make_folder(root / "train", classes=3, per_class=N_TRAIN // 3)
    make_folder(root / "val", classes=3, per_class=3, seed=500)  # 9: not divisible by 2
    return str(root)


def torchrun_cmd(nproc):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}"]
    import torch

    if torch.__version__.startswith("1.") and sys.version_info >= (3, 11):
        # torch 1.x's launcher reads its default "0" for --redirects/--tee as None under
        # Python 3.11 (enum iteration skips zero flags); a non-zero value works around it.
        cmd += ["--redirects", "2", "--tee", "2"]
    return cmd


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (e.get("PYTHONPATH"), PKG_ROOT) if p)
    e.pop("WORLD_SIZE", None)
    return e


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 3])
def test_ddp_shards_steps_and_weights(dataset, tmp_path, nproc):
    log = str(tmp_path / "idx")
    epochs = 2
    cmd = torchrun_cmd(nproc) + [
        TRAIN, dataset, "-a", "tiny", "-b", str(BATCH), "--image-size", "32",
        "--epochs", str(epochs), "-p", "0", "--device", "cpu", "-j", "1",
        "--log-indices", log, "--json"]
    # A rank stuck in a collective at the end of an epoch never exits: the timeout fails it.
    r = subprocess.run(cmd, cwd=str(tmp_path), env=env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
    assert result["world_size"] == nproc
    assert result["val_images"] == 9  # each validation image counted once
    steps_per_epoch = N_TRAIN // (BATCH * nproc)

    per_epoch = {e: [] for e in range(epochs)}
    finals = []
    for rank in range(nproc):
        with open(f"{log}.rank{rank}") as f:
            lines = [json.loads(ln) for ln in f]
        finals.append(lines[-1])
        batches = lines[:-1]
        for e in range(epochs):
            mine = [b for b in batches if b["epoch"] == e]
            assert [b["batch"] for b in mine] == list(range(steps_per_epoch))
            assert all(len(b["indices"]) == BATCH for b in mine)
            per_epoch[e] += [i for b in mine for i in b["indices"]]
    for e in range(epochs):
        assert sorted(per_epoch[e]) == list(range(N_TRAIN)), f"epoch {e}"
    assert per_epoch[0] != per_epoch[1]  # a new shuffle each epoch
    for f in finals:
        assert f["world_size"] == nproc
        assert f["steps"] == steps_per_epoch * epochs
        assert f["steps_by_epoch"] == {str(e): steps_per_epoch for e in range(epochs)}
    digests = {f["weights_sha256"] for f in finals}
    assert len(digests) == 1, digests
    assert result["weights_sha256"] in digests
