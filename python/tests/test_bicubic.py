"""interpolation="bicubic": Pillow's antialiased bicubic resize, byte for byte.

The references are Pillow's ``Image.resize(..., BICUBIC, box=...)`` and torchvision's
``resized_crop`` / ``resize`` + ``center_crop`` on PIL images. The sources are PNGs, so
both sides resample the same decoded pixels and every output byte must be equal.
Run with -s to see the figures.
"""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = pytest.importorskip("torchvision.transforms.functional")
Image = pytest.importorskip("PIL.Image")
from torch.utils.dlpack import from_dlpack  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402

from stoker import _stoker  # noqa: E402
from stoker import _stoker_ops  # noqa: E402  (private: the ops hooks)

from conftest import photo, save_jpeg  # noqa: E402

MODES = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC}
# tiny, non-square both ways, odd sizes, larger than the outputs and smaller
SIZES = [(300, 200), (200, 300), (257, 193), (64, 48), (17, 40), (40, 17), (5, 7), (3, 2),
         (1, 1)]
KINDS = ["noise", "hgrad", "vgrad", "steps"]


def synthetic(kind, w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    if kind == "noise":
        return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    if kind == "hgrad":
        base = x * 255.0 / max(w - 1, 1)
    elif kind == "vgrad":
        base = y * 255.0 / max(h - 1, 1)
    else:  # hard 0/255 steps and a diagonal: bicubic's overshoot is clipped there
        base = np.where(((x // 3) + (y // 2)) % 2 == 0, 0.0, 255.0)
        base[x == y] = 128
    a = np.stack([base, 255 - base, (base * 7) % 256], axis=-1)
    return np.clip(a, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A folder of PNGs (one class) and the same images as arrays, in the loader's order."""
    root = str(tmp_path_factory.mktemp("bicubic"))
    os.makedirs(os.path.join(root, "c"))
    arrays = []
    k = 0
    for kind in KINDS:
        for w, h in SIZES:
            a = synthetic(kind, w, h, 10 + k)
            Image.fromarray(a).save(os.path.join(root, "c", f"{k:03d}.png"))
            arrays.append(a)
            k += 1
    return root, arrays


def load(root, n, threads=2, **kw):
    """One epoch of uint8 NHWC images (unshuffled) and their sample indices."""
    ld = _stoker.Loader(root=root, batch_size=n, threads=threads, dtype="uint8", layout="nhwc",
                        shuffle=0, **kw)
    try:
        out, idx = [], []
        while True:
            r = ld.next()
            if r is None:
                break
            # a copy: the batch slot goes back to the loader once its tensors are freed
            out.append(from_dlpack(r[0]).permute(0, 2, 3, 1).cpu().numpy().copy())
            idx.extend(int(i) for i in r[4])
            del r
    finally:
        ld.close()
    return np.concatenate(out), idx


def report(what, got, refs):
    diff = np.abs(got.astype(np.int16) - np.stack(refs).astype(np.int16))
    print(f"\n{what}: {diff.size} values, {(diff == 0).mean() * 100:.4f}% exact, "
          f"max |diff| {int(diff.max())}")
    return diff


def eval_reference(a, resize, crop, interp):
    pil = Image.fromarray(a)
    ref = np.asarray(F.center_crop(F.resize(pil, resize, MODES[interp]), crop))
    if interp == "bicubic":
        # torchvision's resize is Pillow's, box = the whole image
        w, h = pil.size
        nw, nh = (resize, int(resize * h / w)) if w <= h else (int(resize * w / h), resize)
        top, left = int(round((nh - crop) / 2.0)), int(round((nw - crop) / 2.0))
        full = pil.resize((nw, nh), Image.BICUBIC, box=(0, 0, w, h))
        assert np.array_equal(ref, np.asarray(full)[top:top + crop, left:left + crop])
    return ref


@pytest.mark.parametrize("resize, crop", [(40, 32), (8, 8), (256, 224), (23, 17), (90, 90)])
def test_eval_bicubic_is_pillow(images, resize, crop):
    root, arrays = images
    got, _ = load(root, 9, pipeline="eval", size=crop, resize_size=resize,
                  interpolation="bicubic")
    refs = [eval_reference(a, resize, crop, "bicubic") for a in arrays]
    diff = report(f"eval bicubic Resize({resize}) CenterCrop({crop}) vs torchvision/PIL", got,
                  refs)
    # the filter took effect: bilinear's pixels are not these
    bil = [eval_reference(a, resize, crop, "bilinear") for a in arrays]
    assert not np.array_equal(np.stack(refs), np.stack(bil))
    assert int(diff.max()) == 0


def train_reference(a, i, size, scale, seed, epoch=0):
    h, w = a.shape[:2]
    top, left, ch, cw = _stoker_ops._rrc_params(w, h, scale, (3 / 4, 4 / 3), seed, epoch, i)
    return F.resized_crop(Image.fromarray(a), top, left, ch, cw, [size, size],
                          InterpolationMode.BICUBIC)


# (output size, scale): up-scaling small crops, down-scaling large ones, both
@pytest.mark.parametrize("size, scale, seed", [(32, (0.08, 1.0), 1), (224, (0.08, 1.0), 2),
                                               (8, (0.5, 1.0), 3), (48, (0.01, 0.05), 4),
                                               (13, (0.08, 1.0), 5)])
def test_train_bicubic_is_resized_crop(images, size, scale, seed):
    root, arrays = images
    got, idx = load(root, 7, pipeline="train", size=size, scale=scale, seed=seed,
                    flip_prob=0.0, interpolation="bicubic")
    refs = [np.asarray(train_reference(arrays[i], i, size, scale, seed)) for i in idx]
    diff = report(f"train bicubic RandomResizedCrop({size}, scale={scale}) vs "
                  f"torchvision resized_crop", got, refs)
    assert int(diff.max()) == 0


def test_train_bicubic_flip_mirrors(images):
    root, arrays = images
    got, idx = load(root, 36, pipeline="train", size=24, seed=9, flip_prob=1.0,
                    interpolation="bicubic")
    refs = [np.asarray(F.hflip(train_reference(arrays[i], i, 24, (0.08, 1.0), 9))) for i in idx]
    assert int(report("train bicubic, flipped", got, refs).max()) == 0


def test_bilinear_unchanged(images):
    """The default is bilinear, and bilinear is still Pillow's bilinear."""
    root, arrays = images
    dflt, _ = load(root, 36, pipeline="eval", size=32, resize_size=40)
    bil, _ = load(root, 36, pipeline="eval", size=32, resize_size=40, interpolation="bilinear")
    assert np.array_equal(dflt, bil)
    refs = [eval_reference(a, 40, 32, "bilinear") for a in arrays]
    assert int(report("eval bilinear vs torchvision", bil, refs).max()) == 0
    t0, _ = load(root, 36, pipeline="train", size=32, seed=4)
    t1, _ = load(root, 36, pipeline="train", size=32, seed=4, interpolation="bilinear")
    t2, _ = load(root, 36, pipeline="train", size=32, seed=4, interpolation="bicubic")
    assert np.array_equal(t0, t1)
    assert not np.array_equal(t1, t2)


def test_option_row():
    row = {d["name"]: d for d in _stoker.options()}["interpolation"]
    assert row["choices"] == ["bilinear", "bicubic"]
    assert row["default"] == "bilinear"
    assert (row["cli"], row["keyword"]) == ("--interpolation", "interpolation")
    with pytest.raises(ValueError, match="interpolation"):
        _stoker.Loader(root=".", interpolation="lanczos")


def test_jpeg_figures(tmp_path):
    """On JPEG photos: eval decodes the whole image as Pillow does (libjpeg-turbo both), so
    it is exact; train crops shrink by the DCT when they are at least twice the output,
    which changes the pixels a little (as with bilinear)."""
    root = str(tmp_path)
    arrays = []
    for k, (w, h) in enumerate([(500, 375), (375, 500), (640, 480), (333, 500), (1000, 200),
                                (240, 180)]):
        p = os.path.join(root, "c", f"{k:02d}.jpg")
        save_jpeg(p, photo(w, h, 40 + k))
        arrays.append(np.asarray(Image.open(p).convert("RGB")))
    got, _ = load(root, 6, pipeline="eval", size=224, resize_size=256, interpolation="bicubic")
    refs = [eval_reference(a, 256, 224, "bicubic") for a in arrays]
    assert int(report("eval bicubic on JPEGs", got, refs).max()) == 0
    for dct in (0, 1):
        got, idx = load(root, 6, pipeline="train", size=112, seed=7, flip_prob=0.0,
                        dct_scaling=dct, interpolation="bicubic")
        refs = [np.asarray(train_reference(arrays[i], i, 112, (0.08, 1.0), 7)) for i in idx]
        diff = report(f"train bicubic on JPEGs, dct_scaling={dct}", got, refs)
        mse = float((diff.astype(np.float64) ** 2).mean())
        psnr = 100.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)
        print(f"  PSNR {psnr:.2f} dB")
        if dct == 0:
            assert int(diff.max()) == 0
        else:
            assert psnr >= 30


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("pipeline", ["train", "eval"])
def test_gpu_bicubic_matches_cpu(tmp_path, pipeline):
    """device=0 with every JPEG on the GPU (nvJPEG, then the fused kernel's bicubic windows
    from window.h): the same crops as the CPU loader, equal up to the decoders' rounding
    (>= 40 dB, as the bilinear GPU path); with gpu_cpu_share=1 the workers finish every
    image and the output is the CPU loader's byte for byte."""
    root = str(tmp_path)
    for k, (w, h) in enumerate([(500, 375), (375, 500), (640, 480), (333, 500), (1000, 200),
                                (240, 180), (2000, 1500), (64, 48)]):
        save_jpeg(os.path.join(root, "c", f"{k:02d}.jpg"), photo(w, h, 60 + k))
    kw = dict(pipeline=pipeline, size=96, seed=2, interpolation="bicubic", threads=4)
    cpu, idx_c = load(root, 8, **kw)
    gpu, idx_g = load(root, 8, device=0, gpu_cpu_share=0.0, **kw)
    one, _ = load(root, 8, device=0, gpu_cpu_share=1.0, **kw)
    assert idx_c == idx_g
    assert np.array_equal(one, cpu)
    diff = report(f"GPU vs CPU, {pipeline}, bicubic", gpu, list(cpu))
    mse = float((diff.astype(np.float64) ** 2).mean())
    psnr = 100.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)
    print(f"  PSNR {psnr:.2f} dB")
    assert psnr >= 40
    bil, _ = load(root, 8, device=0, gpu_cpu_share=0.0, **dict(kw, interpolation="bilinear"))
    assert not np.array_equal(bil, gpu)  # the kernel took the filter
