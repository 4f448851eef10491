"""Transform descriptions with torchvision's names and defaults.

These objects do not process images themselves: a list of them tells
``stoker.ImageLoader`` which of its two C pipelines to run and with which
parameters, so that porting a torchvision recipe is a matter of changing the
import::

    from stoker import transforms as T      # was: from torchvision import transforms as T
    train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                       T.ToTensor(), T.Normalize(mean, std)])

Supported sequences (torchvision transform objects of the same classes,
v1 or v2, are accepted too):

* train: ``RandomResizedCrop(s, scale, ratio)``, then, each optional and in
  this order: ``RandomHorizontalFlip(p)``, ``RandomVerticalFlip(p)``, one
  policy (``TrivialAugmentWide``, ``RandAugment``, ``AutoAugment`` with the
  IMAGENET policy), ``ColorJitter`` (or ``RandomApply([ColorJitter], p)``),
  ``RandomGrayscale(p)``, ``GaussianBlur`` (or ``RandomApply([GaussianBlur],
  p)``), ``ToTensor()``/``PILToTensor()``/``ToImage()`` +
  ``ToDtype(float32, scale=True)``, ``Normalize(mean, std)``,
  ``RandomErasing``. The batch transforms ``MixUp``, ``CutMix`` and
  ``RandomChoice`` of them go to the loader's ``mix=`` instead.
* eval: ``Resize(r)`` (``r`` an int: the shorter side), ``CenterCrop(s)``,
  optionally ``ToTensor()``/``PILToTensor()``/``ToImage()`` + ``ToDtype(float32,
  scale=True)``, optionally ``Normalize``; or torchvision's weight preset
  ``ImageClassification`` alone (``ResNet50_Weights.IMAGENET1K_V2.transforms()``:
  its resize_size, crop_size, mean, std and interpolation).

Without ``Normalize`` a float output holds ``ToTensor()`` values in [0, 1]
(mean 0, std 1). A list that ends in uint8 (``PILToTensor()``, ``ToImage()``
or ``ToDtype(torch.uint8)`` with no float conversion after it) yields uint8
in 0..255, as torchvision would; ``ConvertImageDtype(torch.float)`` or
``ToDtype(torch.float32, scale=True)`` after it gives floats. torchvision's
reference presets are accepted as written (a leading ``PILToTensor()`` or
``ToImage()``, a trailing ``ToPureTensor()``). Anything else raises
``ValueError`` naming what is not supported.
"""
import enum
import math
import numbers
from typing import Any, Dict, NoReturn, Optional, Sequence, Tuple, Union

from ._common import OPTIONS

__all__ = [
    "Compose",
    "RandomResizedCrop",
    "RandomHorizontalFlip",
    "Resize",
    "CenterCrop",
    "Normalize",
    "ToTensor",
    "PILToTensor",
    "InterpolationMode",
    "RandomVerticalFlip",
    "TrivialAugmentWide",
    "RandAugment",
    "AugMix",
    "AutoAugment",
    "AutoAugmentPolicy",
    "TimmRandAugment",
    "ColorJitter",
    "RandomGrayscale",
    "GaussianBlur",
    "RandomApply",
    "RandomErasing",
    "MixUp",
    "CutMix",
    "Mixup",
    "RandomChoice",
    "ToImage",
    "ToDtype",
    "ConvertImageDtype",
    "ToPureTensor",
]


class InterpolationMode(enum.Enum):
    """torchvision's interpolation names; stoker resizes with BILINEAR and
    BICUBIC, and warps (the policies) with NEAREST, BILINEAR and BICUBIC."""

    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


# A size as torchvision takes it: an int, or a sequence of one or two ints.
Size = Union[int, Sequence[int]]


class _Transform:
    _fields: Tuple[str, ...] = ()

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._fields)
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and all(
            getattr(self, k) == getattr(other, k) for k in self._fields
        )

    __hash__ = None  # type: ignore[assignment]

    def __call__(self, img: Any) -> NoReturn:
        raise TypeError(
            f"stoker.transforms.{type(self).__name__} describes a step of the C pipeline "
            "for stoker.ImageLoader(pipeline=...); it does not transform images in Python"
        )


class Compose(_Transform):
    _fields = ("transforms",)

    def __init__(self, transforms: Sequence[Any]) -> None:
        self.transforms = list(transforms)


class RandomResizedCrop(_Transform):
    _fields = ("size", "scale", "ratio", "interpolation", "antialias")

    def __init__(self, size: Size, scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
                 interpolation: Union[InterpolationMode, int] = InterpolationMode.BILINEAR,
                 antialias: Optional[bool] = True) -> None:
        self.size = size
        self.scale = tuple(scale)
        self.ratio = tuple(ratio)
        self.interpolation = interpolation
        self.antialias = antialias


class RandomHorizontalFlip(_Transform):
    _fields = ("p",)

    def __init__(self, p: float = 0.5) -> None:
        self.p = p


class Resize(_Transform):
    _fields = ("size", "interpolation", "max_size", "antialias")

    def __init__(self, size: Size,
                 interpolation: Union[InterpolationMode, int] = InterpolationMode.BILINEAR,
                 max_size: Optional[int] = None, antialias: Optional[bool] = True) -> None:
        self.size = size
        self.interpolation = interpolation
        self.max_size = max_size
        self.antialias = antialias


class CenterCrop(_Transform):
    _fields = ("size",)

    def __init__(self, size: Size) -> None:
        self.size = size


class Normalize(_Transform):
    _fields = ("mean", "std", "inplace")

    def __init__(self, mean: Union[float, Sequence[float]], std: Union[float, Sequence[float]],
                 inplace: bool = False) -> None:
        self.mean = mean
        self.std = std
        self.inplace = inplace


class ToTensor(_Transform):
    """A marker: the loader's output always is a tensor (see ``dtype=``)."""


class PILToTensor(_Transform):
    """A marker, like ToTensor: the output type is chosen by ``dtype=``."""


class RandomVerticalFlip(_Transform):
    _fields = ("p",)

    def __init__(self, p: float = 0.5) -> None:
        self.p = p


class AutoAugmentPolicy(enum.Enum):
    """torchvision's policy names; stoker implements IMAGENET."""

    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


class TrivialAugmentWide(_Transform):
    _fields = ("num_magnitude_bins", "interpolation", "fill")

    def __init__(self, num_magnitude_bins: int = 31,
                 interpolation: Union[InterpolationMode, int] = InterpolationMode.NEAREST,
                 fill: Any = None) -> None:
        self.num_magnitude_bins = num_magnitude_bins
        self.interpolation = interpolation
        self.fill = fill


