"""JAX batches from a stoker loader: ``jax.Array`` images and labels.

    import stoker.jax
    it = stoker.jax.JaxLoader("data/train", batch_size=256, pipeline="train",
                              channels_last=True)      # NHWC: (256, 224, 224, 3)
    for images, labels in it:          # jax.Array, on the local devices
        state = train_step(state, images, labels)

Needs JAX (and numpy, which JAX brings), not torch. The images are made
exactly as ``stoker.ImageLoader`` makes them (the same arguments, the same
bytes for the same seed), read from the loader's host batch and put on one
device, or split along the batch axis over the local devices
(``sharded=True``, the default when there are several), each device
receiving its slice. ``channels_last=True`` gives NHWC arrays, shape
``(B, H, W, 3)``, in JAX's default (row-major) layout, as flax's
convolutions take them; the default is NCHW, ``(B, 3, H, W)``.

Under multi-process JAX (``jax.distributed.initialize()``),
``jax.process_index()`` and ``jax.process_count()`` are the rank and world
size unless given, so each process reads its own part of every epoch, as
``DistributedSampler`` splits it; ``seed=None`` draws one seed, process 0's
for every process.

The batch size is per process, and must divide evenly over the local
devices when sharded; the last, partial batch of an epoch is dropped when it
would not (``drop_last`` decides otherwise). A batch lives on the devices
after it is yielded: the host batch is released at once, so nothing of the
loader's is held by the arrays.
"""
import ctypes
import os
from typing import Any, Iterator, Optional, Tuple

from ._common import DEFAULTS
from .loader import ImageLoader

__all__ = ["JaxLoader"]


def _jax():
    try:
        import jax  # noqa: F401
    except ImportError as e:  # pragma: no cover - the message is the point
        raise ImportError("stoker.jax needs JAX: pip install jax (jax[cpu], or jax[cuda12]); "
                          "torch is not needed") from e
    return jax


# ---- the loader's DLPack capsules read as numpy arrays, without torch -------------------
# The binding (_stoker.c) hands out each batch as two "dltensor" capsules
# (DLPack 0.x). They are read here in place, through the array interface, so
# that every element type works (numpy's own from_dlpack knows no bfloat16)
# and torch is not needed; the view keeps its capsule, whose destructor gives
# the slot back once the view is freed.

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

# (DLDataTypeCode, bits) -> the array interface's type, and the dtype to view it as
_KDLINT, _KDLUINT, _KDLFLOAT, _KDLBFLOAT = 0, 1, 2, 4
_TYPESTR = {(_KDLFLOAT, 32): "<f4", (_KDLFLOAT, 16): "<f2", (_KDLBFLOAT, 16): "<u2",
            (_KDLUINT, 8): "|u1", (_KDLINT, 64): "<i8"}


class _HostView:
    """A loader capsule as an object numpy reads through ``__array_interface__``;
    it holds the capsule, so the slot stays the loader's until the view goes."""

    def __init__(self, capsule: Any) -> None:
        t = _DLTensor.from_address(_get_pointer(capsule, b"dltensor"))
        if t.device.device_type != 1:  # kDLCPU
            raise RuntimeError("stoker.jax reads host batches: leave device= unset")
        key = (t.dtype.code, t.dtype.bits)
        if key not in _TYPESTR or t.dtype.lanes != 1:
            raise RuntimeError(f"stoker.jax: a batch of an unknown element type {key}")
        self.bfloat16 = t.dtype.code == _KDLBFLOAT
        item = t.dtype.bits // 8
        shape = tuple(t.shape[i] for i in range(t.ndim))
        strides = tuple(t.strides[i] * item for i in range(t.ndim)) if t.strides else None
        self.__array_interface__ = {"version": 3, "shape": shape, "typestr": _TYPESTR[key],
                                    "data": (t.data + t.byte_offset, False),
                                    "strides": strides}
        self._capsule = capsule


def _host_array(capsule: Any) -> Any:
    """The capsule as a numpy view of the loader's memory (no copy)."""
    import numpy as np

    v = _HostView(capsule)
    a = np.asarray(v)
    if v.bfloat16:
        import ml_dtypes  # JAX's own dependency: jnp.bfloat16 is ml_dtypes.bfloat16

        a = a.view(ml_dtypes.bfloat16)
    return a


