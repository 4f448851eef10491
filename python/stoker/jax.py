"""JAX batches from a stoker loader: ``jax.Array`` images and labels.

    import stoker.jax
    it = stoker.jax.JaxLoader("data/train", batch_size=256, pipeline="train")
    for images, labels in it:          # jax.Array, on the local devices
        state = train_step(state, images, labels)

The images are made exactly as ``stoker.ImageLoader`` makes them (the same
arguments, the same bytes for the same seed), then handed to JAX through
DLPack: on one device, or split along the batch axis over the local devices (``sharded=True``, the default when there
are several), each device receiving its slice. Under multi-process JAX
(``jax.distributed.initialize()``), ``jax.process_index()`` and
``jax.process_count()`` are the rank and world size unless given, so each
process reads its own part of every epoch, as ``DistributedSampler`` splits
it.

The batch size is per process, and must divide evenly over the local
devices when sharded; the last, partial batch of an epoch is dropped when it
would not (``drop_last`` decides otherwise). A batch lives on the devices
after it is yielded: the host batch is released at once, so nothing of the
loader's is held by the arrays.
"""
from typing import Any, Iterator, Optional, Tuple

from ._common import DEFAULTS
from .loader import ImageLoader

__all__ = ["JaxLoader"]


def _jax():
    try:
        import jax  # noqa: F401
    except ImportError as e:  # pragma: no cover - the message is the point
        raise ImportError("stoker.jax needs JAX: pip install jax (jax[cpu], or jax[cuda12])") from e
    return jax


class JaxLoader:
    """Iterates ``(images, labels)`` as ``jax.Array``s; see the module's doc.

    Args:
        root, batch_size, **kwargs: as ``stoker.ImageLoader`` (``device`` must
            stay ``"cpu"``: the arrays are put on JAX's devices from there).
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
                             "through DLPack")
        self._devices = list(devices) if devices is not None else jax.local_devices()
        self._sharded = len(self._devices) > 1 if sharded is None else bool(sharded)
        if self._sharded and batch_size % len(self._devices):
            raise ValueError(f"stoker.jax: batch_size={batch_size} does not split evenly over "
                             f"{len(self._devices)} devices")
        if jax.process_count() > 1:
            kwargs.setdefault("rank", jax.process_index())
            kwargs.setdefault("world_size", jax.process_count())
        if self._sharded:
            # a partial batch cannot be split evenly: dropped, as DataLoader's drop_last
            kwargs.setdefault("drop_last", True)
        self.loader = ImageLoader(root, batch_size, **kwargs)
        self._sharding = None
        if self._sharded:
            from jax.sharding import Mesh, NamedSharding, PartitionSpec

            import numpy as np

            mesh = Mesh(np.array(self._devices), ("batch",))
            self._sharding = NamedSharding(mesh, PartitionSpec("batch"))

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)

    def _put(self, t) -> Any:
        jax = _jax()
        import jax.dlpack

        # DLPack shares the host batch with JAX, which copies it to the
        # devices; the copy is finished (block_until_ready) before the slot
        # goes back to the loader, whose workers then refill it. A CPU
        # device would keep sharing the slot: the batch is copied first.
        if any(d.platform == "cpu" for d in self._devices):
            t = t.clone()
        host = jax.dlpack.from_dlpack(t)
        if self._sharding is not None:
            out = jax.device_put(host, self._sharding)
        else:
            out = jax.device_put(host, self._devices[0])
        return out.block_until_ready()

    def __iter__(self) -> Iterator[Tuple[Any, Any]]:
        for images, labels in self.loader:
            yield self._put(images), self._put(labels)
            del images, labels

    def close(self) -> None:
        self.loader.close()

    def __enter__(self) -> "JaxLoader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