class AugMix(_Transform):
    """torchvision's AugMix: ``mixture_width`` chains of ``chain_depth`` ops
    (-1: 1 to 3 at random) from its space, mixed with the image by Dirichlet
    weights and a Beta(alpha, alpha) share; the CPU loader only (a GPU
    loader refuses it). Widths up to 4 and depths up to 4."""

    _fields = ("severity", "mixture_width", "chain_depth", "alpha", "all_ops", "interpolation",
               "fill")

    def __init__(self, severity: int = 3, mixture_width: int = 3, chain_depth: int = -1,
                 alpha: float = 1.0, all_ops: bool = True,
                 interpolation: Union[InterpolationMode, int] = InterpolationMode.BILINEAR,
                 fill: Any = None) -> None:
        self.severity = severity
        self.mixture_width = mixture_width
        self.chain_depth = chain_depth
        self.alpha = alpha
        self.all_ops = all_ops
        self.interpolation = interpolation
        self.fill = fill


class RandAugment(_Transform):
    _fields = ("num_ops", "magnitude", "num_magnitude_bins", "interpolation", "fill")

    @staticmethod
    def from_timm(config_str: str, hparams: Optional[Dict[str, Any]] = None) -> "TimmRandAugment":
        """timm's RandAugment from its config string ("rand-m9-mstd0.5-inc1"):
        a TimmRandAugment."""
        return TimmRandAugment(config_str, hparams)

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 interpolation: Union[InterpolationMode, int] = InterpolationMode.NEAREST,
                 fill: Any = None) -> None:
        self.num_ops = num_ops
        self.magnitude = magnitude
        self.num_magnitude_bins = num_magnitude_bins
        self.interpolation = interpolation
        self.fill = fill


class TimmRandAugment(_Transform):
    """timm's RandAugment from its config string, as
    ``timm.data.auto_augment.rand_augment_transform(config_str, hparams)``
    builds it (``RandAugment.from_timm(...)`` is the same)::

        T.TimmRandAugment("rand-m9-mstd0.5-inc1")
        T.TimmRandAugment("rand-m7-n3-mstd1.0", {"img_mean": (124, 116, 104)})

    The config's sections: ``m`` magnitude (int, default 10), ``n`` ops per
    image (default 2, at most 16), ``mstd`` Gaussian noise on the magnitude
    (above 100: uniform in [0, m]), ``mmax`` the magnitude's upper bound
    (default 10), ``inc1`` the "Increasing" ops, ``p`` each op's probability
    (default 0.5). The 15 ops of timm's ``_RAND_TRANSFORMS`` (or
    ``_RAND_INCREASING_TRANSFORMS``) are drawn with replacement and run with
    PIL's arithmetic, as timm runs them on PIL images (bit-exact against
    Pillow 9.4 in the tests).

    ``hparams``: ``img_mean`` (the warps' fill, default timm's (128, 128,
    128); timm's ``create_transform`` passes the normalisation mean times
    255, rounded), ``translate_pct`` (0.45), ``interpolation`` and timm's
    ``magnitude_std``/``magnitude_max`` (which, as in timm, win over the
    string's); ``translate_const`` is accepted and unused (these ops
    translate relative to the size).

    The warps' filter: timm's default draws bilinear or bicubic at random for
    each warp, and so does stoker (its own draw); ``interpolation`` fixes it
    (bilinear, bicubic or nearest: PIL's filters, bit-exact). ``t`` sections (the weighted
    and 3-Augment op sets) are refused. timm reads ``inc0`` as on (it tests
    ``bool("0")``); stoker refuses it.
    """

    _fields = ("config_str", "hparams")

    def __init__(self, config_str: str, hparams: Optional[Dict[str, Any]] = None) -> None:
        self.config_str = config_str
        self.hparams = dict(hparams or {})
        self.params = parse_timm_rand_augment(config_str, self.hparams)


def _bounds(name: str) -> Tuple[Any, Any]:
    """The range of a C option (min, max), for the checks of the values that
    become it: the library owns the bound, this module only says which
    section of a config string broke it."""
    return OPTIONS[name]["min"], OPTIONS[name]["max"]


