"""MixUp and CutMix through stoker.h alone: examples/mix.c, compiled here against
include/stoker.h and the build's libstoker (no private header), hands out the
batches that ImageLoader(mix=...) hands out for the same options, images and soft
labels equal byte for byte."""
import os
import shutil
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import stoker  # noqa: E402
from stoker import _stoker  # noqa: E402
from stoker import transforms as T  # noqa: E402

from conftest import PKG_ROOT, make_folder  # noqa: E402

REPO = os.path.dirname(PKG_ROOT)
EXAMPLE = os.path.join(REPO, "examples", "mix.c")


def _library_dir():
    """The build folder whose libstoker goes with this extension: that of
    $STOKER_CLI (the stoker command of the build), else build/."""
    for d in (os.path.dirname(os.environ.get("STOKER_CLI", "")), os.path.join(REPO, "build")):
        if d and os.path.exists(os.path.join(d, "libstoker.so")):
            return d
    return None


@pytest.fixture(scope="module")
def mix_program(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    lib = _library_dir()
    if cc is None or lib is None:
        pytest.skip("needs a C compiler and a build's libstoker.so (set STOKER_CLI)")
    exe = str(tmp_path_factory.mktemp("mixc") / "mix")
    # only the public header: -I include, never src/
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", os.path.join(REPO, "include"),
                    EXAMPLE, "-o", exe, "-L", lib, "-lstoker", "-Wl,-rpath," + lib],
                   check=True, capture_output=True, text=True)
    return exe


def _flags(c_args):
    """The loader's options (the keywords the Python layer gave the C loader) as
    the command line's flags of the same options table."""
    rows = {d["keyword"]: d for d in _stoker.options() if d["keyword"]}
    out = []
    for key, v in c_args.items():
        if key == "root" or v is None:
            continue
        d = rows[key]
        assert d["cli"], f"{key} has no flag: the C program cannot be given it"
        if isinstance(v, bool):
            text = "on" if v else "off"
        elif isinstance(v, (tuple, list)):
            text = ",".join(repr(float(x)) for x in v)
        elif isinstance(v, float):
            text = repr(v)  # the shortest text that reads back as the same double
        else:
            text = str(v)
        out += [d["cli"], text]
    return out


MIXES = {
    "mixup": lambda: T.MixUp(alpha=0.2),
    "cutmix": lambda: T.CutMix(alpha=1.0),
    "both": lambda: T.RandomChoice([T.MixUp(alpha=0.4), T.CutMix(alpha=1.0)]),
    "timm": lambda: T.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.8, switch_prob=0.4,
                            label_smoothing=0.1, num_classes=5),
}


@pytest.mark.parametrize("which,dtype,channels_last", [
    ("mixup", "float32", False), ("cutmix", "float32", False), ("both", "bfloat16", True),
    ("cutmix", "uint8", True), ("timm", "float32", False)])
def test_c_program_batches_equal_python(tmp_path, mix_program, which, dtype, channels_last):
    root = make_folder(tmp_path / "data", classes=3, per_class=5)  # 15: batches 4, 4, 4, 3
    pipe = [T.RandomResizedCrop(32), T.RandomHorizontalFlip()]
    if dtype != "uint8":
        pipe += [T.ToTensor(), T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))]
    kw = dict(pipeline=pipe, seed=7, threads=2, dtype=dtype, channels_last=channels_last)
    ld = stoker.ImageLoader(root, 4, mix=MIXES[which](), **kw)
    py = [(x.clone(), y.clone()) for x, y in ld]
    plain = [x.clone() for x, _ in stoker.ImageLoader(root, 4, **kw)]
    out = tmp_path / "batches.bin"
    r = subprocess.run([mix_program, root, str(out)] + _flags(ld._c_args),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == len(py) == 4
    blob = out.read_bytes()
    at = 0
    mixed = 0
    for (images, soft), unmixed in zip(py, plain):
        n, classes = soft.shape
        assert soft.dtype == torch.float32 and n == images.shape[0]
        assert classes == (5 if which == "timm" else 3)
        # the slot's memory as the C loader holds it (NHWC for channels_last)
        raw = images.permute(0, 2, 3, 1) if channels_last else images
        want_img = raw.contiguous().view(torch.uint8).numpy().tobytes()
        want_soft = soft.numpy().tobytes()
        got_img = blob[at:at + len(want_img)]
        at += len(want_img)
        got_soft = blob[at:at + len(want_soft)]
        at += len(want_soft)
        assert got_img == want_img
        assert got_soft == want_soft
        np.testing.assert_allclose(soft.sum(1).numpy(), 1.0, rtol=1e-5)
        mixed += not torch.equal(images, unmixed)
    assert at == len(blob)
    assert mixed >= 2  # the batches were mixed at all
