"""timm's RandAugment config strings ("rand-m9-mstd0.5-inc1") as a stoker policy.

The expected values come from timm's definition (timm/data/auto_augment.py:
_LEVEL_DENOM = 10, the level-to-argument functions, AugmentOp's probability and
magnitude noise, RandAugment's choice with replacement), written out here, and
each op is compared with the PIL calls timm's op functions make (timm's own
functions when timm is importable), on the same uint8 images as
test_augment.py.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

import stoker  # noqa: E402
from stoker import _stoker_ops  # noqa: E402  (private: the ops hooks)
from stoker import transforms as T  # noqa: E402

from conftest import import_or_tools_venv, make_folder, op_test_images  # noqa: E402

import_or_tools_venv("timm")  # the interpreter's timm, or .venv-tools'

NAMES = _stoker_ops._op_names()
MAX_OPS = 24  # STK__AUG_MAX_OPS

try:  # timm's own op functions, when timm is there
    from timm.data import auto_augment as timm_aa
except Exception:  # noqa: BLE001 - any import failure means: use the PIL calls
    timm_aa = None


# ---- the config string ---------------------------------------------------------

@pytest.mark.parametrize("config,expect", [
    ("rand-m9-mstd0.5-inc1", dict(magnitude=9, num_ops=2, mstd=0.5, mmax=0, increasing=True,
                                  prob=0.5)),
    ("rand-m7-n3-mstd1.0", dict(magnitude=7, num_ops=3, mstd=1.0, mmax=0, increasing=False,
                                prob=0.5)),
    ("rand-m9-mstd0.5", dict(magnitude=9, num_ops=2, mstd=0.5, mmax=0, increasing=False,
                             prob=0.5)),
    ("rand-n1-m15-mmax20-p0.8", dict(magnitude=15, num_ops=1, mstd=0.0, mmax=20,
                                     increasing=False, prob=0.8)),
    ("rand-mstd101", dict(magnitude=10, num_ops=2, mstd=float("inf"), mmax=0, increasing=False,
                          prob=0.5)),
    ("rand", dict(magnitude=10, num_ops=2, mstd=0.0, mmax=0, increasing=False, prob=0.5)),
])
def test_config_string_parses(config, expect):
    p = T.TimmRandAugment(config).params
    assert {k: p[k] for k in expect} == expect
    assert p["fill"] == (128.0, 128.0, 128.0) and p["translate_pct"] == 0.45
    assert p["interpolation"] == "random"  # timm's default: bilinear or bicubic per warp
    assert T.RandAugment.from_timm(config) == T.TimmRandAugment(config)
    opts = T.pipeline_options([T.RandomResizedCrop(32), T.TimmRandAugment(config)])
    assert opts["auto_augment"] == "timm" and opts["ra_num_ops"] == expect["num_ops"]
    assert opts["timm_magnitude"] == expect["magnitude"] and opts["timm_prob"] == expect["prob"]
    assert opts["timm_increasing"] == expect["increasing"] and opts["timm_mmax"] == expect["mmax"]


def test_hparams_as_timm_takes_them():
    p = T.TimmRandAugment("rand-m9-mstd0.5", {"img_mean": (124, 116, 104), "translate_pct": 0.3,
                                              "magnitude_std": 2.0, "translate_const": 100,
                                              "interpolation": 0}).params
    assert p["fill"] == (124.0, 116.0, 104.0) and p["translate_pct"] == 0.3
    assert p["mstd"] == 2.0  # timm: hparams.setdefault, so hparams win
    assert p["interpolation"] == "nearest"


@pytest.mark.parametrize("config,part", [
    ("rnd-m9", "rnd"), ("rand-m9-x3", "x3"), ("rand-mX", "mX"), ("rand-m9-inc0", "inc0"),
    ("rand-m9-tweights", "tweights"), ("rand-m9-n17", "n17"), ("rand-m9.5", "m9.5"),
    ("rand-m9--n2", "''"), ("rand-p1.5", "p1.5"), ("augmix-m5", "augmix"),
])
def test_bad_config_strings_are_refused_by_name(config, part):
    with pytest.raises(ValueError, match=part.replace(".", r"\.")):
        T.TimmRandAugment(config)


def test_interpolation_hparams():
    for given, want in [("bicubic", "bicubic"), (3, "bicubic"), ("bilinear", "bilinear"),
                        (2, "bilinear"), (0, "nearest"), ((2, 3), "random"), ("random", "random")]:
        p = T.TimmRandAugment("rand-m9", {"interpolation": given}).params
        assert p["interpolation"] == want, given
        opts = T.pipeline_options([T.RandomResizedCrop(32), T.TimmRandAugment(
            "rand-m9", {"interpolation": given})])
        assert opts["aug_interpolation"] == want


def test_bad_hparams_are_refused():
    with pytest.raises(ValueError, match="bilinear, bicubic"):
        T.TimmRandAugment("rand-m9", {"interpolation": "lanczos"})
    with pytest.raises(ValueError, match="random choice"):
        T.TimmRandAugment("rand-m9", {"interpolation": (0, 3)})
    with pytest.raises(ValueError, match="weights"):
        T.TimmRandAugment("rand-m9", {"weights": 1})
    with pytest.raises(ValueError, match="img_mean"):
        T.TimmRandAugment("rand-m9", {"img_mean": (300, 0, 0)})


@pytest.mark.skipif(timm_aa is None, reason="timm is not installed")
def test_timm_objects_are_read_back():
    for config in ("rand-m9-mstd0.5-inc1", "rand-m7-n3-mstd1.0", "rand-m9-mstd0.5"):
        ra = timm_aa.rand_augment_transform(config, {"img_mean": (124, 116, 104)})
        mine = T.TimmRandAugment(config, {"img_mean": (124, 116, 104)}).params
        assert T._timm_params(ra) == dict(mine, magnitude=float(mine["magnitude"]))
    ra = timm_aa.rand_augment_transform("rand-m9-tweights", {})
    with pytest.raises(ValueError, match="weights"):
        T._timm_params(ra)


# ---- per op: stoker's C op against the PIL calls timm makes ----------------------

IMAGES = op_test_images()
FILL = (124, 116, 104)


def ours(name, a, mag, nearest=False, fill=FILL):
    """nearest: the warp filter, 0 (False) bilinear, 1 (True) nearest, 2 bicubic."""
    h, w, _ = a.shape
    out = _stoker_ops._apply_op(name, a.tobytes(), w, h, float(mag), int(nearest),
                            [float(v) for v in fill], 0)
    return np.frombuffer(out, np.uint8).reshape(h, w, 3)


def _pil_ops():
    """timm's op functions, or, without timm, the same PIL calls they make."""
    from PIL import ImageEnhance, ImageOps

    if timm_aa is not None:
        A = timm_aa
        return {
            "pil_autocontrast": lambda im, m, kw: A.auto_contrast(im),
            "Equalize": lambda im, m, kw: A.equalize(im),
            "Invert": lambda im, m, kw: A.invert(im),
            "Posterize": lambda im, m, kw: A.posterize(im, int(m)),
            "Solarize": lambda im, m, kw: A.solarize(im, int(m)),
            "SolarizeAdd": lambda im, m, kw: A.solarize_add(im, int(m)),
            "pil_color": lambda im, m, kw: A.color(im, m),
            "pil_contrast": lambda im, m, kw: A.contrast(im, m),
            "adjust_brightness": lambda im, m, kw: A.brightness(im, m),
            "pil_sharpness": lambda im, m, kw: A.sharpness(im, m),
            "pil_shear_x": lambda im, m, kw: A.shear_x(im, m, **kw),
            "pil_shear_y": lambda im, m, kw: A.shear_y(im, m, **kw),
            "pil_translate_x": lambda im, m, kw: A.translate_x_abs(im, m, **kw),
            "pil_translate_y": lambda im, m, kw: A.translate_y_abs(im, m, **kw),
            "pil_rotate": lambda im, m, kw: A.rotate(im, m, **kw),
        }

    def solarize_add(im, add):
        lut = [min(255, i + add) if i < 128 else i for i in range(256)]
        return im.point(lut * 3)

    def posterize(im, bits):
        return im if bits >= 8 else ImageOps.posterize(im, bits)

    def affine(data):
        return lambda im, m, kw: im.transform(im.size, Image.AFFINE, data(m), **kw)

    return {
        "pil_autocontrast": lambda im, m, kw: ImageOps.autocontrast(im),
        "Equalize": lambda im, m, kw: ImageOps.equalize(im),
        "Invert": lambda im, m, kw: ImageOps.invert(im),
        "Posterize": lambda im, m, kw: posterize(im, int(m)),
        "Solarize": lambda im, m, kw: ImageOps.solarize(im, int(m)),
        "SolarizeAdd": lambda im, m, kw: solarize_add(im, int(m)),
        "pil_color": lambda im, m, kw: ImageEnhance.Color(im).enhance(m),
        "pil_contrast": lambda im, m, kw: ImageEnhance.Contrast(im).enhance(m),
        "adjust_brightness": lambda im, m, kw: ImageEnhance.Brightness(im).enhance(m),
        "pil_sharpness": lambda im, m, kw: ImageEnhance.Sharpness(im).enhance(m),
        "pil_shear_x": affine(lambda m: (1, m, 0, 0, 1, 0)),
        "pil_shear_y": affine(lambda m: (1, 0, 0, m, 1, 0)),
        "pil_translate_x": affine(lambda m: (1, 0, m, 0, 1, 0)),
        "pil_translate_y": affine(lambda m: (1, 0, 0, 0, 1, m)),
        "pil_rotate": lambda im, m, kw: im.rotate(m, **kw),
    }


