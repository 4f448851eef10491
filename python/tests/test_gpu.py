"""device="cuda": runs on a machine with an NVIDIA GPU, skips cleanly elsewhere."""
import math

import pytest

torch = pytest.importorskip("torch")
import stoker  # noqa: E402

from conftest import make_folder  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-photos")
    make_folder(str(root), classes=3, per_class=12,
                sizes=((500, 375), (375, 500), (333, 500), (640, 480)), seed=5)
    return str(root)


def _levels(x):
    m = torch.tensor(MEAN).view(1, 3, 1, 1)
    s = torch.tensor(STD).view(1, 3, 1, 1)
    return (x.float().cpu() * s + m) * 255


def test_batches_on_the_device(photos):
    with stoker.ImageLoader(photos, batch_size=8, device="cuda", threads=4) as ld:
        n = 0
        for x, y in ld:
            assert x.is_cuda and y.is_cuda
            assert x.shape[1:] == (3, 224, 224) and x.dtype == torch.float32
            assert y.dtype == torch.int64
            assert torch.isfinite(x).all()
            n += x.shape[0]
        assert n == 36
        st = ld.stats()
        assert st["device_bytes"] > 0


def test_eval_matches_cpu(photos):
    """The GPU eval pipeline against the CPU one, on the same samples: >= 40 dB."""
    kw = dict(batch_size=12, pipeline="eval", threads=4)
    g = stoker.ImageLoader(photos, device="cuda", **kw)
    c = stoker.ImageLoader(photos, device="cpu", **kw)
    psnr = []
    for (xg, yg), (xc, yc) in zip(g, c):
        assert torch.equal(yg.cpu(), yc)
        a, b = _levels(xg), _levels(xc)
        for i in range(a.shape[0]):
            mse = float(((a[i] - b[i]) ** 2).mean())
            psnr.append(100.0 if mse < 1e-9 else 10 * math.log10(255 ** 2 / mse))
    assert len(psnr) == 36
    mean = sum(psnr) / len(psnr)
    print(f"eval GPU vs CPU: mean PSNR {mean:.2f} dB, min {min(psnr):.2f} dB")
    assert mean >= 40.0


def test_held_batches_are_not_overwritten(photos):
    with stoker.ImageLoader(photos, batch_size=4, device="cuda", threads=4, prefetch=2) as ld:
        it = iter(ld)
        x0, y0 = next(it)
        keep = x0.clone()
        torch.cuda.synchronize()
        for _ in range(3):
            next(it)
        torch.cuda.synchronize()
        assert torch.equal(x0, keep)


def test_bf16_channels_last(photos):
    with stoker.ImageLoader(photos, batch_size=6, device="cuda", dtype=torch.bfloat16,
                            channels_last=True, threads=4) as ld:
        x, y = next(iter(ld))
        assert x.dtype == torch.bfloat16
        assert x.is_contiguous(memory_format=torch.channels_last)


def test_device_memory_cap(photos):
    with pytest.raises(MemoryError, match="max_device_bytes"):
        stoker.ImageLoader(photos, batch_size=64, device="cuda", max_device_bytes=1 << 20)
