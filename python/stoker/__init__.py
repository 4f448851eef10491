"""stoker: training images for PyTorch from a C loader, without worker processes.

    import stoker
    loader = stoker.ImageLoader("imagenet/train", batch_size=256, pipeline="train")
    for images, labels in loader:   # float32 [256, 3, 224, 224], int64 [256]
        ...

    stoker.pack("imagenet/train", "train.stkc")       # a pre-decoded cache
    loader = stoker.ImageLoader("train.stkc", batch_size=256)

See docs/python.md for the options and semantics.
"""
from . import transforms
from ._stoker import DecodeError, StaleCacheError, build_info, check_file
from ._stoker import __version__
from .loader import OPTIONS, Batch, ImageLoader
from .pack import PackResult, pack

__all__ = ["ImageLoader", "Batch", "DecodeError", "StaleCacheError", "transforms", "check_file",
           "build_info", "pack", "PackResult", "OPTIONS", "__version__"]