# the magnitudes timm's level functions give (m = 9 and others), as float32
TIMM_OPS = [
    ("pil_autocontrast", [0]), ("Equalize", [0]), ("Invert", [0]),
    ("Posterize", [0, 1, 3, 4, 8, -2]), ("Solarize", [0, 26, 128, 230, 256]),
    ("SolarizeAdd", [0, 99, 110, 128]),
    ("pil_color", [0.1, 1.72, 0.55, 1.9, 0.19]), ("pil_contrast", [0.1, 1.72, 0.55, 1.9, 0.19]),
    ("adjust_brightness", [0.1, 1.72, 0.55, 1.9]), ("pil_sharpness", [0.1, 1.72, 0.55, 1.9]),
    ("pil_shear_x", [0.27, -0.3, 0.1]), ("pil_shear_y", [0.27, -0.3]),
    ("pil_translate_x", [71.28, -20.5, 3.0]), ("pil_translate_y", [71.28, -20.5]),
    ("pil_rotate", [27.0, -13.5, 90.0, 180.0, -90.0, 0.0]),
]
WARPS = {"pil_shear_x", "pil_shear_y", "pil_translate_x", "pil_translate_y", "pil_rotate"}


@pytest.mark.parametrize("name,mags", TIMM_OPS, ids=[n for n, _ in TIMM_OPS])
def test_ops_match_timms_pil_ops_bit_for_bit(name, mags):
    fn = _pil_ops()[name]
    for i, a in enumerate(IMAGES):
        for mag in mags:
            mag = float(np.float32(mag))
            # the filters: 0 bilinear, 1 nearest, 2 bicubic (stoker's _apply_op codes)
            for filt in ((0, 1, 2) if name in WARPS else (0,)):
                kw = {"resample": (Image.BILINEAR, Image.NEAREST, Image.BICUBIC)[filt],
                      "fillcolor": FILL} if name in WARPS else {}
                ref = np.asarray(fn(Image.fromarray(a), mag, kw))
                mine = ours(name, a, mag, filt)
                d = mine.astype(int) - ref.astype(int)
                assert not d.any(), (f"{name}({mag}) image {i} {a.shape} filter={filt}: "
                                     f"{np.count_nonzero(d)} values differ, max {abs(d).max()}")


