"""stoker's augmentation ops one at a time, with parameters given from outside.

The loader draws every parameter itself (from seed, epoch and sample index).
These functions run the same C ops on one image with the parameters you
choose, so that a recipe's draws can be replayed, inspected or compared with
torchvision's::

    from stoker import functional as SF
    out = SF.apply_ops(img, [("Rotate", 30.0), ("Solarize", 128.0)])
    ops, erase = SF.draws(pipeline, seed=0, epoch=0, index=17)

Op names are torchvision's `_apply_op` names (``"ShearX"``, ``"Equalize"``,
...; their magnitudes as `_apply_op` takes them) and the functional names
``"adjust_brightness"``, ``"adjust_contrast"``, ``"adjust_saturation"``,
``"adjust_hue"``, ``"adjust_sharpness"`` (a factor), ``"rgb_to_grayscale"``,
``"gaussian_blur"`` (sigma; give ``kernel_size``), ``"vflip"``, ``"hflip"``.
"""
from typing import Any, List, Optional, Sequence, Tuple

from . import _stoker_ops  # the private hooks into the C ops
from . import transforms as _T

__all__ = ["apply_ops", "draws", "op_names"]

_MAX_OPS = 24  # the C library's ops per sample


def op_names() -> Tuple[str, ...]:
    """The ops' names, by the C library's numbering."""
    return _stoker_ops._op_names()


def apply_ops(image: Any, ops: Sequence[Tuple[str, float]], *, interpolation: str = "nearest",
              fill: Optional[Sequence[float]] = None, kernel_size: int = 0) -> Any:
    """Applies ``ops`` ((name, magnitude) pairs, in order) to an RGB uint8 image:
    a torch tensor ``[3, H, W]`` (torchvision's layout) or a numpy array
    ``[H, W, 3]``; returns the same kind. ``interpolation`` is the warps'
    ("nearest" or "bilinear"), ``fill`` their fill (None: zeros, as
    torchvision's fill=None)."""
    if interpolation not in ("nearest", "bilinear"):
        raise ValueError(f"interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")
    is_torch = type(image).__module__.startswith("torch")
    if is_torch:
        if image.dtype.is_floating_point or image.dim() != 3 or image.shape[0] != 3:
            raise ValueError("apply_ops takes a uint8 [3, H, W] tensor")
        arr = image.permute(1, 2, 0).contiguous().cpu().numpy()
    else:
        import numpy as np

        arr = np.ascontiguousarray(image)
        if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
            raise ValueError("apply_ops takes a uint8 [H, W, 3] array")
    h, w = arr.shape[:2]
    data = arr.tobytes()
    for name, mag in ops:
        data = _stoker_ops._apply_op(name, data, w, h, float(mag), interpolation == "nearest",
                                     None if fill is None else tuple(float(v) for v in fill),
                                     int(kernel_size))
    import numpy as np

    out = np.frombuffer(data, np.uint8).reshape(h, w, 3).copy()
    if is_torch:
        import torch

        return torch.from_numpy(out).permute(2, 0, 1).contiguous().to(image.device)
    return out


def draws(pipeline: Any, *, seed: int = 0, epoch: int = 0,
          index: int = 0) -> Tuple[List[Tuple[str, float]], Optional[Tuple[int, int, int, int]]]:
    """What the loader draws for sample ``index`` of ``epoch`` under a transform
    list: the ops after the crop, in order, as (name, magnitude) pairs, and the
    RandomErasing box (x, y, w, h) or None. (The crop and the horizontal flip
    come from the sample's own stream, as before.)"""
    opts = _T.pipeline_options(pipeline)
    opts.pop("interpolation", None)
    opts.pop("pipeline")
    kinds, mags, boxes = _stoker_ops._aug_draws(int(epoch), int(index), 1, seed=int(seed), **opts)
    names = op_names()
    import struct

    mag = struct.unpack(f"{_MAX_OPS}f", mags)
    ops = [(names[k], float(m)) for k, m in zip(kinds, mag) if k != 255]
    x, y, w, h = struct.unpack("4i", boxes)
    return ops, ((x, y, w, h) if w else None)
