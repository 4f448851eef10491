"""Transform descriptions with torchvision's names and defaults.

These objects do not process images themselves: a list of them tells
``stoker.ImageLoader`` which of its two C pipelines to run and with which
parameters, so that porting a torchvision recipe is a matter of changing the
import::

    from stoker import transforms as T      # was: from torchvision import transforms as T
    train = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                       T.ToTensor(), T.Normalize(mean, std)])

Supported sequences (torchvision transform objects of the same classes are
accepted too):

* train: ``RandomResizedCrop(s, scale, ratio)``, optionally
  ``RandomHorizontalFlip(p)``, optionally ``ToTensor()``/``PILToTensor()``,
  optionally ``Normalize(mean, std)``.
* eval: ``Resize(r)`` (``r`` an int: the shorter side), ``CenterCrop(s)``,
  optionally ``ToTensor()``/``PILToTensor()``, optionally ``Normalize``.

Without ``Normalize`` a float output holds ``ToTensor()`` values in [0, 1]
(mean 0, std 1). Anything else raises ``ValueError`` naming what is not
supported.
"""
import enum
import numbers
from typing import Any, Dict, NoReturn, Optional, Sequence, Tuple, Union

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
]


class InterpolationMode(enum.Enum):
    """torchvision's interpolation names; stoker implements BILINEAR only."""

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
    mode = getattr(t, "interpolation", InterpolationMode.BILINEAR)
    value = getattr(mode, "value", mode)
    # PIL's Image.BILINEAR is 2, an older spelling torchvision still accepts.
    if value not in ("bilinear", 2):
        raise ValueError(f"{what}: interpolation {mode!r} is not supported yet (bilinear only)")
    if getattr(t, "antialias", True) is False:
        raise ValueError(f"{what}: antialias=False is not supported (stoker always antialiases, "
                         "as torchvision does for PIL images)")


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
    (``mean``/``std`` are absent when the list has no Normalize).
    """
    steps = list(getattr(spec, "transforms", spec))
    if not steps:
        raise ValueError("the transform list is empty")
    names = [_name(t) for t in steps]
    opts: Dict[str, Any] = {}
    rest = steps
    first = names[0]
    if first == "RandomResizedCrop":
        t = steps[0]
        _check_resampling(t, "RandomResizedCrop")
        opts.update(pipeline="train", size=_square(t.size, "RandomResizedCrop"),
                    scale=tuple(float(v) for v in t.scale),
                    ratio=tuple(float(v) for v in t.ratio), flip_prob=0.0)
        rest = steps[1:]
        if rest and _name(rest[0]) == "RandomHorizontalFlip":
            opts["flip_prob"] = float(rest[0].p)
            rest = rest[1:]
    elif first == "Resize":
        t = steps[0]
        _check_resampling(t, "Resize")
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
    # What may follow: [ToTensor | PILToTensor] then [Normalize].
    if rest and _name(rest[0]) in ("ToTensor", "PILToTensor"):
        rest = rest[1:]
    if rest and _name(rest[0]) == "Normalize":
        opts["mean"] = _triple(rest[0].mean, "Normalize mean")
        opts["std"] = _triple(rest[0].std, "Normalize std")
        rest = rest[1:]
    if rest:
        bad = _name(rest[0])
        known = ("RandomResizedCrop", "RandomHorizontalFlip", "Resize", "CenterCrop",
                 "ToTensor", "PILToTensor", "Normalize")
        if bad in known:
            raise ValueError(f"{bad} at position {len(steps) - len(rest)} of "
                             f"[{', '.join(names)}]: this order is not supported yet")
        raise ValueError(f"{bad} is not supported yet")
    return opts