def test_a_wrong_op_is_caught():
    """The comparison can fail: torchvision's colour blend is not PIL's."""
    from PIL import ImageEnhance

    a = IMAGES[0]
    ref = np.asarray(ImageEnhance.Color(Image.fromarray(a)).enhance(1.72))
    assert (ours("Color", a, 0.72) != ref).any()
    assert (ours("pil_color", a, 1.72) == ref).all()


# ---- the draws: timm's distributions --------------------------------------------

N = 400_000
TIMM_KINDS = ["pil_autocontrast", "Equalize", "Invert", "pil_rotate", "Posterize", "Solarize",
              "SolarizeAdd", "pil_color", "pil_contrast", "adjust_brightness", "pil_sharpness",
              "pil_shear_x", "pil_shear_y", "pil_translate_x", "pil_translate_y"]
SIZE = 176


def _draws(config, n=N, **hp):
    opts = T.pipeline_options([T.RandomResizedCrop(SIZE), T.TimmRandAugment(config, hp or None)])
    for k in ("pipeline", "interpolation", "scale", "ratio", "flip_prob"):
        opts.pop(k, None)
    kinds, mags, _ = _stoker_ops._aug_draws(0, 0, n, **opts)
    k = np.frombuffer(kinds, np.uint8).reshape(n, MAX_OPS)
    m = np.frombuffer(mags, np.float32).reshape(n, MAX_OPS)
    return k, m


def _chi2_ok(counts, probs, alpha=1e-4):
    from scipy import stats

    counts = np.asarray(counts, float)
    return stats.chisquare(counts, np.asarray(probs, float) * counts.sum()).pvalue > alpha


