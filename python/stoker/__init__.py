"""stoker: training images for PyTorch from a C loader, without worker processes.

    import stoker
    loader = stoker.ImageLoader("imagenet/train", batch_size=256, pipeline="train")
    for images, labels in loader:   # float32 [256, 3, 224, 224], int64 [256]
        ...

    stoker.pack("imagenet/train", "train.stkc")       # a pre-decoded cache
    loader = stoker.ImageLoader("train.stkc", batch_size=256)

See docs/python.md for the options and semantics.
"""
import os as _os
import sys as _sys

# Where a pip-only environment keeps nvJPEG, searched after the system's
# copy (the loader's path): the nvidia-nvjpeg wheels (CUDA 13: nvidia/cu13/lib;
# CUDA 12: nvidia/nvjpeg/lib) and torchvision's bundled copy.
_NVJPEG_SUBDIRS = ("nvidia/cu13/lib", "nvidia/nvjpeg/lib", "nvidia/cu12/lib",
                   "torchvision.libs", "torchvision/lib")


def _nvjpeg_dirs(paths=None):
    """The library folders that may hold nvJPEG, in the order libstoker tries
    them: for each entry of ``paths`` (default ``sys.path``), those of
    _NVJPEG_SUBDIRS that exist."""
    out = []
    for base in _sys.path if paths is None else paths:
        for sub in _NVJPEG_SUBDIRS:
            d = _os.path.join(base or _os.curdir, *sub.split("/"))
            if _os.path.isdir(d):
                d = _os.path.abspath(d)
                if d not in out:
                    out.append(d)
    return out


def _export_nvjpeg_dirs():
    """Hands the folders to libstoker (src/gpu/binding.c reads STOKER_NVJPEG_PATH
    when it first opens nvJPEG, and the stoker command inherits it); folders
    already named there come first."""
    have = [d for d in _os.environ.get("STOKER_NVJPEG_PATH", "").split(_os.pathsep) if d]
    dirs = have + [d for d in _nvjpeg_dirs() if d not in have]
    if dirs:
        _os.environ["STOKER_NVJPEG_PATH"] = _os.pathsep.join(dirs)


_export_nvjpeg_dirs()

from . import transforms  # noqa: E402
from ._stoker import DecodeError, StaleCacheError, build_info, check_file  # noqa: E402
from ._stoker import __version__  # noqa: E402
from .loader import OPTIONS, Batch, ImageLoader  # noqa: E402
from .pack import PackResult, pack  # noqa: E402

__all__ = ["ImageLoader", "Batch", "DecodeError", "StaleCacheError", "transforms", "check_file",
           "build_info", "pack", "PackResult", "OPTIONS", "__version__"]
