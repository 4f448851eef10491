"""The reference recipes as their authors' code builds them, run by stoker and
by their own code over the same photos: the statistics of the output batches
(per-channel mean and standard deviation over an epoch) agree within the
seed-to-seed spread of the reference itself. Catches a transform accepted but
applied differently (a wrong magnitude, a missing op, a wrong order) that
per-op tests with fixed draws would not see."""
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
stoker = pytest.importorskip("stoker")

from conftest import import_or_tools_venv, make_folder  # noqa: E402

SEEDS = tuple(range(6))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    sizes = ((160, 120), (120, 160), (140, 140), (200, 150))
    return make_folder(tmp_path_factory.mktemp("stats"), classes=4, per_class=16, sizes=sizes)


def stats(batches):
    x = torch.cat(batches).double()
    return np.array([x.mean((0, 2, 3)).numpy(), x.std((0, 2, 3)).numpy()])  # (2, 3)


def reference(folder, tf, seed):
    from torchvision.datasets import ImageFolder

    # timm's RandAugment and RandomErasing draw from Python's and numpy's
    # global generators, not torch's: all three are seeded, so that the
    # reference (and so the test's verdict) is the same in every run
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    ds = ImageFolder(folder, transform=tf)
    return stats([x for x, _ in torch.utils.data.DataLoader(ds, batch_size=16, num_workers=0)])


def ours(folder, tf, seed):
    with stoker.ImageLoader(folder, batch_size=16, threads=2, pipeline=tf, seed=seed,
                            shuffle=False) as ld:
        return stats([x.clone() for x, _ in ld])


def agree(folder, tf):
    ref = np.stack([reference(folder, tf, s) for s in SEEDS])
    got = np.stack([ours(folder, tf, s) for s in SEEDS])
    # the seed-to-seed spread, pooled over both sides (a few runs of one side
    # alone may understate it); the bound is 4 standard errors of the
    # difference of the two means
    spread = np.sqrt((ref.var(0, ddof=1) + got.var(0, ddof=1)) / 2) + 1e-3
    bound = 4 * spread * np.sqrt(2 / len(SEEDS))
    diff = np.abs(got.mean(0) - ref.mean(0))
    assert (diff <= bound).all(), f"|stoker - reference| {diff} over {bound}"
    # and neither side is degenerate: the spread is that of random augmentation
    assert (got.std(0) > 0).all() and (got.std(0) < 10 * spread + 0.05).all()


def test_torchvision_reference_preset_statistics(folder):
    """references/classification/presets.py, ClassificationPresetTrain with
    TrivialAugmentWide and random erasing, as it builds the v1 list."""
    T = torchvision.transforms
    tf = T.Compose([
        T.RandomResizedCrop(96), T.RandomHorizontalFlip(0.5),
        T.TrivialAugmentWide(interpolation=T.InterpolationMode.BILINEAR),
        T.PILToTensor(), T.ConvertImageDtype(torch.float),
        T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), T.RandomErasing(0.25)])
    agree(folder, tf)


def test_timm_create_transform_statistics(folder):
    timm = import_or_tools_venv("timm")
    if timm is None:
        pytest.skip("timm is not installed (scripts/install-deps.sh --python)")
    from timm.data import create_transform

    tf = create_transform(96, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
                          re_prob=0.25, interpolation="bicubic")
    agree(folder, tf)