def parse_timm_rand_augment(config_str: str,
                            hparams: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """timm's RandAugment config string (and hparams) as its parameters:
    {"magnitude", "num_ops", "mstd", "mmax", "increasing", "prob",
    "translate_pct", "fill", "interpolation"}. Raises ValueError naming the
    part it cannot take."""
    import re

    hparams = dict(hparams or {})
    if not isinstance(config_str, str):
        raise ValueError(f"timm RandAugment: the config must be a string, got {config_str!r}")
    parts = config_str.split("-")
    if parts[0] != "rand":
        raise ValueError(f"timm RandAugment: {config_str!r} must start with 'rand' (got "
                         f"{parts[0]!r}; AutoAugment and AugMix strings are not supported)")
    out: Dict[str, Any] = {"magnitude": 10, "num_ops": 2, "mstd": 0.0, "mmax": 0,
                           "increasing": False, "prob": 0.5}
    for part in parts[1:]:
        def bad(why):
            return ValueError(f"timm RandAugment {config_str!r}: section {part!r}: {why}")
        if part.startswith("t"):
            raise bad("timm's other op sets ('tweights', 't3a', ...) are not supported")
        m = re.fullmatch(r"([a-z]+)(\d.*)", part)
        if not m:
            raise bad("not a known section (m, n, mstd, mmax, inc, p followed by a number)")
        key, val = m.groups()
        try:
            if key == "m":
                out["magnitude"] = int(val)
            elif key == "n":
                out["num_ops"] = int(val)
                lo, hi = _bounds("ra_num_ops")
                if not lo <= out["num_ops"] <= hi:
                    raise bad(f"n must be in [{lo}, {hi}]")
            elif key == "mstd":
                mstd = float(val)
                if not mstd >= 0:
                    raise bad("mstd must be >= 0")
                out["mstd"] = float("inf") if mstd > 100 else mstd
            elif key == "mmax":
                out["mmax"] = int(val)
            elif key == "inc":
                if int(val) == 0:
                    raise bad("timm reads inc0 as inc1 (it tests bool('0')): write inc1, or "
                              "leave the section out")
                out["increasing"] = True
            elif key == "p":
                out["prob"] = float(val)
                lo, hi = _bounds("timm_prob")
                if not lo <= out["prob"] <= hi:
                    raise bad(f"p must be in [{lo:g}, {hi:g}]")
            else:
                raise bad(f"unknown key {key!r} (m, n, mstd, mmax, inc, p)")
        except ValueError as e:
            if "section" in str(e):
                raise
            raise bad(f"{val!r} is not a number of the kind {key!r} takes") from None
    # the ranges of the C options they become (timm_magnitude, timm_mmax)
    for key, field, name in (("magnitude", "timm_magnitude", "m"), ("mmax", "timm_mmax", "mmax")):
        lo, hi = _bounds(field)
        if not lo <= out[key] <= hi:
            raise ValueError(f"timm RandAugment {config_str!r}: {name} must be in "
                             f"[{lo:g}, {hi:g}]")
    known = {"img_mean", "translate_pct", "translate_const", "interpolation", "magnitude_std",
             "magnitude_max"}
    unknown = sorted(set(hparams) - known)
    if unknown:
        raise ValueError(f"timm RandAugment: hparams {unknown} are not supported "
                         f"({', '.join(sorted(known))})")
    if "magnitude_std" in hparams:  # timm: hparams.setdefault, so these win
        mstd = float(hparams["magnitude_std"])
        out["mstd"] = float("inf") if mstd > 100 else mstd
    if hparams.get("magnitude_max") is not None:
        out["mmax"] = int(hparams["magnitude_max"])
    out["translate_pct"] = float(hparams.get("translate_pct", 0.45))
    fill = hparams.get("img_mean", (128, 128, 128))
    out["fill"] = _triple(fill, "timm RandAugment img_mean")
    if not all(0 <= v <= 255 for v in out["fill"]):
        raise ValueError(f"timm RandAugment: img_mean must be in [0, 255], got {fill!r}")
    interp = hparams.get("interpolation", "random")
    value = getattr(interp, "value", interp)
    if isinstance(value, (list, tuple)):
        # timm's _RANDOM_INTERPOLATION (BILINEAR, BICUBIC): random.choice per warp
        if sorted(int(getattr(v, "value", v)) for v in value) != [2, 3]:
            raise ValueError(f"timm RandAugment: interpolation {interp!r} is not supported (a "
                             "random choice only between bilinear and bicubic, timm's default)")
        value = "random"
    if value == "random":
        out["interpolation"] = "random"  # bilinear or bicubic per warp, as timm draws them
    elif value in ("bilinear", 2):
        out["interpolation"] = "bilinear"
    elif value in ("bicubic", 3):
        out["interpolation"] = "bicubic"
    elif value in ("nearest", 0):
        out["interpolation"] = "nearest"
    else:
        raise ValueError(f"timm RandAugment: interpolation {interp!r} is not supported "
                         "(bilinear, bicubic, nearest, or timm's default 'random')")
    return out


class AutoAugment(_Transform):
    _fields = ("policy", "interpolation", "fill")

    def __init__(self, policy: AutoAugmentPolicy = AutoAugmentPolicy.IMAGENET,
                 interpolation: Union[InterpolationMode, int] = InterpolationMode.NEAREST,
                 fill: Any = None) -> None:
        self.policy = policy
        self.interpolation = interpolation
        self.fill = fill


class ColorJitter(_Transform):
    _fields = ("brightness", "contrast", "saturation", "hue")

    def __init__(self, brightness: Any = 0, contrast: Any = 0, saturation: Any = 0,
                 hue: Any = 0) -> None:
        self.brightness = brightness
        self.contrast = contrast
        self.saturation = saturation
        self.hue = hue


class RandomGrayscale(_Transform):
    _fields = ("p",)

    def __init__(self, p: float = 0.1) -> None:
        self.p = p


class GaussianBlur(_Transform):
    _fields = ("kernel_size", "sigma")

    def __init__(self, kernel_size: Size, sigma: Any = (0.1, 2.0)) -> None:
        self.kernel_size = kernel_size
        self.sigma = sigma


class RandomApply(_Transform):
    _fields = ("transforms", "p")

    def __init__(self, transforms: Sequence[Any], p: float = 0.5) -> None:
        self.transforms = list(transforms)
        self.p = p


class RandomErasing(_Transform):
    _fields = ("p", "scale", "ratio", "value", "inplace")

    def __init__(self, p: float = 0.5, scale: Sequence[float] = (0.02, 0.33),
                 ratio: Sequence[float] = (0.3, 3.3), value: Any = 0,
                 inplace: bool = False) -> None:
        self.p = p
        self.scale = tuple(scale)
        self.ratio = tuple(ratio)
        self.value = value
        self.inplace = inplace


class MixUp(_Transform):
    """A batch transform: give it (or a RandomChoice of it and CutMix) as
    ``ImageLoader(mix=...)``."""

    _fields = ("alpha", "num_classes")

    def __init__(self, *, alpha: float = 1.0, num_classes: Optional[int] = None) -> None:
        self.alpha = alpha
        self.num_classes = num_classes


class CutMix(_Transform):
    """A batch transform, like MixUp."""

    _fields = ("alpha", "num_classes")

    def __init__(self, *, alpha: float = 1.0, num_classes: Optional[int] = None) -> None:
        self.alpha = alpha
        self.num_classes = num_classes


class Mixup(_Transform):
    """timm's ``timm.data.Mixup`` (mode "batch"), for ``ImageLoader(mix=...)``:
    with probability ``prob`` a batch is mixed, by CutMix with probability
    ``switch_prob`` when both alphas are on; image i pairs with image
    n - 1 - i (``flip(0)``); CutMix's box is timm's ``rand_bbox`` and lambda is
    corrected to it when ``correct_lam``; the soft labels carry
    ``label_smoothing``. timm's own Mixup objects are read the same way.
    ``cutmix_minmax`` and the modes "pair" and "elem" are not supported."""

    _fields = ("mixup_alpha", "cutmix_alpha", "cutmix_minmax", "prob", "switch_prob", "mode",
               "correct_lam", "label_smoothing", "num_classes")

    def __init__(self, mixup_alpha: float = 1.0, cutmix_alpha: float = 0.0,
                 cutmix_minmax: Optional[Sequence[float]] = None, prob: float = 1.0,
                 switch_prob: float = 0.5, mode: str = "batch", correct_lam: bool = True,
                 label_smoothing: float = 0.1, num_classes: int = 1000) -> None:
        self.mixup_alpha = mixup_alpha
        self.cutmix_alpha = cutmix_alpha
        self.cutmix_minmax = cutmix_minmax
        self.mix_prob = prob  # timm's attribute name
        self.switch_prob = switch_prob
        self.mode = mode
        self.correct_lam = correct_lam
        self.label_smoothing = label_smoothing
        self.num_classes = num_classes

    @property
    def prob(self) -> float:
        return self.mix_prob


class RandomChoice(_Transform):
    """Of MixUp and CutMix, one per batch (equal odds, as torchvision)."""

    _fields = ("transforms", "p")

    def __init__(self, transforms: Sequence[Any], p: Optional[Sequence[float]] = None) -> None:
        self.transforms = list(transforms)
        self.p = p


class ToImage(_Transform):
    """A marker (torchvision v2): the output type is chosen by ``dtype=``."""


class ToDtype(_Transform):
    """torchvision v2's ToDtype: to float (float32, float16, bfloat16) with
    scale=True (ToTensor's values in [0, 1]), or to uint8 (0..255). A list
    that ends in uint8 makes the loader yield uint8."""

    _fields = ("dtype", "scale")

    def __init__(self, dtype: Any, scale: bool = False) -> None:
        self.dtype = dtype
        self.scale = scale


class ConvertImageDtype(_Transform):
    """torchvision's ConvertImageDtype: ToDtype(dtype, scale=True)."""

    _fields = ("dtype",)

    def __init__(self, dtype: Any) -> None:
        self.dtype = dtype


class ToPureTensor(_Transform):
    """A marker (torchvision v2, last in its reference presets): a no-op."""


# ---- mapping a transform list onto the C options -------------------------------

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _name(t):
    return type(t).__name__


def _square(size, what):
    """An int, or a 1- or 2-sequence of equal ints, as torchvision accepts."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        return int(size)
    if isinstance(size, (list, tuple)) and len(size) in (1, 2) and all(
        isinstance(v, numbers.Integral) for v in size
    ):
        if len(size) == 1 or size[0] == size[1]:
            return int(size[0])
        raise ValueError(f"{what}: a non-square output size {tuple(size)} is not supported yet")
    raise ValueError(f"{what}: size must be an int, got {size!r}")


def _check_resampling(t, what):
    """The resampling filter of a Resize / RandomResizedCrop: "bilinear" or
    "bicubic" (Pillow's, as torchvision runs them on PIL images)."""
    mode = getattr(t, "interpolation", InterpolationMode.BILINEAR)
    value = getattr(mode, "value", mode)
    if isinstance(value, (list, tuple)):  # timm's interpolation="random"
        raise ValueError(f"{what}: interpolation 'random' (bilinear or bicubic drawn per image, "
                         "timm's) is not supported: the loader resamples every crop with one "
                         "filter; give interpolation='bilinear' or 'bicubic'")
    # PIL's Image.BILINEAR is 2 and Image.BICUBIC 3, older spellings torchvision still accepts.
    if value not in ("bilinear", 2, "bicubic", 3):
        raise ValueError(f"{what}: interpolation {mode!r} is not supported yet (bilinear or "
                         "bicubic)")
    if getattr(t, "antialias", True) is False:
        raise ValueError(f"{what}: antialias=False is not supported (stoker always antialiases, "
                         "as torchvision does for PIL images)")
    return "bicubic" if value in ("bicubic", 3) else "bilinear"


def _triple(v, what):
    if isinstance(v, numbers.Real):
        return (float(v),) * 3
    v = [float(x) for x in v]
    if len(v) == 1:
        return (v[0],) * 3
    if len(v) != 3:
        raise ValueError(f"{what} must have 1 or 3 values, got {len(v)}")
    return tuple(v)


def pipeline_options(spec: Any) -> Dict[str, Any]:
    """Maps a transform list (or Compose) to keyword options of the C loader.

    Returns a dict with ``pipeline``, ``size`` and, as they apply,
    ``resize_size``, ``scale``, ``ratio``, ``flip_prob``, ``mean``, ``std``
    (``mean``/``std`` are absent when the list has no Normalize), and
    ``dtype`` when the list ends in another element type than float32
    (``"uint8"`` after PILToTensor or ToImage without a float conversion).
    """
    if _name(spec) == "ImageClassification":
        return _preset_options(spec)
    _refuse_timm_separate(spec)
    steps = _steps(spec)
    if not steps:
        raise ValueError("the transform list is empty")
    if len(steps) == 1 and _name(steps[0]) == "ImageClassification":
        return _preset_options(steps[0])
    # torchvision's reference presets (references/classification/presets.py):
    # v2 ends in ToPureTensor (it unwraps the tv_tensors: a no-op here), and
    # its "tensor" and "tv_tensor" backends convert first, with PILToTensor
    # or ToImage: a uint8 tensor, cropped and resized as the PIL image would
    # be (stoker resizes with Pillow's filters either way).
    if _name(steps[-1]) == "ToPureTensor":
        steps = steps[:-1]
    _refuse_timm_tensor_steps(steps)
    _refuse_timm_policies(steps)
    kind = None
    if steps and _name(steps[0]) in ("PILToTensor", "ToImage", "MaybePILToTensor"):
        kind = "uint8"
        steps = steps[1:]
    if not steps:
        raise ValueError("the transform list has no RandomResizedCrop or Resize + CenterCrop")
    names = [_name(t) for t in steps]
    opts: Dict[str, Any] = {}
    rest = steps
    first = names[0]
    if first in ("RandomResizedCrop", "RandomResizedCropAndInterpolation"):
        # timm's RandomResizedCropAndInterpolation draws its box as
        # torchvision's get_params does (ten tries, the same fallback)
        t = steps[0]
        opts["interpolation"] = _check_resampling(t, first)
        opts.update(pipeline="train", size=_square(t.size, first),
                    scale=tuple(float(v) for v in t.scale),
                    ratio=tuple(float(v) for v in t.ratio), flip_prob=0.0)
        rest = steps[1:]
        if rest and _name(rest[0]) == "RandomHorizontalFlip":
            opts["flip_prob"] = float(rest[0].p)
            rest = rest[1:]
    elif first == "Resize":
        t = steps[0]
        opts["interpolation"] = _check_resampling(t, "Resize")
        size = t.size
        if isinstance(size, (list, tuple)) and len(size) == 1:
            size = size[0]
        if not isinstance(size, numbers.Integral) or isinstance(size, bool):
            raise ValueError(f"Resize: size {t.size!r} is not supported yet: give the shorter "
                             "side as an int")
        if getattr(t, "max_size", None) is not None:
            raise ValueError("Resize: max_size is not supported yet")
        if len(steps) < 2 or names[1] != "CenterCrop":
            raise ValueError("Resize must be followed by CenterCrop (the eval pipeline)")
        opts.update(pipeline="eval", resize_size=int(size),
                    size=_square(steps[1].size, "CenterCrop"))
        rest = steps[2:]
    else:
        raise ValueError(
            f"{first} as the first transform is not supported yet: a pipeline starts with "
            "RandomResizedCrop (train) or Resize + CenterCrop (eval)")
    if opts["pipeline"] == "train":
        rest = _augmentations(rest, opts)
    # What may follow: the conversions to a tensor (ToTensor, PILToTensor,
    # ToImage, ToDtype, ConvertImageDtype), then [Normalize], [RandomErasing].
    rest, kind = _tensor_steps(rest, kind)
    if rest and _name(rest[0]) == "Normalize":
        if kind == "uint8":
            raise ValueError("Normalize on a uint8 tensor (after PILToTensor, ToImage or "
                             "ToDtype(torch.uint8)): torchvision refuses it too; convert "
                             "first with ConvertImageDtype(torch.float) (v2: "
                             "ToDtype(torch.float32, scale=True))")
        opts["mean"] = _triple(rest[0].mean, "Normalize mean")
        opts["std"] = _triple(rest[0].std, "Normalize std")
        rest = rest[1:]
    if rest and _name(rest[0]) == "RandomErasing" and opts["pipeline"] == "train":
        opts.update(_erasing(rest[0]))
        rest = rest[1:]
    if kind not in (None, "float32"):
        # The pipeline decides the element type: a list ending in uint8
        # (PILToTensor, ToImage, ToDtype(torch.uint8)) yields uint8 in 0..255,
        # as torchvision would, never float. float32 (ToTensor) and no
        # conversion at all leave the choice to the loader's dtype=.
        opts["dtype"] = kind
    if rest:
        bad = _name(rest[0])
        if bad in _KNOWN:
            raise ValueError(f"{bad} at position {len(steps) - len(rest)} of "
                             f"[{', '.join(names)}]: this order is not supported (the train "
                             "order is RandomResizedCrop, RandomHorizontalFlip, "
                             "RandomVerticalFlip, a policy, ColorJitter, RandomGrayscale, "
                             "GaussianBlur, ToTensor, Normalize, RandomErasing, "
                             "ToPureTensor)")
        _refuse_reference_mix(rest[0])
        if bad in ("MixUp", "CutMix", "RandomChoice"):
            raise ValueError(f"{bad} is a batch transform: give it as ImageLoader(mix=...)")
        raise ValueError(f"{bad} is not supported yet")
    return opts


# Transforms whose .transforms are choices or branches, not steps in order.
_BRANCHING = ("RandomApply", "RandomChoice", "RandomOrder")


def _is_container(t):
    """A Compose, or an object that wraps one as its .transforms: torchvision's
    reference presets (ClassificationPresetTrain/Eval in
    references/classification/presets.py) and classes written like them."""
    return (not isinstance(t, (str, bytes)) and _name(t) not in _BRANCHING and
            hasattr(t, "transforms") and not isinstance(t.transforms, (str, bytes)))


def _steps(spec):
    """The transforms in order: a list, a Compose, or a preset object whose
    .transforms is a Compose or a list; nested ones are flattened, as applying
    them one after the other does."""
    out = []

    def walk(t, depth):
        if depth > 50:
            raise ValueError("the transforms nest too deeply (a .transforms cycle?)")
        if not _is_container(t):
            out.append(t)
            return
        inner = t.transforms
        if isinstance(inner, (list, tuple)):
            for x in inner:
                walk(x, depth + 1)
        elif _is_container(inner):
            walk(inner, depth + 1)
        else:
            raise ValueError(f"{_name(t)}: its .transforms ({_name(inner)}) is not a Compose "
                             "or a list of transforms")

    if _is_container(spec):
        walk(spec, 0)
        return out
    try:
        items = list(spec)
    except TypeError:
        raise ValueError(f"pipeline: {_name(spec)} is not a list of transforms, a Compose or "
                         "an object whose .transforms is one (as torchvision's "
                         "ClassificationPresetTrain/Eval)") from None
    for x in items:
        walk(x, 1)
    return out


def _refuse_timm_separate(spec):
    """timm's create_transform(..., separate=True): a tuple of Composes
    (primary, secondary, final) for AugMix's split augmentation."""
    if isinstance(spec, tuple) and len(spec) in (2, 3) and \
            all(_name(t) == "Compose" for t in spec) and \
            any(type(x).__module__.startswith("timm")
                for t in spec for x in getattr(t, "transforms", [])):
        raise ValueError(
            "timm's create_transform(..., separate=True) is not supported: its three stages "
            "are for timm's split augmentation (AugMixDataset, --aug-splits: several "
            "augmented copies of each image, for the JSD loss), and the loader makes one "
            "copy per image: build it with separate=False")


def _preset_options(t):
    """torchvision's weight preset ImageClassification (what
    ``ResNet50_Weights.IMAGENET1K_V2.transforms()`` returns): Resize(resize_size,
    interpolation), CenterCrop(crop_size), to float in [0, 1], Normalize(mean, std),
    which is the eval pipeline."""
    what = "ImageClassification"
    opts: Dict[str, Any] = {"interpolation": _check_resampling(t, what)}
    resize = list(getattr(t, "resize_size", None) or [])
    if len(resize) != 1 or not isinstance(resize[0], numbers.Integral):
        raise ValueError(f"{what}: resize_size {t.resize_size!r} is not supported yet: the "
                         "shorter side as one int")
    opts.update(pipeline="eval", resize_size=int(resize[0]),
                size=_square(list(t.crop_size), f"{what} crop_size"),
                mean=_triple(t.mean, f"{what} mean"), std=_triple(t.std, f"{what} std"))
    return opts


_KNOWN = ("RandomResizedCrop", "RandomHorizontalFlip", "Resize", "CenterCrop", "ToTensor",
          "PILToTensor", "ToImage", "ToDtype", "ConvertImageDtype", "ToPureTensor", "Normalize",
          "RandomResizedCropAndInterpolation", "MaybeToTensor", "MaybePILToTensor",
          "RandomVerticalFlip",
          "TrivialAugmentWide", "RandAugment", "AutoAugment", "TimmRandAugment", "AugMix",
          "ColorJitter",
          "RandomApply",
          "RandomGrayscale", "GaussianBlur", "RandomErasing")


_DTYPE_OF = {"float32": "float32", "float": "float32", "float16": "float16", "half": "float16",
             "bfloat16": "bfloat16", "uint8": "uint8"}


def _target_dtype(t):
    """The element type a ToDtype / ConvertImageDtype converts to, by name."""
    what = f"{_name(t)}({getattr(t, 'dtype', None)})"
    if isinstance(getattr(t, "dtype", None), dict):
        raise ValueError(f"{_name(t)}: a per-type dtype dict is not supported; give one dtype")
    name = _DTYPE_OF.get(str(getattr(t, "dtype", "")).replace("torch.", ""))
    if name is None:
        raise ValueError(f"{what}: the loader outputs float32, float16, bfloat16 or uint8")
    return name


def _tensor_steps(rest, kind):
    """The conversion steps after the geometry and colour steps, as
    torchvision runs them: ToTensor gives float in [0, 1]; PILToTensor and
    ToImage give uint8 in 0..255; ToDtype(d, scale=True) and
    ConvertImageDtype(d) convert between the two (and between float
    precisions); Normalize needs a float. Returns (the steps left, the
    element type at the end: None when no step made a tensor, else
    "float32", "float16", "bfloat16" or "uint8")."""
    while rest:
        t, name = rest[0], _name(rest[0])
        if name in ("ToTensor", "MaybeToTensor"):  # timm's MaybeToTensor: ToTensor on PIL
            if kind is not None:
                raise ValueError(f"ToTensor after the image is already a {kind} tensor: "
                                 "torchvision's ToTensor takes a PIL image")
            kind = "float32"
        elif name in ("PILToTensor", "MaybePILToTensor"):
            if kind is not None:
                raise ValueError(f"PILToTensor after the image is already a {kind} tensor: "
                                 "torchvision's PILToTensor takes a PIL image")
            kind = "uint8"
        elif name == "ToImage":
            kind = kind or "uint8"  # v2: a PIL image becomes uint8; a tensor keeps its type
        elif name in ("ToDtype", "ConvertImageDtype"):
            target = _target_dtype(t)
            src = kind or "uint8"  # the decoded image is 8-bit
            # ConvertImageDtype always rescales; ToDtype only with scale=True.
            scale = name == "ConvertImageDtype" or bool(getattr(t, "scale", False))
            if (src == "uint8") != (target == "uint8") and not scale:
                if target == "uint8":
                    raise ValueError(f"ToDtype({t.dtype}) without scale=True truncates [0, 1] "
                                     "floats to 0 or 1: use scale=True (0..255)")
                raise ValueError(f"ToDtype({t.dtype}) without scale=True keeps 0..255 values, "
                                 "which stoker does not output: use scale=True (ToTensor's "
                                 "[0, 1])")
            kind = target
        else:
            break
        rest = rest[1:]
    return rest, kind


def _policy_interp(t, what):
    mode = getattr(t, "interpolation", InterpolationMode.NEAREST)
    value = getattr(mode, "value", mode)
    # PIL's Image.NEAREST is 0, Image.BILINEAR 2, Image.BICUBIC 3
    if value in ("nearest", 0):
        return "nearest"
    if value in ("bilinear", 2):
        return "bilinear"
    if value in ("bicubic", 3):
        if what == "AugMix":  # it converts to a tensor, whose warps torchvision refuses bicubic
            raise ValueError("AugMix: interpolation BICUBIC is not supported: torchvision's "
                             "AugMix warps tensors, which take NEAREST or BILINEAR only")
        # torchvision runs bicubic warps on PIL images only (Image.transform):
        # the C side does the same (aug_interpolation "bicubic")
        return "bicubic"
    raise ValueError(f"{what}: interpolation {mode!r} is not supported (nearest, bilinear or "
                     "bicubic)")


def _is_timm(t):
    return type(t).__module__.startswith("timm")


def _timm_policy_name(t):
    """The auto_augment string timm's create_transform read to build this
    AutoAugment ("original-mstd0.5"): its policy compared with each of timm's
    named ones; None for a policy of one's own."""
    import sys

    mod = sys.modules.get(type(t).__module__)
    make = getattr(mod, "auto_augment_policy", None)
    try:
        def shape(policy):
            return [[(op.name, float(op.prob), float(op.magnitude)) for op in sub]
                    for sub in policy]

        have = shape(t.policy)
        ops = [op for sub in t.policy for op in sub]
        mstd = float(getattr(ops[0], "magnitude_std", 0) or 0) if ops else 0.0
        for name in ("original", "originalr", "v0", "v0r", "3a"):
            if make is not None and shape(make(name)) == have:
                return name + (f"-mstd{mstd:g}" if mstd else "")
    except Exception:  # noqa: BLE001 - another timm: the message names no string
        pass
    return None


def _timm_augmix_name(t):
    """The auto_augment string of timm's AugMixAugment ("augmix-m5-w4-d2"), as
    timm's augment_and_mix_transform parses it."""
    try:
        ops = list(t.ops)
        cfg = f"augmix-m{ops[0].magnitude:g}-w{int(t.width)}"
        if int(t.depth) > 0:  # timm's default, -1 (1 to 3 at random), has no section
            cfg += f"-d{int(t.depth)}"
        if float(t.alpha) != 1.0:
            cfg += f"-a{float(t.alpha):g}"
        if bool(t.blended):
            cfg += "-b1"
        mstd = float(getattr(ops[0], "magnitude_std", float("inf")))
        if mstd != float("inf"):
            cfg += f"-mstd{mstd:g}"
        return cfg, ops[0].magnitude
    except Exception:  # noqa: BLE001
        return None, None


def _refuse_timm_policies(steps):
    """timm's AutoAugment and AugMix (create_transform(auto_augment="original",
    "v0", "augmix-...")) are timm's own op sets, which stoker does not run:
    refused by the string that built them, with what stoker runs instead."""
    instead = ("use timm's RandAugment ('rand-m9-mstd0.5-inc1') or a torchvision policy "
               "(AutoAugment IMAGENET, TrivialAugmentWide, RandAugment, AugMix)")
    for t in steps:
        if not _is_timm(t):
            continue
        if _name(t) == "AutoAugment":
            name = _timm_policy_name(t)
            what = f"auto_augment={name!r}" if name else \
                f"a policy of {len(list(t.policy))} sub-policies of its own"
            raise ValueError(f"timm's AutoAugment ({what}) is not supported: {instead}")
        if _name(t) == "AugMixAugment":
            cfg, m = _timm_augmix_name(t)
            what = f"auto_augment={cfg!r}" if cfg else "AugMixAugment"
            near = ""
            if cfg:
                depth = int(t.depth)
                near = (f"; the nearest: torchvision's AugMix(severity={m:g}, "
                        f"mixture_width={int(t.width)}, chain_depth={depth}), whose ops "
                        "differ from timm's")
            raise ValueError(f"timm's AugMix ({what}) is not supported: {instead}{near}")


def _refuse_timm_tensor_steps(steps):
    """timm's own ToTensor and ToNumpy keep 0..255 (as float32, or a uint8
    array): not what torchvision's ToTensor gives, so they are refused
    rather than read as it."""
    for t in steps:
        mod = type(t).__module__ or ""
        if mod.startswith("timm") and _name(t) in ("ToTensor", "ToNumpy"):
            raise ValueError(f"timm's {_name(t)} keeps the values 0..255 (timm's prefetcher "
                             "normalises later): write MaybeToTensor() + Normalize(...) for "
                             "normalised floats, or MaybePILToTensor() (uint8 batches) and "
                             "normalise on the device")


def _fill(t, what):
    fill = getattr(t, "fill", None)
    if isinstance(fill, dict):  # torchvision v2: a fill per type
        vals = [v for v in fill.values() if v is not None]
        fill = vals[0] if vals else None
    if fill is None:
        return (-1.0, -1.0, -1.0)
    f = _triple(fill, f"{what} fill")
    if not all(0 <= v <= 255 for v in f):
        raise ValueError(f"{what}: fill must be in [0, 255], got {fill!r}")
    return f


def _factor(v, what, center):
    """ColorJitter's argument: a number b (the range [max(0, c - b), c + b]) or
    a (lo, hi) pair of that form. None is off: torchvision's ColorJitter
    stores None for a factor given as 0 (ColorJitter(0.4, 0.4, 0.4).hue)."""
    if v is None:
        return 0.0
    if isinstance(v, numbers.Real):
        v = float(v)
        if v < 0:
            raise ValueError(f"ColorJitter {what} must be non-negative, got {v}")
        return v
    lo, hi = (float(x) for x in v)
    b = round(hi - center, 12)  # (0.6, 1.4) is 0.4, not 0.3999999999999999
    if b >= 0 and abs(max(0.0, center - b) - lo) < 1e-9:
        return b
    raise ValueError(f"ColorJitter {what}=({lo}, {hi}): only ranges centred on {center} "
                     "are supported")


def _augmentations(rest, opts):
    """The optional steps between the flip and ToTensor, in stoker's order."""
    def take(name):
        nonlocal rest
        if rest and _name(rest[0]) == name:
            t = rest[0]
            rest = rest[1:]
            return t
        return None

    def take_applied(name):
        """name, or RandomApply([name], p): (the transform, p) or (None, 0)."""
        nonlocal rest
        if rest and _name(rest[0]) == name:
            t = rest[0]
            rest = rest[1:]
            return t, 1.0
        if rest and _name(rest[0]) == "RandomApply":
            inner = list(getattr(rest[0], "transforms", []))
            if len(inner) == 1 and _name(inner[0]) == name:
                p = float(rest[0].p)
                rest = rest[1:]
                return inner[0], p
        return None, 0.0

    t = take("RandomVerticalFlip")
    if t is not None:
        opts["vflip_prob"] = float(t.p)
    if rest and (_name(rest[0]) == "TimmRandAugment" or _is_timm_rand_augment(rest[0])):
        prm = _timm_params(rest[0])
        rest = rest[1:]
        opts.update(auto_augment="timm", ra_num_ops=prm["num_ops"],
                    timm_magnitude=float(prm["magnitude"]), timm_mstd=prm["mstd"],
                    timm_mmax=prm["mmax"], timm_increasing=prm["increasing"],
                    timm_prob=prm["prob"], timm_translate_pct=prm["translate_pct"],
                    aug_interpolation=prm["interpolation"], aug_fill=prm["fill"])
    elif rest and _name(rest[0]) == "AugMix":
        t = rest[0]
        rest = rest[1:]
        depth = int(t.chain_depth)
        if not 1 <= int(t.severity) <= 10:
            raise ValueError(f"AugMix: severity must be in [1, 10], got {t.severity}")
        if not 1 <= int(t.mixture_width) <= 4:
            raise ValueError(f"AugMix: mixture_width must be in [1, 4], got {t.mixture_width}")
        if depth > 4:
            raise ValueError(f"AugMix: chain_depth must be at most 4 (or <= 0: 1 to 3 at "
                             f"random), got {depth}")
        if not float(t.alpha) > 0:
            raise ValueError(f"AugMix: alpha must be positive, got {t.alpha}")
        opts.update(auto_augment="augmix", augmix_severity=int(t.severity),
                    augmix_width=int(t.mixture_width), augmix_depth=max(depth, -1),
                    augmix_alpha=float(t.alpha), augmix_all_ops=bool(t.all_ops),
                    aug_interpolation=_policy_interp(t, "AugMix"), aug_fill=_fill(t, "AugMix"))
    elif rest and _name(rest[0]) in ("TrivialAugmentWide", "RandAugment", "AutoAugment"):
        t = rest[0]
        rest = rest[1:]
        name = _name(t)
        opts["aug_interpolation"] = _policy_interp(t, name)
        opts["aug_fill"] = _fill(t, name)
        if opts["aug_interpolation"] == "bicubic" and opts["aug_fill"][0] >= 0:
            # the PIL path's fill: torchvision's _parse_fill takes int(x) of each
            opts["aug_fill"] = tuple(float(int(v)) for v in opts["aug_fill"])
        if name == "TrivialAugmentWide":
            opts.update(auto_augment="ta_wide", magnitude_bins=int(t.num_magnitude_bins))
        elif name == "RandAugment":
            opts.update(auto_augment="ra", ra_num_ops=int(t.num_ops),
                        ra_magnitude=int(t.magnitude), magnitude_bins=int(t.num_magnitude_bins))
        else:
            policy = getattr(t.policy, "value", t.policy)
            if str(policy).lower() != "imagenet":
                raise ValueError(f"AutoAugment: policy {t.policy!r} is not supported "
                                 "(IMAGENET only)")
            opts["auto_augment"] = "imagenet"
    t, p = take_applied("ColorJitter")
    if t is not None:
        hue = t.hue
        if hue is None:  # torchvision: hue=0 is stored as None
            h = 0.0
        elif isinstance(hue, numbers.Real):
            h = float(hue)
        else:
            lo, hi = (float(x) for x in hue)
            if abs(lo + hi) > 1e-9:
                raise ValueError(f"ColorJitter hue=({lo}, {hi}): only (-h, h) is supported")
            h = hi
        if not 0 <= h <= 0.5:
            raise ValueError(f"ColorJitter hue must be in [0, 0.5], got {h}")
        opts["color_jitter"] = (_factor(t.brightness, "brightness", 1.0),
                                _factor(t.contrast, "contrast", 1.0),
                                _factor(t.saturation, "saturation", 1.0), h)
        opts["jitter_prob"] = p
    t = take("RandomGrayscale")
    if t is not None:
        opts["grayscale_prob"] = float(t.p)
    t, p = take_applied("GaussianBlur")
    if t is not None:
        k = t.kernel_size
        if not isinstance(k, numbers.Integral):
            k = list(k)
            if len(k) == 2 and k[0] != k[1]:
                raise ValueError(f"GaussianBlur: a non-square kernel {tuple(k)} is not supported")
            k = k[0]
        sigma = t.sigma
        if isinstance(sigma, numbers.Real):
            sigma = (float(sigma), float(sigma))
        opts.update(blur_kernel=int(k), blur_sigma=tuple(float(v) for v in sigma), blur_prob=p)
    return rest


_TIMM_RAND = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize",
              "SolarizeAdd", "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY",
              "TranslateXRel", "TranslateYRel")
_TIMM_RAND_INC = tuple(n + "Increasing" if n in ("Posterize", "Solarize", "Color", "Contrast",
                                                 "Brightness", "Sharpness") else n
                       for n in _TIMM_RAND)


def _is_timm_rand_augment(t):
    """timm's own RandAugment object (timm.data.auto_augment.RandAugment)."""
    return _name(t) == "RandAugment" and hasattr(t, "ops") and hasattr(t, "num_layers")


def _timm_params(t):
    """The parameters of a TimmRandAugment, or of timm's RandAugment object
    read back from its AugmentOps."""
    if _name(t) == "TimmRandAugment":
        return t.params
    ops = list(t.ops)
    names = tuple(getattr(o, "name", None) for o in ops)
    if getattr(t, "choice_weights", None) is not None or names not in (_TIMM_RAND, _TIMM_RAND_INC):
        raise ValueError("timm RandAugment: only the default op sets (_RAND_TRANSFORMS, "
                         "_RAND_INCREASING_TRANSFORMS) without weights are supported")
    first = ops[0]
    same = all((o.prob, o.magnitude, o.magnitude_std, o.magnitude_max, o.hparams) ==
               (first.prob, first.magnitude, first.magnitude_std, first.magnitude_max,
                first.hparams) for o in ops)
    if not same:
        raise ValueError("timm RandAugment: ops with different parameters are not supported")
    hp = {k: v for k, v in first.hparams.items() if k in ("translate_pct", "img_mean")}
    resample = first.kwargs.get("resample")
    if not isinstance(resample, (list, tuple)):
        hp["interpolation"] = int(resample)
    hp["img_mean"] = first.kwargs.get("fillcolor", (128, 128, 128))
    mstd = float(first.magnitude_std or 0)
    cfg = f"rand-m{int(first.magnitude)}-n{int(t.num_layers)}-p{float(first.prob)}"
    cfg += "-inc1" if names == _TIMM_RAND_INC else ""
    out = parse_timm_rand_augment(cfg, hp)
    out["magnitude"] = float(first.magnitude)
    out["mstd"] = mstd
    out["mmax"] = int(first.magnitude_max or 0)
    return out


def _timm_erasing(t):
    """timm's RandomErasing (timm.data.random_erasing): probability, min_area
    and max_area, log_aspect_ratio, mode (const: zeros; pixel: a normal per
    value; rand: a normal per channel and box), min_count..max_count boxes
    of 1/count of the area each."""
    mode = str(getattr(t, "mode", "const") or "const").lower()
    lo, hi = (float(v) for v in t.log_aspect_ratio)
    out = {"erase_prob": float(t.probability),
           "erase_scale": (float(t.min_area), float(t.max_area)),
           "erase_ratio": (math.exp(lo), math.exp(hi))}
    if mode == "pixel":
        out["erase_random"] = True
    elif mode == "rand":
        out["erase_per_channel"] = True
    elif mode == "const":
        out["erase_value"] = (0.0, 0.0, 0.0)
    else:
        raise ValueError(f"timm RandomErasing: mode {mode!r} is not supported (const, rand, "
                         "pixel)")
    lo_n, hi_n = int(t.min_count), int(t.max_count)
    if lo_n != 1 and lo_n != hi_n or lo_n > 1:
        raise ValueError(f"timm RandomErasing: min_count={lo_n} is not supported (1 to max_count "
                         "boxes at random, as create_transform's re_count builds it)")
    if not 1 <= hi_n <= 4:
        raise ValueError(f"timm RandomErasing: max_count={hi_n} is not supported (1 to 4)")
    out["erase_count"] = hi_n
    if int(getattr(t, "num_splits", 0) or 0) > 1:
        raise ValueError("timm RandomErasing: num_splits > 1 (re_split, a clean part of each "
                         "batch) is not supported")
    return out


def _erasing(t):
    if hasattr(t, "probability") and hasattr(t, "log_aspect_ratio"):
        return _timm_erasing(t)
    if getattr(t, "inplace", False) not in (False, True):
        raise ValueError("RandomErasing: inplace must be a bool")
    out = {"erase_prob": float(t.p), "erase_scale": tuple(float(v) for v in t.scale),
           "erase_ratio": tuple(float(v) for v in t.ratio)}
    value = t.value
    if isinstance(value, str):
        if value != "random":
            raise ValueError(f"RandomErasing: value {value!r} is not supported "
                             "(a number, a tuple or 'random')")
        out["erase_random"] = True
    else:
        if isinstance(value, (list, tuple)) and len(value) == 0:
            value = 0
        out["erase_value"] = _triple(value, "RandomErasing value")
    return out


def mix_options(spec: Any) -> Dict[str, Any]:
    """Maps MixUp, CutMix or RandomChoice([MixUp, CutMix]) to the loader's
    batch mixing: {"mixup_alpha", "cutmix_alpha", "num_classes"}."""
    name = _name(spec)
    if name == "Mixup":
        return _timm_mix_options(spec)
    parts = list(spec.transforms) if name == "RandomChoice" else [spec]
    if name == "RandomChoice":
        p = getattr(spec, "p", None)
        if p is not None and len(set(float(v) for v in p)) > 1:
            raise ValueError("RandomChoice: only equal probabilities are supported")
    out = {"mixup_alpha": 0.0, "cutmix_alpha": 0.0, "num_classes": None}
    for t in parts:
        n = _name(t)
        _refuse_reference_mix(t)
        if n not in ("MixUp", "CutMix"):
            raise ValueError(f"mix: {n} is not a batch transform stoker runs (MixUp, CutMix, "
                             "RandomChoice of them)")
        key = "mixup_alpha" if n == "MixUp" else "cutmix_alpha"
        if out[key]:
            raise ValueError(f"mix: {n} is given twice")
        alpha = float(t.alpha)
        if not alpha > 0:
            raise ValueError(f"{n}: alpha must be positive, got {alpha}")
        out[key] = alpha
        nc = getattr(t, "num_classes", None)
        if nc is not None:
            if out["num_classes"] not in (None, int(nc)):
                raise ValueError("mix: MixUp and CutMix have different num_classes")
            out["num_classes"] = int(nc)
    return out


def _refuse_reference_mix(t: Any) -> None:
    """torchvision 0.14's RandomMixup and RandomCutmix (references/classification/
    transforms.py, applied to whole batches in collate_fn): named, with the
    stoker object to give instead."""
    n = _name(t)
    if n not in ("RandomMixup", "RandomCutmix"):
        return
    ours = "MixUp" if n == "RandomMixup" else "CutMix"
    nc = getattr(t, "num_classes", None)
    args = f"alpha={getattr(t, 'alpha', 1.0)!r}" + (f", num_classes={nc!r}" if nc else "")
    p = getattr(t, "p", 1.0)
    note = ""
    if p != 1.0:
        a = getattr(t, "alpha", 1.0)
        alphas = (f"mixup_alpha={a!r}, cutmix_alpha=0.0" if ours == "MixUp" else
                  f"mixup_alpha=0.0, cutmix_alpha={a!r}")
        timm_args = f"{alphas}, prob={p!r}, label_smoothing=0.0" + \
            (f", num_classes={nc!r}" if nc else "")
        note = (f"; for its p={p!r} (MixUp and CutMix mix every batch), "
                f"stoker.transforms.Mixup({timm_args}) mixes that share of the batches, "
                "pairing images as timm does")
    raise ValueError(f"mix: {n} (torchvision's references/classification/transforms.py) is not "
                     f"read: give stoker.transforms.{ours}({args}) as mix=, which mixes each "
                     f"batch with itself rolled by one, as {n} does{note}")


def _timm_mix_options(spec: Any) -> Dict[str, Any]:
    """timm's Mixup (stoker's or timm.data.Mixup) as the loader's batch mixing."""
    def num(attr, lo, hi=None):
        v = getattr(spec, attr)
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (v >= lo) or \
                (hi is not None and not v <= hi):
            rng = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
            raise ValueError(f"Mixup: {attr} must be a number {rng}, got {v!r}")
        return float(v)

    if not getattr(spec, "mixup_enabled", True):
        raise ValueError("Mixup: mixup_enabled is False: pass mix=None (the loader reads the "
                         "Mixup once, at construction; timm's mixup_off_epoch switch does not "
                         "reach it)")
    mode = getattr(spec, "mode", "batch")
    if mode != "batch":
        raise ValueError(f"Mixup: mode {mode!r} is not supported (only 'batch': one lambda per "
                         "batch)")
    if getattr(spec, "cutmix_minmax", None) is not None:
        raise ValueError("Mixup: cutmix_minmax is not supported (give cutmix_alpha)")
    out = {"timm": True, "mixup_alpha": num("mixup_alpha", 0.0),
           "cutmix_alpha": num("cutmix_alpha", 0.0), "prob": num("mix_prob", 0.0, 1.0),
           "switch_prob": num("switch_prob", 0.0, 1.0), "correct_lam": bool(spec.correct_lam),
           "label_smoothing": num("label_smoothing", 0.0, 1.0), "num_classes": None}
    if not out["mixup_alpha"] and not out["cutmix_alpha"]:
        raise ValueError("Mixup: mixup_alpha or cutmix_alpha must be positive")
    nc = getattr(spec, "num_classes", None)
    if nc is not None:
        out["num_classes"] = int(nc)
    return out
