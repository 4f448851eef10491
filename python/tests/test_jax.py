"""stoker.jax: the torch iterator's batches as jax.Array, byte for byte, on one
device and sharded over two host devices (XLA_FLAGS in a child process, as
JAX reads them once); channels_last=True as real NHWC arrays that XLA's
operations take; and stoker.jax in a process where torch cannot be imported."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import import_or_tools_venv, make_folder

stoker = pytest.importorskip("stoker")

jax = import_or_tools_venv("jax")
pytestmark = pytest.mark.skipif(jax is None, reason="jax is not installed (scripts/install-deps.sh --python)")

KW = dict(batch_size=8, size=32, threads=2, seed=4, pipeline="train", drop_last=True)

# Blocks torch (and torchvision) in a child: `import torch` raises
# ModuleNotFoundError, as where it is not installed.
NO_TORCH = textwrap.dedent("""
    import importlib.abc, sys
    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "torchvision"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, NoTorch())
""")

CHILD = textwrap.dedent("""
    import os, sys
    sys.path[:0] = [sys.argv[2]]
    sys.path.append(sys.argv[3])
    if sys.argv[5] == "1":
        exec(NO_TORCH)
    import jax, jax.numpy as jnp, numpy as np
    import stoker, stoker.jax
    root, sharded, out = sys.argv[1], sys.argv[4] == "1", sys.argv[6]
    kw = dict(KW)
    saved = {}
    for dtype in ("float32", "bfloat16", "uint8"):
        for nhwc in (False, True):
            k = dict(kw, channels_last=nhwc)
            if dtype == "uint8":
                from stoker import transforms as T
                k.update(pipeline=[T.RandomResizedCrop(32), T.RandomHorizontalFlip(),
                                   T.PILToTensor()])
                del k["size"]
            else:
                k["dtype"] = dtype
            xs = []
            with stoker.jax.JaxLoader(root, sharded=sharded, **k) as it:
                for x, y in it:
                    assert isinstance(x, jax.Array) and isinstance(y, jax.Array)
                    want = (8, 32, 32, 3) if nhwc else (8, 3, 32, 32)
                    assert x.shape == want, (x.shape, want)
                    assert x.dtype == jnp.dtype(dtype), (x.dtype, dtype)
                    if sharded:
                        assert len(x.sharding.device_set) == 2, x.sharding
                        half = (4,) + want[1:]
                        assert {s.data.shape for s in x.addressable_shards} == {half}
                    # XLA's operations take the array: elementwise, a reduction,
                    # a jitted NHWC convolution (flax's layout) on the batch
                    f = x.astype(jnp.float32)
                    assert np.isfinite(float((f * 2 + 1).mean()))
                    if nhwc:
                        w = jnp.ones((3, 3, 3, 4), jnp.float32)  # HWIO
                        conv = jax.jit(lambda a, w: jax.lax.conv_general_dilated(
                            a, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))
                        assert conv(f, w).shape == (8, 32, 32, 4)
                    host = np.asarray(x)
                    if dtype == "bfloat16":
                        host = host.view(np.uint16)
                    xs.append(host)
                    saved.setdefault(f"y_{dtype}_{int(nhwc)}", []).append(np.asarray(y))
            saved[f"x_{dtype}_{int(nhwc)}"] = np.stack(xs)
    for k in [k for k in saved if k.startswith("y_")]:
        saved[k] = np.stack(saved[k])
    # seed=None draws a seed without torch
    with stoker.jax.JaxLoader(root, sharded=sharded, **dict(kw, seed=None)) as it:
        assert sum(1 for _ in it) == len(it)
    if sys.argv[5] == "1":
        assert not [m for m in sys.modules if m.split(".")[0] == "torch"], "torch was imported"
    np.savez(out, **saved)
    print("ok", jax.device_count())
""")


def run_child(tmp_path, root, sharded, no_torch):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    site = os.path.dirname(os.path.dirname(jax.__file__))
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(stoker.__file__)))  # the stoker tested
    out = str(tmp_path / "batches.npz")
    code = f"NO_TORCH = {NO_TORCH!r}\nKW = {KW!r}\n" + CHILD
    r = subprocess.run([sys.executable, "-c", code, str(root), pkg, site,
                        "1" if sharded else "0", "1" if no_torch else "0", out],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split()[:2] == ["ok", "2"], r.stdout
    import numpy as np

    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def torch_batches(root, **kw):
    """The torch iterator's batches, as numpy (bfloat16 as its 16-bit patterns)."""
    torch = pytest.importorskip("torch")
    xs, ys = [], []
    with stoker.ImageLoader(root, **dict(KW, **kw)) as ld:
        for x, y in ld:
            if x.dtype == torch.bfloat16:
                x = x.view(torch.int16)
            xs.append(x.contiguous().numpy().copy())
            ys.append(y.numpy().copy())
    import numpy as np

    x = np.stack(xs)
    return (x.view(np.uint16) if x.dtype == np.int16 else x), np.stack(ys)


@pytest.mark.parametrize("sharded", [False, True])
@pytest.mark.parametrize("no_torch", [False, True], ids=["with-torch", "torch-blocked"])
def test_jax_batches_equal_torch_batches(tmp_path, sharded, no_torch):
    """NCHW and NHWC (channels_last=True), float32, bfloat16 and uint8, on one
    device and on two: the torch iterator's bytes, as arrays that XLA's
    operations take; with torch importable and with torch blocked."""
    import numpy as np

    root = make_folder(tmp_path / "data", classes=3, per_class=12)
    got = run_child(tmp_path, root, sharded, no_torch)
    from stoker import transforms as T

    for dtype in ("float32", "bfloat16", "uint8"):
        if dtype == "uint8":
            kw = dict(pipeline=[T.RandomResizedCrop(32), T.RandomHorizontalFlip(),
                                T.PILToTensor()], size=None)
        else:
            kw = dict(dtype=dtype)
        wx, wy = torch_batches(root, **kw)
        assert wx.shape == (4, 8, 3, 32, 32)
        nchw, nhwc = got[f"x_{dtype}_0"], got[f"x_{dtype}_1"]
        assert nchw.dtype == wx.dtype and np.array_equal(nchw, wx), dtype
        # NHWC holds the same pixels, channels last
        assert np.array_equal(nhwc, wx.transpose(0, 1, 3, 4, 2)), dtype
        for nhwc_flag in (0, 1):
            assert np.array_equal(got[f"y_{dtype}_{nhwc_flag}"], wy)


def test_imageloader_without_torch_names_torch(tmp_path):
    """Where torch is absent, stoker.ImageLoader says it needs torch, and the
    message points JAX users to stoker.jax."""
    root = make_folder(tmp_path / "data", classes=2, per_class=2)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(stoker.__file__)))
    code = NO_TORCH + textwrap.dedent(f"""
        sys.path.insert(0, {pkg!r})
        import stoker
        try:
            stoker.ImageLoader({root!r}, batch_size=2)
        except ModuleNotFoundError as e:
            print(e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "needs PyTorch" in r.stdout and "stoker.jax" in r.stdout, r.stdout