def test_op_choice_and_application_probability():
    pytest.importorskip("scipy")
    k, _ = _draws("rand-m9-n3-p0.3")
    applied = (k != 255).sum(1)
    # each of n = 3 ops chosen, then applied with p = 0.3: Binomial(3, 0.3)
    p = 0.3
    binom = [(1 - p) ** 3, 3 * p * (1 - p) ** 2, 3 * p * p * (1 - p), p ** 3]
    assert _chi2_ok(np.bincount(applied, minlength=4), binom)
    q = 0.31  # a probability one hundredth off is told apart
    assert not _chi2_ok(np.bincount(applied, minlength=4),
                        [(1 - q) ** 3, 3 * q * (1 - q) ** 2, 3 * q * q * (1 - q), q ** 3])
    # the ops applied: uniform over timm's 15, with replacement
    ids = [NAMES.index(n) for n in TIMM_KINDS]
    flat = k[k != 255]
    counts = np.array([np.sum(flat == i) for i in ids])
    assert counts.sum() == flat.size  # no other kind
    assert _chi2_ok(counts, [1 / 15] * 15)
    # with replacement: the same op twice in a sample as often as chance says
    k2, _ = _draws("rand-m9-n2-p1.0", n=100_000)
    assert (k2[:, :2] != 255).all() and (k2[:, 2:] == 255).all()
    same = np.mean(k2[:, 0] == k2[:, 1])
    assert abs(same - 1 / 15) < 0.005


def test_magnitudes_without_noise_follow_timms_level_functions():
    """m = 9, mstd 0: each op's argument from timm's level-to-arg functions."""
    k, m = _draws("rand-m9-p1.0", n=50_000)
    lv = 9 / 10
    expect = {  # non-increasing set (_RAND_TRANSFORMS)
        "Posterize": {int(lv * 4)}, "Solarize": {min(256, int(lv * 256))},
        "SolarizeAdd": {min(128, int(lv * 110))},
        "pil_color": {lv * 1.8 + 0.1}, "pil_contrast": {lv * 1.8 + 0.1},
        "adjust_brightness": {lv * 1.8 + 0.1}, "pil_sharpness": {lv * 1.8 + 0.1},
        "pil_rotate": {lv * 30, -lv * 30}, "pil_shear_x": {lv * 0.3, -lv * 0.3},
        "pil_shear_y": {lv * 0.3, -lv * 0.3},
        "pil_translate_x": {lv * 0.45 * SIZE, -lv * 0.45 * SIZE},
        "pil_translate_y": {lv * 0.45 * SIZE, -lv * 0.45 * SIZE},
    }
    for name, vals in expect.items():
        got = m[k == NAMES.index(name)]
        assert got.size > 1000
        assert set(np.unique(got).tolist()) == {float(np.float32(v)) for v in vals}, name
        if len(vals) == 2:  # _randomly_negate: either sign with p = 0.5
            assert _chi2_ok([np.sum(got > 0), np.sum(got < 0)], [0.5, 0.5]), name
    k, m = _draws("rand-m9-p1.0-inc1", n=50_000)
    expect = {  # _RAND_INCREASING_TRANSFORMS
        "Posterize": {4 - int(lv * 4)}, "Solarize": {256 - min(256, int(lv * 256))},
        "pil_color": {1 + lv * 0.9, max(0.1, 1 - lv * 0.9)},
        "pil_contrast": {1 + lv * 0.9, max(0.1, 1 - lv * 0.9)},
        "adjust_brightness": {1 + lv * 0.9, max(0.1, 1 - lv * 0.9)},
        "pil_sharpness": {1 + lv * 0.9, max(0.1, 1 - lv * 0.9)},
    }
    for name, vals in expect.items():
        got = m[k == NAMES.index(name)]
        assert set(np.unique(got).tolist()) == {float(np.float32(v)) for v in vals}, name


@pytest.mark.skipif(timm_aa is None, reason="timm is not installed")
def test_level_functions_agree_with_timms_own():
    k, m = _draws("rand-m7-p1.0-inc1", n=20_000)
    for ours_name, timm_name in [("Posterize", "PosterizeIncreasing"),
                                 ("Solarize", "SolarizeIncreasing"),
                                 ("SolarizeAdd", "SolarizeAdd"),
                                 ("pil_rotate", "Rotate"), ("pil_shear_x", "ShearX")]:
        ref = {abs(float(np.float32(timm_aa.LEVEL_TO_ARG[timm_name](7.0, {})[0])))
               for _ in range(50)}
        got = set(np.abs(np.unique(m[k == NAMES.index(ours_name)])).tolist())
        assert got == ref, ours_name


def _magnitude_of_color(k, m):
    """The magnitude M behind pil_color's factor f = M / 10 * 1.8 + 0.1."""
    f = m[k == NAMES.index("pil_color")].astype(np.float64)
    return (f - 0.1) / 1.8 * 10


