"""examples/train.py, the short training example: a few epochs on the CPU on the
synthetic dataset of `stoker synth`, and on a root holding train/ and val/."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import PKG_ROOT, make_folder

REPO = os.path.dirname(PKG_ROOT)
EXAMPLE = os.path.join(REPO, "examples", "train.py")
LINE = re.compile(r"^epoch (\d+): train loss [0-9.]+ \(\d+ img/s\), val acc [0-9.]+% on (\d+) images$")


def stoker_cli():
    """The stoker command of this build: $STOKER_CLI, build/stoker, or the one on PATH."""
    for c in (os.environ.get("STOKER_CLI"), os.path.join(REPO, "build", "stoker"),
              shutil.which("stoker")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def run_example(args, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), PKG_ROOT) if p)
    r = subprocess.run([sys.executable, EXAMPLE] + args, cwd=str(cwd), env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return [LINE.match(ln) for ln in r.stdout.splitlines() if ln.startswith("epoch ")]


@pytest.mark.slow
def test_example_trains_on_the_synthetic_dataset(tmp_path):
    cli = stoker_cli()
    if cli is None:
        pytest.skip("no stoker command (set STOKER_CLI, or build build/stoker)")
    data = tmp_path / "synth"
    subprocess.run([cli, "synth", str(data), "--images", "200", "--classes", "10"],
                   check=True, capture_output=True, timeout=300)
    lines = run_example([str(data), "--size", "32", "--epochs", "2", "-b", "32", "-j", "2",
                         "--device", "cpu"], tmp_path)
    assert len(lines) == 2 and all(lines)
    assert [int(m.group(1)) for m in lines] == [0, 1]
    assert all(int(m.group(2)) == 200 for m in lines)  # the folder itself is the val set


def test_example_uses_train_and_val(tmp_path):
    make_folder(tmp_path / "d" / "train", classes=3, per_class=8)
    make_folder(tmp_path / "d" / "val", classes=3, per_class=3, seed=300)
    lines = run_example([str(tmp_path / "d"), "-a", "resnet18", "--size", "32", "--epochs", "1",
                         "-b", "6", "-j", "1", "--device", "cpu"], tmp_path)
    assert len(lines) == 1 and lines[0] and int(lines[0].group(2)) == 9