class _HostLoader(ImageLoader):
    """ImageLoader whose batches are numpy views of its host memory: what
    JaxLoader reads, with no torch. The labels are copies (small), as
    ImageLoader's."""

    def _require_backend(self) -> None:
        import numpy  # noqa: F401  (JAX brings it)

    def _default_seed(self) -> int:  # JaxLoader always passes one
        return int.from_bytes(os.urandom(8), "little") >> 1

    def _copy_labels(self, labels: Any) -> Any:
        return labels.copy()

    def _init_arrays(self, pin_memory: bool) -> None:
        if pin_memory:
            raise ValueError("stoker.jax: pin_memory does not apply (JAX copies the batch to "
                             "its devices itself)")
        self._from_dlpack = _host_array
        self._pin = False
        self._pinned = {}
        import collections

        self._held = collections.deque()


def _draw_seed(jax: Any) -> int:
    """seed=None: a fresh seed, process 0's for every process under multi-process
    JAX (the ranks' shards only fit together under one seed)."""
    import numpy as np

    seed = int.from_bytes(os.urandom(8), "little") >> 1
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        # two 32-bit halves: JAX's default integers are 32 bits
        halves = np.array([seed & 0xFFFFFFFF, seed >> 32], dtype=np.uint32)
        halves = np.asarray(multihost_utils.broadcast_one_to_all(halves))
        seed = int(halves[0]) | (int(halves[1]) << 32)
    return seed


class JaxLoader:
    """Iterates ``(images, labels)`` as ``jax.Array``s; see the module's doc.

    Args:
        root, batch_size, **kwargs: as ``stoker.ImageLoader`` (``device`` must
            stay ``"cpu"``: the arrays are put on JAX's devices from there;
            ``channels_last=True`` gives NHWC arrays).
        sharded: split each batch over ``jax.local_devices()`` along its first
            axis (None: when there is more than one).
        devices: the devices to use (default ``jax.local_devices()``).
    """

    def __init__(self, root: Any = None, batch_size: int = DEFAULTS["batch_size"], *,
                 sharded: Optional[bool] = None, devices: Optional[list] = None,
                 **kwargs: Any) -> None:
        jax = _jax()
        if kwargs.get("device", "cpu") not in ("cpu", None, -1):
            raise ValueError("stoker.jax: leave device= unset; batches go to JAX's devices "
                             "from the loader's host memory")
        kwargs.pop("device", None)
        self._devices = list(devices) if devices is not None else jax.local_devices()
        self._sharded = len(self._devices) > 1 if sharded is None else bool(sharded)
        if self._sharded and batch_size % len(self._devices):
            raise ValueError(f"stoker.jax: batch_size={batch_size} does not split evenly over "
                             f"{len(self._devices)} devices")
        if jax.process_count() > 1:
            kwargs.setdefault("rank", jax.process_index())
            kwargs.setdefault("world_size", jax.process_count())
        if kwargs.get("seed") is None:
            kwargs["seed"] = _draw_seed(jax)
        if self._sharded:
            # a partial batch cannot be split evenly: dropped, as DataLoader's drop_last
            kwargs.setdefault("drop_last", True)
        self.channels_last = bool(kwargs.get("channels_last", False))
        self.loader = _HostLoader(root, batch_size, **kwargs)
        # A CPU device may alias a numpy array it is given instead of copying
        # it: the batch is copied out of the slot first.
        self._copy = any(d.platform == "cpu" for d in self._devices)
        if self._sharded:
            import numpy as np
            from jax.sharding import Mesh, NamedSharding, PartitionSpec

            mesh = Mesh(np.array(self._devices), ("batch",))
            self._target = NamedSharding(mesh, PartitionSpec("batch"))
        else:
            self._target = self._devices[0]

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)

    def _put(self, host: Any) -> Any:
        """A host array on the devices: finished (block_until_ready) before the
        loader's slot can be given back and refilled."""
        import numpy as np

        jax = _jax()
        if self._copy:
            host = np.array(host, order="C", copy=True)
        return jax.device_put(host, self._target).block_until_ready()

    def __iter__(self) -> Iterator[Tuple[Any, Any]]:
        for images, labels in self.loader:
            if self.channels_last:
                # The slot holds NHWC, described as NCHW with permuted strides
                # (torch's channels_last): read it as the (B, H, W, 3) array it
                # is, row-major, which is the only layout XLA takes from the host.
                images = images.transpose(0, 2, 3, 1)
            yield self._put(images), self._put(labels)
            del images, labels

    def close(self) -> None:
        self.loader.close()

    def __enter__(self) -> "JaxLoader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