def test_magnitude_noise_is_timms_clipped_gaussian():
    pytest.importorskip("scipy")
    from scipy import stats

    k, m = _draws("rand-m9-mstd0.5-p1.0", n=N)
    mag = _magnitude_of_color(k, m)
    # random.gauss(9, 0.5) clipped to [0, 10]: P(clipped) = 1 - Phi(2)
    top = 1 - stats.norm.cdf(2.0)
    at_top = np.isclose(mag, 10, atol=1e-4)
    assert _chi2_ok([at_top.sum(), (~at_top).sum()], [top, 1 - top])
    # below the bound: the normal's own law
    below = mag[~at_top]
    assert stats.kstest(below, stats.truncnorm(-np.inf, 2.0, loc=9, scale=0.5).cdf).pvalue > 1e-4
    # mean and std of the clipped variable, from the definition
    x = np.linspace(9 - 10 * 0.5, 10, 200_001)
    pdf = stats.norm.pdf(x, 9, 0.5)
    mean = np.trapz(x * pdf, x) + 10 * top
    var = np.trapz((x - mean) ** 2 * pdf, x) + (10 - mean) ** 2 * top
    assert abs(mag.mean() - mean) < 5 * np.sqrt(var / mag.size)
    assert abs(mag.std() - np.sqrt(var)) < 0.005
    # a wrong noise (std 0.6) is told apart
    assert stats.kstest(below, stats.truncnorm(-np.inf, 2 / 1.2, loc=9, scale=0.6).cdf).pvalue < 1e-4
    # mmax: clipped to [0, 20] instead, so m = 15 with noise is not clipped at 10
    k, m = _draws("rand-m15-mstd1-mmax20-p1.0", n=50_000)
    mag = _magnitude_of_color(k, m)
    assert abs(mag.mean() - 15) < 0.05 and mag.max() > 17
    # mstd > 100: uniform in [0, m]
    k, m = _draws("rand-m9-mstd101-p1.0", n=100_000)
    mag = _magnitude_of_color(k, m)
    assert stats.kstest(mag, stats.uniform(0, 9).cdf).pvalue > 1e-4


# ---- the loader: its draws replayed through timm's PIL ops ----------------------

TRAIN = dict(threads=2, shuffle=False, dtype="uint8", seed=5)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("timm"), classes=4, per_class=6,
                       sizes=((120, 90), (90, 120), (100, 100)))


def _batches(loader):
    return [(b.images.clone(), list(b.indices), b.epoch) for b in loader.iter_batches()]


# the filter of a warp the draws carry (stoker.op.warp - 1: STK__WARP_ values)
WARP_FILTER = {0: Image.BILINEAR, 1: Image.NEAREST, 2: Image.BICUBIC}


@pytest.mark.parametrize("config,interp", [("rand-m9-mstd0.5-inc1", "bilinear"),
                                           ("rand-m7-n3-mstd1.0", "bilinear"),
                                           ("rand-m9-n3-mstd0.5-inc1", "bicubic"),
                                           ("rand-m9-n3-mstd0.5", "random")])
def test_loader_replays_through_timms_ops(folder, config, interp):
    base = [T.RandomResizedCrop(64), T.RandomHorizontalFlip()]
    tr = T.TimmRandAugment(config, {"img_mean": FILL, "interpolation": interp})
    plain = _batches(stoker.ImageLoader(folder, 8, pipeline=base, **TRAIN))
    aug = _batches(stoker.ImageLoader(folder, 8, pipeline=base + [tr], **TRAIN))
    opts = T.pipeline_options(base + [tr])
    for k in ("pipeline", "interpolation", "scale", "ratio", "flip_prob"):
        opts.pop(k, None)
    fns = _pil_ops()
    fixed = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}.get(interp)
    applied, filters = 0, []
    for (x0, idx, epoch), (x1, idx1, _) in zip(plain, aug):
        assert idx == idx1
        for j, i in enumerate(idx):
            kinds, mags, _, _, _, warps, _ = _stoker_ops._aug_draws(epoch, i, 1, 2,
                                                                seed=TRAIN["seed"], **opts)
            im = Image.fromarray(x0[j].permute(1, 2, 0).numpy())
            for kind, mag, wf in zip(np.frombuffer(kinds, np.uint8),
                                     np.frombuffer(mags, np.float32), np.frombuffer(warps, np.uint8)):
                if kind == 255:
                    continue
                if NAMES[kind] in WARPS:
                    # random: the filter drawn for this warp; else none drawn
                    assert (wf != 0) == (interp == "random")
                    resample = WARP_FILTER[wf - 1] if wf else fixed
                    filters.append(resample)
                else:
                    resample = fixed
                im = fns[NAMES[kind]](im, float(mag), {"resample": resample, "fillcolor": FILL})
                applied += 1
            assert (np.asarray(im) == x1[j].permute(1, 2, 0).numpy()).all(), (i, config, interp)
    assert applied > 10
    if interp == "random":  # both filters ran
        assert set(filters) == {Image.BILINEAR, Image.BICUBIC}


