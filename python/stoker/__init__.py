"""stoker: training images for PyTorch from a C loader, without worker processes.

    import stoker
    loader = stoker.ImageLoader("imagenet/train", batch_size=256, pipeline="train")
    for images, labels in loader:   # float32 [256, 3, 224, 224], int64 [256]
        ...

See docs/python.md for the options and semantics.
"""
from . import transforms
from ._stoker import DecodeError, build_info, check_file
from ._stoker import __version__
from .loader import Batch, ImageLoader

__all__ = ["ImageLoader", "Batch", "DecodeError", "transforms", "check_file", "build_info",
           "__version__"]
