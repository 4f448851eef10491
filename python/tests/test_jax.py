"""stoker.jax: the torch iterator's batches as jax.Array, byte for byte, on one
device and sharded over two host devices (XLA_FLAGS in a child process, as
JAX reads them once)."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import import_or_tools_venv, make_folder

stoker = pytest.importorskip("stoker")

jax = import_or_tools_venv("jax")
pytestmark = pytest.mark.skipif(jax is None, reason="jax is not installed (scripts/install-deps.sh --python)")

CHILD = textwrap.dedent("""
    import os, sys
    sys.path[:0] = [sys.argv[2]]
    sys.path.append(sys.argv[3])
    import jax, numpy as np, torch
    import stoker, stoker.jax
    root, sharded = sys.argv[1], sys.argv[4] == "1"
    kw = dict(batch_size=8, size=32, threads=2, seed=4, pipeline="train", drop_last=True)
    with stoker.ImageLoader(root, **kw) as ld:
        want = [(x.numpy().copy(), y.numpy().copy()) for x, y in ld]
    got = []
    with stoker.jax.JaxLoader(root, sharded=sharded, **kw) as it:
        assert len(it) == len(want), (len(it), len(want))
        for x, y in it:
            if sharded:
                assert len(x.sharding.device_set) == 2, x.sharding
                assert {s.data.shape[0] for s in x.addressable_shards} == {4}
            got.append((np.asarray(x), np.asarray(y)))
    assert len(got) == len(want)
    for (gx, gy), (wx, wy) in zip(got, want):
        assert gx.dtype == wx.dtype and gx.shape == wx.shape
        assert np.array_equal(gx, wx) and np.array_equal(gy, wy)
    print("ok", len(got), jax.device_count())
""")


@pytest.mark.parametrize("sharded", [False, True])
def test_jax_batches_equal_torch_batches(tmp_path, sharded):
    root = make_folder(tmp_path / "data", classes=3, per_class=12)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    site = os.path.dirname(os.path.dirname(jax.__file__))
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(stoker.__file__)))  # the stoker tested
    r = subprocess.run([sys.executable, "-c", CHILD, str(root), pkg, site, "1" if sharded else "0"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split()[:3] == ["ok", "4", "2"], r.stdout