def test_random_warp_filters_are_a_fair_coin_per_warp():
    """timm's _interpolation: random.choice((BILINEAR, BICUBIC)) per warp."""
    pytest.importorskip("scipy")
    opts = T.pipeline_options([T.RandomResizedCrop(SIZE), T.TimmRandAugment("rand-m9-n4-p1.0")])
    for k in ("pipeline", "interpolation", "scale", "ratio", "flip_prob"):
        opts.pop(k, None)
    n = 50_000
    kinds, _, _, _, _, warps, _ = _stoker_ops._aug_draws(0, 0, n, 2, **opts)
    k = np.frombuffer(kinds, np.uint8).reshape(n, MAX_OPS)
    w = np.frombuffer(warps, np.uint8).reshape(n, MAX_OPS)
    is_warp = np.isin(k, [NAMES.index(x) for x in WARPS])
    assert (w[~is_warp] == 0).all()
    drawn = w[is_warp]
    assert set(np.unique(drawn)) == {1, 3}  # STK__WARP_BILINEAR + 1, STK__WARP_BICUBIC + 1
    assert _chi2_ok([np.sum(drawn == 1), np.sum(drawn == 3)], [0.5, 0.5])
    # the other draws do not move: the same ops and magnitudes as with a fixed filter
    opts2 = dict(opts, aug_interpolation="bicubic")
    kinds2, mags2, _ = _stoker_ops._aug_draws(0, 0, 2000, **opts2)
    kinds1, mags1, _ = _stoker_ops._aug_draws(0, 0, 2000, **opts)
    assert kinds1 == kinds2 and mags1 == mags2


def test_train_pipeline_errors_name_the_problem(folder):
    with pytest.raises(ValueError, match="x3"):
        stoker.ImageLoader(folder, 4, pipeline=[T.RandomResizedCrop(32),
                                                T.TimmRandAugment("rand-m9-x3")])
    with pytest.raises(ValueError, match="order"):
        stoker.ImageLoader(folder, 4, pipeline=[T.RandomResizedCrop(32), T.RandomGrayscale(),
                                                T.TimmRandAugment("rand-m9")])


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@gpu
@pytest.mark.parametrize("interp", [2, 0])
def test_gpu_timm_policy_equals_the_cpu(folder, interp):
    pipe = [T.RandomResizedCrop(64), T.RandomHorizontalFlip(),
            T.TimmRandAugment("rand-m9-n4-mstd0.5-p0.8", {"img_mean": FILL,
                                                          "interpolation": interp})]
    kw = dict(pipeline=pipe, seed=4, threads=2, shuffle=False, dtype="uint8")
    cpu = _batches(stoker.ImageLoader(folder, 8, **kw))
    dev = _batches(stoker.ImageLoader(folder, 8, device="cuda", gpu_cpu_share=1.0, **kw))
    assert len(cpu) == len(dev) == 3
    for (a, ia, _), (b, ib, _) in zip(cpu, dev):
        assert ia == ib and torch.equal(a, b.cpu())


def test_train_example_takes_a_timm_string():
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "reference", "train.py")
    spec = importlib.util.spec_from_file_location("stoker_train_example_timm", path)
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    a = train.parse_args(["--synthetic", "--train-crop-size", "176", "--auto-augment",
                          "rand-m9-mstd0.5-inc1"])
    steps = train.recipe_transforms(a, T, train=True)
    tr = [t for t in steps if type(t).__name__ == "TimmRandAugment"]
    assert len(tr) == 1 and tr[0].params["fill"] == (124.0, 116.0, 104.0)  # round(255 * mean)
    assert T.pipeline_options(steps)["auto_augment"] == "timm"
    assert "timm RandAugment(rand-m9-mstd0.5-inc1)" in train.describe_recipe(a)
    import torchvision.transforms as TV

    if timm_aa is not None:
        steps = train.recipe_transforms(a, TV, train=True)
        assert any(isinstance(t, timm_aa.RandAugment) for t in steps)
    else:
        with pytest.raises(SystemExit, match="needs timm"):
            train.recipe_transforms(a, TV, train=True)
    with pytest.raises(SystemExit):
        train.parse_args(["--synthetic", "--auto-augment", "wobble"])


# ---- timm's create_transform objects, as built by timm -----------------------------

try:
    import timm.data as timm_data
except Exception:  # noqa: BLE001 - any import failure: these tests skip
    timm_data = None

needs_timm = pytest.mark.skipif(timm_data is None, reason="timm is not installed "
                                "(scripts/install-deps.sh --python puts it in .venv-tools)")


