"""examples/train.py on the CPU on a tiny generated dataset: validation each epoch,
checkpoints, an exact --resume (mid-epoch too), --evaluate and TensorBoard events."""
import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import PKG_ROOT, make_folder

REPO = os.path.dirname(PKG_ROOT)
TRAIN = os.path.join(REPO, "examples", "train.py")
BUILD = os.path.join(REPO, "build")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("trainex")
    make_folder(root / "train", classes=3, per_class=8)  # 24 images: 4 batches of 6
    make_folder(root / "val", classes=3, per_class=3, seed=300)
    return str(root)


def run(python, args, cwd, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PKG_ROOT, env.get("PYTHONPATH")) if p)
    env.pop("WORLD_SIZE", None)
    r = subprocess.run([python, TRAIN] + args, cwd=str(cwd), env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    return json.loads([ln for ln in lines if ln.startswith("{")][-1]), lines


def base(dataset):
    return [dataset, "-a", "tiny", "-b", "6", "--image-size", "32", "--epochs", "2",
            "--device", "cpu", "-j", "1", "--json"]


def test_validation_checkpoint_and_exact_resume(dataset, tmp_path):
    straight, lines = run(sys.executable, base(dataset) + ["-p", "2", "--checkpoint-dir",
                                                           str(tmp_path / "a")], tmp_path)
    assert straight["steps"] == 8 and straight["epoch"] == 2
    assert straight["val_images"] == 9
    assert 0 <= straight["val_acc1"] <= straight["val_acc5"] <= 100
    # pytorch/examples' progress lines and one validation line per epoch
    progress = [ln for ln in lines if ln.startswith("Epoch: [")]
    assert len(progress) == 4 and all(" Time " in ln and " Data " in ln for ln in progress)
    assert sum(ln.startswith(" * Epoch") for ln in lines) == 2
    ck = tmp_path / "a" / "checkpoint.pth.tar"
    assert ck.is_file() and (tmp_path / "a" / "model_best.pth.tar").is_file()

    # Stop mid-epoch 0, resume and stop mid-epoch 1, resume to the end: the same weights.
    d = str(tmp_path / "b")
    first, _ = run(sys.executable, base(dataset) + ["-p", "0", "--steps", "3",
                                                    "--checkpoint-dir", d], tmp_path)
    assert first["steps"] == 3 and first["val_images"] is None
    import torch

    state = torch.load(os.path.join(d, "checkpoint.pth.tar"), map_location="cpu")
    assert (state["epoch"], state["batch"], state["step"]) == (0, 3, 3)
    assert state["loader"][0]["epoch"] == 0 and state["loader"][0]["batch"] == 3
    resume = ["--resume", os.path.join(d, "checkpoint.pth.tar"), "--checkpoint-dir", d]
    second, _ = run(sys.executable, base(dataset) + ["-p", "0", "--steps", "3"] + resume,
                    tmp_path)
    assert second["steps"] == 3 and second["global_step"] == 6
    third, _ = run(sys.executable, base(dataset) + ["-p", "0"] + resume, tmp_path)
    assert third["steps"] == 2 and third["global_step"] == 8 and third["epoch"] == 2
    assert third["weights_sha256"] == straight["weights_sha256"]
    assert third["val_acc1"] == straight["val_acc1"]
    assert third["val_loss"] == straight["val_loss"]

    # --evaluate on the final checkpoint gives the last validation's figures.
    ev, _ = run(sys.executable, [dataset, "-a", "tiny", "-b", "6", "--image-size", "32",
                                 "--device", "cpu", "-j", "1", "--json", "--evaluate",
                                 "--resume", str(ck)], tmp_path)
    assert ev["evaluate"] and ev["val_images"] == 9
    assert ev["val_acc1"] == straight["val_acc1"] and ev["val_loss"] == straight["val_loss"]


def test_old_flags_still_work(dataset, tmp_path):
    # the benchmark scripts' spelling: --data, --arch, --batch-size, --workers, --steps
    res, _ = run(sys.executable, ["--data", os.path.join(dataset, "train"), "--arch", "tiny",
                                  "--batch-size", "6", "--image-size", "32", "--workers", "1",
                                  "--epochs", "3", "--steps", "5", "--warmup-steps", "2",
                                  "--log-every", "0", "--device", "cpu", "--json"], tmp_path)
    assert res["steps"] == 5 and res["measured_steps"] == 3 and res["val_images"] is None
    assert res["images_per_s"] > 0 and 0 <= res["data_wait_fraction"] <= 1
    syn, _ = run(sys.executable, ["--synthetic", "-a", "tiny", "--num-classes", "4", "-b", "4",
                                  "--image-size", "32", "--steps", "3", "--device", "cpu",
                                  "--json"], tmp_path)
    assert syn["loader"] == "synthetic" and syn["steps"] == 3


def test_flags_are_not_abbreviated(dataset, tmp_path):
    # pytorch/examples' --gpu 0 is not a flag of train.py: refused, not read as --gpu-cpu-share 0
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PKG_ROOT, env.get("PYTHONPATH")) if p)
    env.pop("WORLD_SIZE", None)
    for flag in ("--gpu", "--gpu-cpu"):
        r = subprocess.run([sys.executable, TRAIN] + base(dataset) + [flag, "0"], cwd=str(tmp_path),
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
        assert f"unrecognized arguments: {flag} 0" in r.stderr


def tensorboard_python():
    """An interpreter with torch and tensorboard: this one, or a virtualenv under build/
    that sees the system's packages and adds tensorboard from PyPI (made once)."""
    probe = "import torch.utils.tensorboard, tensorboard.backend.event_processing"
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0:
        return sys.executable
    venv = os.path.join(BUILD, "tb-venv")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                           capture_output=True)
        if r.returncode != 0:
            pytest.skip("cannot make a virtualenv for tensorboard")
    if subprocess.run([py, "-c", probe], capture_output=True).returncode != 0:
        r = subprocess.run([py, "-m", "pip", "install", "-q", "tensorboard"],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            pytest.skip(f"tensorboard cannot be installed: {r.stderr[-300:]}")
    if subprocess.run([py, "-c", probe], capture_output=True).returncode != 0:
        pytest.skip("tensorboard cannot be imported")
    return py


def test_tensorboard_scalars(dataset, tmp_path):
    py = tensorboard_python()
    logdir = tmp_path / "tb"
    run(py, base(dataset) + ["-p", "2", "--tensorboard", str(logdir)], tmp_path)
    assert glob.glob(str(logdir / "events.out.tfevents.*"))
    read = ("import json, sys\n"
            "from tensorboard.backend.event_processing.event_accumulator import "
            "EventAccumulator\n"
            "a = EventAccumulator(sys.argv[1]); a.Reload()\n"
            "print(json.dumps({t: len(a.Scalars(t)) for t in a.Tags()['scalars']}))\n")
    r = subprocess.run([py, "-c", read, str(logdir)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tags = json.loads(r.stdout)
    for t in ("train/loss", "train/acc1", "perf/images_per_s", "perf/data_wait_fraction",
              "loader/images", "loader/decode_seconds", "val/loss", "val/acc1", "val/acc5"):
        assert t in tags, (t, sorted(tags))
    assert tags["train/loss"] == 4 and tags["val/acc1"] == 2  # every 2 steps; every epoch
