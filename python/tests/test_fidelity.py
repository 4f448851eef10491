"""Pixel fidelity against torchvision, and the train crop distribution.

Run with -s to see the measured figures.
"""
import math
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tvT = pytest.importorskip("torchvision.transforms")
datasets = pytest.importorskip("torchvision.datasets")

import stoker  # noqa: E402
from stoker import _stoker_ops  # noqa: E402  (private: the ops hooks)
from stoker import transforms as T  # noqa: E402

from conftest import photo, save_jpeg  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SIZES = [(500, 375), (375, 500), (333, 500), (500, 333), (640, 480), (256, 300), (240, 180),
         (224, 224), (1000, 200)]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("photos"))
    k = 0
    for c in range(2):
        for w, h in SIZES:
            save_jpeg(os.path.join(root, f"c{c}", f"{k:03d}_{w}x{h}.jpg"), photo(w, h, 100 + k))
            k += 1
    return root


def psnr(a, b):
    mse = float(((a.double() - b.double()) ** 2).mean())
    return 100.0 if mse < 1e-10 else 10 * math.log10(1.0 / mse)  # 100 dB stands for "identical"


def reference(root, transform):
    ds = datasets.ImageFolder(root, transform=transform)
    return torch.stack([ds[i][0] for i in range(len(ds))]), ds


def test_eval_pipeline_matches_torchvision(photos):
    tv = tvT.Compose([tvT.Resize(256), tvT.CenterCrop(224), tvT.ToTensor()])
    ref, ds = reference(photos, tv)
    ld = stoker.ImageLoader(photos, batch_size=5, pipeline=[T.Resize(256), T.CenterCrop(224),
                                                             T.ToTensor()], threads=2)
    got = torch.cat([x for x, _ in ld])  # eval: dataset order
    assert got.shape == ref.shape
    values = [psnr(g, r) for g, r in zip(got, ref)]
    mean_psnr = sum(values) / len(values)
    max_diff = float((got - ref).abs().max()) * 255
    print(f"\neval vs torchvision (Resize 256, CenterCrop 224, ToTensor) on {len(values)} JPEGs: "
          f"mean PSNR {mean_psnr:.2f} dB, min {min(values):.2f} dB, "
          f"max |diff| {max_diff:.2f} / 255")
    assert mean_psnr >= 35
    assert min(values) >= 30


def test_eval_pipeline_with_normalize_matches_torchvision(photos):
    tv = tvT.Compose([tvT.Resize(256), tvT.CenterCrop(224), tvT.ToTensor(),
                      tvT.Normalize(MEAN, STD)])
    ref, _ = reference(photos, tv)
    ld = stoker.ImageLoader(photos, batch_size=6, pipeline="eval", size=224, threads=2)
    got = torch.cat([x for x, _ in ld])
    diff = (got - ref).abs()
    # The same 8-bit pixels give float32 values equal up to rounding.
    print(f"\neval + Normalize: mean |diff| {float(diff.mean()):.2e}, "
          f"share of values off by more than 1e-5: {float((diff > 1e-5).double().mean()):.2e}")
    assert float(diff.mean()) < 2e-2


def ks_statistic(a, b):
    """Two-sample Kolmogorov-Smirnov statistic: max distance between the ECDFs."""
    a, b = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    grid = np.concatenate([a, b])
    fa = np.searchsorted(a, grid, side="right") / len(a)
    fb = np.searchsorted(b, grid, side="right") / len(b)
    return float(np.abs(fa - fb).max())


def crops_stoker(w, h, n, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), seed=0):
    return np.array([_stoker_ops._rrc_params(w, h, scale, ratio, seed, 0, i) for i in range(n)])


def crops_torchvision(w, h, n, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), seed=0):
    torch.manual_seed(seed)
    img = torch.empty(3, h, w)
    return np.array([tvT.RandomResizedCrop.get_params(img, list(scale), list(ratio))
                     for _ in range(n)])


@pytest.mark.parametrize("w, h", [(500, 375), (600, 120)])
def test_train_crop_distribution_matches_torchvision(w, h):
    n = 20000
    s, t = crops_stoker(w, h, n), crops_torchvision(w, h, n)
    stats = {}
    for name, f in {
        "area": lambda c: c[:, 2] * c[:, 3] / (w * h),
        "log aspect": lambda c: np.log(c[:, 3] / c[:, 2]),
        "centre x": lambda c: (c[:, 1] + c[:, 3] / 2) / w,
        "centre y": lambda c: (c[:, 0] + c[:, 2] / 2) / h,
    }.items():
        stats[name] = ks_statistic(f(s), f(t))
    print(f"\nRandomResizedCrop on {w}x{h}, {n} draws each, KS statistic: "
          + ", ".join(f"{k} {v:.4f}" for k, v in stats.items()))
    for v in stats.values():
        assert v < 0.03
    # Every crop lies inside the image.
    assert (s[:, 0] >= 0).all() and (s[:, 1] >= 0).all()
    assert (s[:, 0] + s[:, 2] <= h).all() and (s[:, 1] + s[:, 3] <= w).all()


@pytest.mark.parametrize("w, h", [(2000, 30), (30, 2000)])
def test_train_crop_fallback_on_extreme_images(w, h):
    s, t = crops_stoker(w, h, 200), crops_torchvision(w, h, 200)
    assert (t == t[0]).all()  # torchvision always falls back to the same central crop here
    assert (s == t[0]).all(), (s[0], t[0])
    print(f"\nfallback on {w}x{h}: (top, left, h, w) = {tuple(int(v) for v in s[0])}")


def test_train_crop_params_depend_on_seed_epoch_index():
    a = _stoker_ops._rrc_params(500, 375, (0.08, 1.0), (3 / 4, 4 / 3), 0, 0, 5)
    assert a == _stoker_ops._rrc_params(500, 375, (0.08, 1.0), (3 / 4, 4 / 3), 0, 0, 5)
    others = {_stoker_ops._rrc_params(500, 375, (0.08, 1.0), (3 / 4, 4 / 3), *k)
              for k in [(1, 0, 5), (0, 1, 5), (0, 0, 6)]}
    assert a not in others


def test_train_pipeline_output_is_sane(photos):
    """Train batches are the crops resized: compare each to torchvision's crop of the same box."""
    ld = stoker.ImageLoader(photos, batch_size=6, pipeline=[T.RandomResizedCrop(64), T.ToTensor()],
                            threads=2, seed=11, dct_scaling=False, shuffle=False)
    ds = datasets.ImageFolder(photos)
    worst = 100.0
    for b in ld.iter_batches():
        for img, idx in zip(b.images, b.indices):
            pil = ds.loader(ds.samples[idx][0])
            top, left, ch, cw = _stoker_ops._rrc_params(pil.width, pil.height, (0.08, 1.0),
                                                     (3 / 4, 4 / 3), 11, b.epoch, idx)
            # torchvision's RandomResizedCrop on a PIL image with this box:
            ref_pil = tvT.functional.to_tensor(
                tvT.functional.resized_crop(pil, top, left, ch, cw, [64, 64]))
            assert ref_pil.shape == img.shape
            # The flip is drawn after the crop: compare with whichever matches.
            worst = min(worst, max(psnr(img, ref_pil), psnr(img, ref_pil.flip(-1))))
    print(f"\ntrain crops vs PIL crop+resize of the same box: worst PSNR {worst:.2f} dB")
    assert worst >= 35