@needs_timm
def test_create_transform_train_is_accepted_as_built(folder):
    tf = timm_data.create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
                                    re_prob=0.25, interpolation="bicubic")
    opts = T.pipeline_options(tf)
    assert opts["pipeline"] == "train" and opts["size"] == 224
    assert opts["interpolation"] == "bicubic" and opts["flip_prob"] == 0.5
    assert opts["auto_augment"] == "timm" and opts["aug_interpolation"] == "bicubic"
    assert opts["timm_magnitude"] == 9 and opts["timm_mstd"] == 0.5 and opts["timm_increasing"]
    assert opts["aug_fill"] == (124.0, 116.0, 104.0)  # round(255 * mean), as timm passes it
    assert opts["erase_prob"] == 0.25 and opts["erase_count"] == 1
    assert opts["erase_value"] == (0.0, 0.0, 0.0)  # mode "const": zeros after Normalize
    assert np.allclose(opts["erase_ratio"], (0.3, 1 / 0.3)) and opts["erase_scale"][1] == 1 / 3
    assert np.allclose(opts["mean"], (0.485, 0.456, 0.406))
    x, y = next(iter(stoker.ImageLoader(folder, 8, pipeline=tf, threads=2, seed=1)))
    assert x.shape == (8, 3, 224, 224) and x.dtype == torch.float32
    # timm's default interpolation ("random") reaches the policy too; its crop is refused
    tf = timm_data.create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5",
                                    interpolation="bilinear")
    assert T.pipeline_options(tf)["aug_interpolation"] == "bilinear"
    tf = timm_data.create_transform(224, is_training=True, interpolation="random")
    with pytest.raises(ValueError, match="'bilinear' or 'bicubic'"):
        T.pipeline_options(tf)


@needs_timm
@pytest.mark.parametrize("interp", ["bicubic", "bilinear"])
def test_create_transform_eval_gives_timms_pixels(folder, interp):
    """timm's eval transform, run by timm on each file, against the loader."""
    import glob

    tf = timm_data.create_transform(64, is_training=False, interpolation=interp, crop_pct=0.9)
    opts = T.pipeline_options(tf)
    assert opts["pipeline"] == "eval" and opts["resize_size"] == int(64 / 0.9)
    loader = stoker.ImageLoader(folder, 4, pipeline=tf, shuffle=False, threads=2)
    got = torch.cat([x.clone() for x, _ in loader])
    paths = sorted(glob.glob(f"{folder}/*/*.jpg"))
    ref = torch.stack([tf(Image.open(p).convert("RGB")) for p in paths])
    assert got.shape == ref.shape
    # both from libjpeg-turbo and Pillow's resampling: float rounding apart at most
    assert (got - ref).abs().max() < 1e-5


@needs_timm
def test_timm_tensor_steps_that_keep_0_255_are_refused():
    from timm.data import transforms as TT

    with pytest.raises(ValueError, match="0..255"):
        T.pipeline_options([T.RandomResizedCrop(32), TT.ToTensor()])
    with pytest.raises(ValueError, match="0..255"):
        T.pipeline_options([T.RandomResizedCrop(32), TT.ToNumpy()])
    # timm's prefetcher form: MaybePILToTensor and no Normalize yields uint8
    tf = timm_data.create_transform(32, is_training=True, use_prefetcher=True)
    assert T.pipeline_options(tf)["dtype"] == "uint8"


@needs_timm
@pytest.mark.parametrize("auto_augment, names", [
    ("augmix-m5-w4-d2", ["'augmix-m5-w4-d2'", "AugMix(severity=5, mixture_width=4, "
                         "chain_depth=2)"]),
    ("augmix-m3-w3-a0.5-mstd0.5", ["'augmix-m3-w3-a0.5-mstd0.5'", "chain_depth=-1"]),
    ("original-mstd0.5", ["'original-mstd0.5'", "rand-m9-mstd0.5-inc1"]),
    ("v0", ["'v0'"]),
    ("originalr", ["'originalr'"]),
])
def test_timm_policies_are_refused_by_their_string(auto_augment, names):
    """timm's AugMix and AutoAugment, which stoker does not run, are refused
    naming the string create_transform was given and what to use instead, in
    a message of a line or two (not timm's policy written out)."""
    tf = timm_data.create_transform(64, is_training=True, auto_augment=auto_augment)
    with pytest.raises(ValueError) as e:
        T.pipeline_options(tf)
    msg = str(e.value)
    assert "not supported" in msg and len(msg) < 400, msg
    for n in names:
        assert n in msg, msg
    assert "AugmentOp" not in msg and "not supported yet" not in msg


@needs_timm
def test_timm_separate_is_refused_as_such(folder):
    """create_transform(separate=True): its three stages are for timm's split
    augmentation; the message says so, not "Compose as the first transform"."""
    tf = timm_data.create_transform(64, is_training=True, separate=True)
    assert isinstance(tf, tuple)
    with pytest.raises(ValueError, match=r"separate=True\) is not supported") as e:
        T.pipeline_options(tf)
    assert "separate=False" in str(e.value) and "first transform" not in str(e.value)
    with pytest.raises(ValueError, match=r"separate=True"):
        stoker.ImageLoader(folder, 4, pipeline=tf)
    # the same stages as one Compose, as separate=False builds them, are accepted
    one = timm_data.create_transform(64, is_training=True)
    assert T.pipeline_options(list(tf)) == T.pipeline_options(one)



def _timm_box_counts(max_count, n, size, rng):
    """timm's RandomErasing._erase, written out with Python's random: how
    many boxes land (a box whose ten tries fail is not erased)."""
    import math

    counts = np.zeros(4, int)  # 0 to 3 boxes
    lo, hi = math.log(0.3), math.log(1 / 0.3)
    for _ in range(n):
        count = 1 if max_count == 1 else rng.randint(1, max_count)
        got = 0
        for _ in range(count):
            for _ in range(10):
                area = rng.uniform(0.02, 1 / 3) * size * size / count
                ar = math.exp(rng.uniform(lo, hi))
                h, w = int(round(math.sqrt(area * ar))), int(round(math.sqrt(area / ar)))
                if w < size and h < size:
                    got += 1
                    break
        counts[got] += 1
    return counts


@needs_timm
@pytest.mark.parametrize("mode", ["const", "rand", "pixel"])
def test_timm_random_erasing_modes_and_count(folder, mode):
    pytest.importorskip("scipy")
    from scipy import stats
    from timm.data.random_erasing import RandomErasing

    size = 32
    re = RandomErasing(probability=1.0, mode=mode, max_count=3, device="cpu")
    pipe = [T.RandomResizedCrop(size), T.ToTensor(), T.Normalize(0.5, 0.25), re]
    opts = T.pipeline_options(pipe)
    assert opts["erase_count"] == 3
    assert opts.get("erase_random", False) == (mode == "pixel")
    assert opts.get("erase_per_channel", False) == (mode == "rand")
    # the number of boxes: timm's law (count = randint(1, 3), a box that
    # does not fit in ten tries is dropped), against timm's logic replayed
    draw = {k: v for k, v in opts.items() if k.startswith("erase")}
    n = 20_000
    res = _stoker_ops._aug_draws(0, 0, n, 2, size=size, **draw)
    boxes = np.frombuffer(res[6], np.int32).reshape(n, 4, 4)
    ours_counts = np.bincount((boxes[:, :, 2] > 0).sum(1), minlength=4)
    import random

    ref = _timm_box_counts(3, n, size, random.Random(0))
    assert stats.chi2_contingency([ours_counts[1:], ref[1:]]).pvalue > 1e-4
    wrong = _timm_box_counts(2, n, size, random.Random(1))  # another max_count is told apart
    assert stats.chi2_contingency([ours_counts[1:], wrong[1:] + 0.5]).pvalue < 1e-4
    # the values in the boxes, from the loader
    loader = stoker.ImageLoader(folder, 8, pipeline=pipe, threads=2, seed=3, shuffle=False)
    b = next(loader.iter_batches())
    x = b.images
    for j, i in enumerate(b.indices):
        res = _stoker_ops._aug_draws(b.epoch, i, 1, 2, seed=3, size=size, **draw)
        bx = [b for b in np.frombuffer(res[6], np.int32).reshape(4, 4) if b[2]]
        for k, (ex, ey, ew, eh) in enumerate(bx):
            # the part of box k that no later box covers (later boxes are written over it)
            seen = torch.zeros(size, size, dtype=torch.bool)
            seen[ey:ey + eh, ex:ex + ew] = True
            for fx, fy, fw, fh in bx[k + 1:]:
                seen[fy:fy + fh, fx:fx + fw] = False
            if not seen.any():
                continue
            per_channel = x[j][:, seen]
            if mode == "const":
                assert (per_channel == 0).all()
            elif mode == "rand":  # one normal value per channel
                assert (per_channel == per_channel[:, :1]).all()
                assert len(set(per_channel[:, 0].tolist())) == 3
            elif per_channel.numel() > 8:
                assert len(set(per_channel.flatten().tolist())) > per_channel.numel() // 2


@needs_timm
def test_timm_random_erasing_refusals():
    from timm.data.random_erasing import RandomErasing

    base = [T.RandomResizedCrop(32), T.ToTensor(), T.Normalize(0.5, 0.25)]
    for kw, match in [(dict(min_count=2, max_count=3), "min_count"),
                      (dict(max_count=5), "max_count"), (dict(num_splits=2), "num_splits")]:
        with pytest.raises(ValueError, match=match):
            T.pipeline_options(base + [RandomErasing(device="cpu", **kw)])
