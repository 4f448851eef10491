"""stoker.ImageLoader: the Python face of libstoker's loader."""
import collections
import inspect
import os
import sys
import warnings
import weakref
from typing import (TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple, Union)

from . import _stoker
from . import transforms as _T
from ._common import (DEFAULTS, GPU_MAX_SIDE, OPTIONS, PACK_DEFAULTS, StrPath, _check_list_file,
                      _cpu_count, _default_threads, _device_index, _int, _number, _torch,
                      choices_text)
from .pack import pack as _pack

if TYPE_CHECKING:
    from typing import Self

    import torch
    from torchvision.datasets import DatasetFolder

__all__ = ["ImageLoader", "Batch", "OPTIONS"]


class Batch(NamedTuple):
    """One batch with its position, as ``ImageLoader.iter_batches()`` yields it."""

    images: "torch.Tensor"
    labels: "torch.Tensor"
    epoch: int
    batch_index: int
    indices: List[int]  # dataset indices of the images (``loader.samples[i]``)


_DTYPE_NAMES = {
    "float32": "float32", "float": "float32",
    "float16": "float16", "half": "float16",
    "bfloat16": "bfloat16",
    "uint8": "uint8",
}


def _dtype_name(dtype):
    """dtype= as the C library names it: a name ("float16"), a torch dtype, or
    a numpy or JAX one (np.float16, jnp.bfloat16; read by name, without torch)."""
    if isinstance(dtype, str):
        key = dtype
    else:
        # torch.float16 prints as "torch.float16"; numpy and JAX scalar types
        # (np.float16, jnp.bfloat16) have a __name__, np.dtype objects a name
        key = getattr(dtype, "__name__", None) or getattr(dtype, "name", None) or str(dtype)
    name = _DTYPE_NAMES.get(str(key).lower().replace("torch.", ""))
    if name is None:
        raise ValueError(f"dtype must be {choices_text('dtype')}, got {dtype!r}")
    return name


def _draw_seed(torch):
    """seed=None: a seed from torch's default generator, drawn as DataLoader
    draws its base seed, so that torch.manual_seed(k) decides it and two
    loaders made one after the other differ. Under an initialised process
    group every rank takes rank 0's draw (a broadcast: every rank must build
    its loader), as the ranks' shards only fit together under one seed."""
    seed = int(torch.empty((), dtype=torch.int64).random_().item())
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        box = [seed]
        dist.broadcast_object_list(box, src=0)
        seed = int(box[0])
    return seed


def _cache_for(root, list_file, cache, max_side, threads, on_error, max_skipped_fraction,
               device=-1):
    """ImageLoader(cache=...): the cache file's path, packed from the folder
    ``root`` first when it does not exist yet. Under torch.distributed the
    process of local rank 0 packs and the others wait for it (a barrier that
    the packer reaches whether it succeeds or fails, so no rank hangs)."""
    if list_file is not None or root is None:
        raise ValueError("cache: give root, the image folder the cache is packed from "
                         "(a list file is packed with stoker.pack(list_file=...))")
    if not os.path.isdir(root):
        raise ValueError(f"cache: root must be an image folder, and {root!r} is not one (a "
                         "cache or tar shards are read as root directly)")
    cache = os.fspath(cache)
    try:
        import torch.distributed as dist  # absent under stoker.jax without torch: one process
    except ImportError:
        dist = None
    multi = dist is not None and dist.is_available() and dist.is_initialized() and \
        dist.get_world_size() > 1
    local0 = int(os.environ.get("LOCAL_RANK", dist.get_rank() if multi else 0)) == 0
    err = None
    if local0 and not os.path.exists(cache):
        try:
            _pack_cache(root, cache, max_side, threads, on_error, max_skipped_fraction, device)
        except BaseException as e:  # reach the barrier first: the other ranks wait there
            err = e
    if multi:
        dist.barrier()
    if err is not None:
        raise err
    if not os.path.exists(cache):
        raise FileNotFoundError(f"cache {cache!r} was not packed: see the error of the process "
                                "of local rank 0")
    return cache


def _pack_cache(root, cache, max_side, threads, on_error, max_skipped_fraction, device=-1):
    """Packs the cache for ImageLoader(cache=...), on the loader's GPU when
    it has one (device >= 0). The files the pack leaves out are the loader's
    bad files: under on_error="raise" (or past max_skipped_fraction) the
    pack is removed and DecodeError names them; under "skip" they are listed
    in a warning."""
    # a pack on a device sizes its GPU output by the bound: full-size (0) or
    # larger bounds pack on the CPU
    if not 1 <= max_side <= GPU_MAX_SIDE:
        device = -1
    on = f"on cuda:{device}" if device >= 0 else "on the CPU"
    sys.stderr.write(f"stoker: packing {root} into the cache {cache} (max_side {max_side}, "
                     f"{on}); the loader reads the cache from then on\n")
    try:
        r = _pack(root, cache, max_side=max_side, threads=threads, progress=True,
                  device=device if device >= 0 else None)
    except BaseException:
        # Ctrl-C during the pack stops it with nothing written; one that
        # comes after its last check between files is raised once the
        # finished cache is in place, a cache that never went through the
        # bad-file check below. It did not exist before (_cache_for), so it
        # goes.
        if os.path.exists(cache):
            os.unlink(cache)
        raise
    if not r.left_out:
        return
    total = r.packed + r.failed
    limit = DEFAULTS["max_skipped_fraction"] if max_skipped_fraction is None else \
        max_skipped_fraction
    names = "; ".join(f"{p}: {why}" for p, why in r.left_out[:5])
    more = f" (and {len(r.left_out) - 5} more)" if len(r.left_out) > 5 else ""
    if on_error == "raise" or r.failed > limit * total:
        os.unlink(cache)
        why = ("on_error='raise'" if on_error == "raise" else
               f"more than max_skipped_fraction={limit:g} of the files")
        raise _stoker.DecodeError(f"packing the cache {cache}: {r.failed} of {total} files "
                                  f"cannot be decoded ({why}), so no cache was kept: "
                                  f"{names}{more}")
    warnings.warn(f"the cache {cache} leaves out {r.failed} of {total} files that cannot be "
                  f"decoded (on_error='skip'): {names}{more}", RuntimeWarning, stacklevel=4)


def _check_cache_source(c, cache, root):
    """A cache= that exists must have been packed from root: its samples'
    names are CACHE#<the folder it was packed from>/<class>/<file>. The part
    below root must start with the sample's class, or the cache was packed
    from a folder inside root (root/train for root)."""
    if c.counts()["num_samples"] == 0:
        return
    path, label = c.sample(0)
    src = path[len(cache) + 1:] if path.startswith(cache + "#") else path
    classes = c.classes()
    for r in {os.path.abspath(root), os.path.realpath(root)}:
        r = r.rstrip(os.sep) + os.sep
        if src.startswith(r) and 0 <= label < len(classes) and \
                src[len(r):].split(os.sep, 1)[0] == classes[label]:
            return
    c.close()
    raise ValueError(f"cache {cache!r} was packed from another folder than root {root!r} (its "
                     f"first file is {src!r}): give another cache path, or remove it to pack "
                     "it again")


def _dist_defaults(rank, world_size):
    if rank is not None and world_size is not None:
        return rank, world_size
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            r, w = dist.get_rank(), dist.get_world_size()
            return (r if rank is None else rank), (w if world_size is None else world_size)
    except ImportError:
        pass
    # No process group. Under torchrun (WORLD_SIZE > 1) the defaults 0 and 1
    # would make every rank read the whole dataset in the same order without
    # a word: refuse, as DistributedSampler does, unless the shard is given.
    try:
        env_world = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        env_world = 1
    if env_world > 1 and (world_size is None or (rank is None and world_size > 1)):
        raise RuntimeError(
            f"WORLD_SIZE={env_world} is set (torchrun?) but torch.distributed's process group "
            "is not initialised, so this loader does not know its shard: call "
            "torch.distributed.init_process_group() before creating the ImageLoader, or pass "
            "rank= and world_size= (world_size=1 reads the whole dataset)")
    return ((DEFAULTS["rank"] if rank is None else rank),
            (DEFAULTS["world_size"] if world_size is None else world_size))


def _threads(threads):
    """threads= as the options table has it, 0 = every CPU (as `stoker bench --threads 0`),
    counting those this process may use; None = _default_threads()."""
    if threads is None:
        return _default_threads()
    threads = _int("threads", threads)
    if threads == 0:
        threads = min(_cpu_count(), OPTIONS["threads"]["max"])
    return threads


# Arguments of DataLoader (and ImageFolder) that ImageLoader spells otherwise:
# a TypeError that names the replacement, instead of a bare "unexpected keyword".
_PORTING_HINTS = {
    "num_workers": "the images are decoded by C threads in this process, not by worker "
                   "processes: use threads=N (None = the CPUs this process may use)",
    "persistent_workers": "there are no worker processes: the threads live as long as the loader",
    "prefetch_factor": "use prefetch=N (batches prepared ahead, for the whole loader)",
    "sampler": "the loader shards and shuffles itself as DistributedSampler: use shuffle=, "
               "seed=, rank=, world_size= and loader.set_epoch(epoch); weights= samples with "
               "replacement as WeightedRandomSampler",
    "transform": "give the transforms as pipeline= (or pass the ImageFolder itself as root)",
    "collate_fn": "batches are assembled in C: give MixUp/CutMix as mix=, and apply other "
                  "per-batch code to the (images, labels) the loop yields",
    "batch_sampler": "the loader makes its batches itself from batch_size=, drop_last=, "
                     "shuffle=, seed=, rank=, world_size= (and ra_reps= for RASampler)",
    "worker_init_fn": "there are no worker processes to initialise: the C threads need no setup "
                      "(seed= seeds their random draws)",
    "generator": "the order and augmentations come from seed= (None draws it from torch's "
                 "default generator: torch.manual_seed decides it)",
    "timeout": "use read_timeout= (seconds one file read may take); next() itself waits for "
               "its batch and Ctrl-C interrupts it",
}


# sampler= by the sampler's class: what ImageLoader takes instead.
_SAMPLER_HINTS = {
    "WeightedRandomSampler": "give its weights as weights= (one per sample, in "
                             "loader.samples order): ImageLoader(..., weights=w) draws each epoch "
                             "with replacement as WeightedRandomSampler(w, len(w)) does, from "
                             "seed= and the epoch, the ranks taking slices of one draw",
    "SubsetRandomSampler": "pass torch.utils.data.Subset(image_folder, indices) as root, with "
                           "shuffle=True: the loader reads those samples in a new order each "
                           "epoch",
    "RandomSampler": "use shuffle=True (and seed=)",
    "SequentialSampler": "use shuffle=False",
}


def _check_kwargs(kwargs):
    for name in kwargs:
        hint = _PORTING_HINTS.get(name)
        if name == "sampler":
            hint = _SAMPLER_HINTS.get(type(kwargs[name]).__name__, hint)
        if hint is not None:
            raise TypeError(f"ImageLoader() got an unexpected keyword argument {name!r}: {hint}")


def _is_url(name):
    """s3://, http://, https:// and hf:// names: remote tar shards."""
    return isinstance(name, str) and name.lower().startswith(("s3://", "http://", "https://",
                                                              "hf://"))


def _dataset_folder(root, pipeline):
    """(folder, pipeline) for a torchvision ImageFolder/DatasetFolder given as root: its
    folder, and its transform as the pipeline unless pipeline= is given too."""
    tf = getattr(root, "transform", None)
    if getattr(root, "target_transform", None) is not None:
        raise ValueError("root: an ImageFolder with a target_transform is not supported (the "
                         "loader yields ImageFolder's class indices as labels)")
    if tf is not None:
        if pipeline is not None and pipeline is not tf:
            raise ValueError("root is an ImageFolder with a transform and pipeline= is given "
                             "too: give the transforms once")
        pipeline = tf
    return os.fspath(root.root), pipeline


def _subset_list(subset, pipeline):
    """A torch Subset (random_split's parts too, nested ones composed) of an
    ImageFolder as (a temporary folder holding a list file of its samples in
    the subset's order, with its class names, the list file, the pipeline:
    the ImageFolder's transform unless pipeline= is given)."""
    import tempfile

    idx = list(range(len(subset.indices)))
    ds = subset
    while hasattr(ds, "dataset") and hasattr(ds, "indices"):
        idx = [int(ds.indices[i]) for i in idx]
        ds = ds.dataset
    if not (hasattr(ds, "samples") and hasattr(ds, "classes")):
        raise TypeError(f"root: a Subset of {type(ds).__name__}: the loader takes Subsets of an "
                        "ImageFolder (or a DatasetFolder with samples and classes)")
    if getattr(ds, "target_transform", None) is not None:
        raise ValueError("root: an ImageFolder with a target_transform is not supported (the "
                         "loader yields ImageFolder's class indices as labels)")
    if getattr(ds, "transform", None) is not None:
        if pipeline is not None and pipeline is not ds.transform:
            raise ValueError("root is a Subset of an ImageFolder with a transform and pipeline= "
                             "is given too: give the transforms once")
        pipeline = ds.transform
    tmp = tempfile.TemporaryDirectory(prefix="stoker-subset-")
    path = os.path.join(tmp.name, "subset.txt")
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(_class_header(ds.classes))
        for i in idx:
            p, label = ds.samples[i]
            f.write(f"{os.path.abspath(p)} {int(label)}\n")
    return tmp, path, pipeline


def _weights_file(weights):
    """weights= as the C library reads it: (a temporary folder kept with the
    loader, the path of a text file of the weights, one a line, each exact
    (repr), and a digest of them for state_dict()'s fingerprint). The C
    library checks the count against the samples and the values."""
    import hashlib
    import math
    import tempfile

    if isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__"):
        raise TypeError(f"weights must be a sequence of numbers (a list, a numpy array or a "
                        f"tensor), one per sample, got {type(weights).__name__}")
    if hasattr(weights, "detach"):  # a tensor
        weights = weights.detach().cpu()
    if hasattr(weights, "tolist"):
        weights = weights.tolist()
    try:
        values = [float(w) for w in weights]
    except (TypeError, ValueError):
        raise TypeError("weights must be numbers, one per sample") from None
    for i, w in enumerate(values):
        if not (math.isfinite(w) and w >= 0):
            raise ValueError(f"weights[{i}] is {w}: weights must be finite and >= 0")
    if values and not sum(values) > 0:
        raise ValueError("weights sum to 0: at least one sample needs a positive weight")
    text = "".join(repr(w) + "\n" for w in values)
    tmp = tempfile.TemporaryDirectory(prefix="stoker-weights-")
    path = os.path.join(tmp.name, "weights.txt")
    with open(path, "w", encoding="ascii") as f:
        f.write(text)
    return tmp, path, hashlib.sha256(text.encode()).hexdigest()[:16]


def _class_header(names):
    """A list file's class names: one "# class: NAME" line per class, in label order."""
    for n in names:
        if "\n" in n or "\r" in n:
            raise ValueError(f"class name {n!r}: a line break cannot go in a list file")
    return "".join(f"# class: {n}\n" for n in names)


def _list_classes(path):
    """The class names a list file carries: its "# class: NAME" lines before
    the first sample line, in label order; None when it has none (or is a
    pipe or FIFO, whose lines the loader itself must read)."""
    if not os.path.isfile(path):
        return None
    names = []
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            s = line.strip()
            if not s:
                continue
            if not s.startswith("#"):
                break
            if s.startswith("# class:"):
                names.append(line.split("# class:", 1)[1].strip("\r\n").strip(" "))
    return names or None


class ImageLoader:
    """Batches of decoded, augmented, normalised images from a folder, a list
    file, a pre-decoded cache or tar shards (``stoker.pack``).

    A drop-in for ``DataLoader(ImageFolder(root, transform), batch_size,
    shuffle=...)``: iterating yields ``(images, labels)``, images a
    ``[B, 3, size, size]`` tensor, labels int64 ``[B]``. See docs/python.md.

    The images share memory with the loader (no copy). Each batch keeps its
    slot until its images tensor is freed; the loader has ``prefetch + 2``
    slots, so keeping more images tensors than that alive raises
    RuntimeError: keep ``.clone()``\\ s of what must outlive the loop. The
    labels are a copy of their own (they are small): keeping them costs no
    slot.
    """

    batch_size: int
    pipeline: str
    size: int
    num_slots: int

    def __new__(cls, *args: Any, **kwargs: Any) -> "Self":
        # before __init__ binds its arguments: DataLoader's names get a hint
        _check_kwargs(kwargs)
        return super().__new__(cls)

    # The defaults that are the C library's are read from its options table
    # (DEFAULTS; cache_max_side is the pack table's max_side); None defaults
    # leave the option to C, which fills it in. test_defaults_single_source.py
    # holds each against C's.
    def __init__(self, root: Union[StrPath, "DatasetFolder", None] = None,
                 batch_size: int = DEFAULTS["batch_size"], *,
                 pipeline: Union[str, Sequence[Any], Any, None] = None,
                 size: Optional[int] = None, threads: Optional[int] = None,
                 device: Union[str, int, "torch.device"] = "cpu", seed: Optional[int] = None,
                 shuffle: Optional[bool] = None, drop_last: bool = DEFAULTS["drop_last"],
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 on_error: str = DEFAULTS["on_error"],
                 dtype: Union[str, "torch.dtype", None] = None,
                 channels_last: bool = DEFAULTS["layout"] == "nhwc",
                 prefetch: int = DEFAULTS["prefetch"],
                 list_file: Optional[StrPath] = None, list_base: Optional[StrPath] = None,
                 shard_drop_last: bool = DEFAULTS["shard_drop_last"],
                 dct_scaling: Optional[bool] = None,
                 max_pixels: Optional[int] = None, max_file_bytes: Optional[int] = None,
                 max_consecutive_failures: int = DEFAULTS["max_consecutive_failures"],
                 max_device_bytes: Optional[int] = None,
                 max_decode_bytes: Optional[int] = None,
                 max_skipped_fraction: Optional[float] = None,
                 verify: bool = DEFAULTS["verify"],
                 gpu_cpu_share: Optional[float] = None, index: Union[int, bool, None] = None,
                 index_dir: Optional[StrPath] = None, shuffle_buffer: Optional[int] = None,
                 allow_stale_cache: bool = DEFAULTS["allow_stale_cache"],
                 ra_reps: int = DEFAULTS["ra_reps"],
                 weights: Optional[Sequence[float]] = None,
                 read_timeout: Optional[float] = None, pin_memory: bool = False,
                 mix: Any = None, cache: Optional[StrPath] = None,
                 cache_max_side: int = PACK_DEFAULTS["max_side"],
                 cache_dir: Optional[StrPath] = None,
                 cache_bytes: int = DEFAULTS["cache_bytes"],
                 remote_memory: int = DEFAULTS["remote_memory"],
                 stream_first_epoch: bool = DEFAULTS["stream_first_epoch"]) -> None:
        """Builds the loader: scans (or opens) the source and starts the threads, which
        begin preparing the first epoch at once.

        Args:
            root: an ImageFolder tree (``root/<class>/**/<image>``), a cache file or a
                folder of tar shards (``stoker.pack``); or a torchvision ``ImageFolder``
                object, whose ``.root`` is read and whose ``transform`` is the pipeline.
            batch_size: images per batch.
            pipeline: ``"train"`` (the default), ``"eval"``, or a list / ``Compose`` of
                transforms (``stoker.transforms`` or torchvision's).
            size: output side; default 224, or the transforms' size.
            threads: decoding threads (``DataLoader``'s ``num_workers``). ``None`` = the
                CPUs this process may use divided by ``LOCAL_WORLD_SIZE``; ``0`` = all of
                them.
            device: ``"cpu"`` or ``"cuda[:N]"`` (decoding on the GPU).
            seed, shuffle, drop_last: the order, as ``DataLoader``/``DistributedSampler``;
                ``shuffle=None`` shuffles for train only. ``seed=None`` draws the seed from
                torch's default generator (so ``torch.manual_seed`` decides it), rank 0's
                draw for every rank under an initialised ``torch.distributed``.
            rank, world_size: this process's shard; default ``torch.distributed``'s.
                Under ``WORLD_SIZE > 1`` without a process group, ``RuntimeError``.
            on_error: ``"raise"`` or ``"skip"`` a file that cannot be decoded.
            dtype, channels_last: the images' element type and memory format. ``dtype=None``
                (the default): float32, or uint8 when the transforms end in a uint8 tensor
                (``PILToTensor``/``ToImage`` without a float conversion, as torchvision).
            prefetch: batches prepared ahead (the loader has ``prefetch + 2`` slots).
            pin_memory: page-lock CPU batches for ``.cuda(non_blocking=True)``.
            ra_reps: repeated augmentation: the order of torchvision's ``RASampler``
                (``repetitions=ra_reps``; each sample that many times, its copies augmented
                apart); 0 = off.
            weights: weighted sampling with replacement, as ``WeightedRandomSampler(weights,
                len(weights))``: one weight per sample, in ``loader.samples`` order; each
                epoch draws its samples from (seed, epoch), torch's draws bit for bit, the
                ranks taking their slices of one global sequence.
            mix: ``MixUp``, ``CutMix`` or ``RandomChoice([MixUp, CutMix])`` (stoker's or
                torchvision v2's): each batch is mixed with itself rolled by one, and the
                labels become float ``[B, num_classes]`` soft labels.
            cache: a pre-decoded cache file for ``root`` (an image folder): used when it
                exists, else packed there first (``stoker.pack(root, cache,
                max_side=cache_max_side)``, with a progress bar on stderr; on the
                loader's GPU when ``device`` is one), then read.

        The other arguments (list files, limits on bad input, folder indexes, tar
        shuffling, caches, the GPU's CPU share, read timeouts) are described in
        docs/python.md, which also lists the exceptions.
        """
        self._require_backend()
        root, list_file, list_base, pipeline, imagefolder = self._resolve_source(
            root, list_file, list_base, pipeline)

        # (before a cache= pack: a process group missing under torchrun is an
        # error that must not wait for the whole folder to be packed)
        rank, world_size = _dist_defaults(rank, world_size)
        self._seed_drawn = seed is None
        if seed is None:
            seed = self._default_seed()
        cache_from = None
        if cache is not None:
            cache_from, root = root, _cache_for(root, list_file, cache, cache_max_side, threads,
                                                on_error, max_skipped_fraction,
                                                _device_index(device))
        try:
            opts, normalised = self._pipeline(pipeline, size)
        except ValueError as e:
            if imagefolder is None or pipeline is not imagefolder.transform:
                raise
            raise ValueError(f"root: the ImageFolder's transform: {e}") from None
        # what the ImageFolder's transform said, to notice it changed (in place too)
        self._folder_options = None
        if self._folder_dataset is not None and self._folder_transform is not None:
            try:
                self._folder_options = _T.pipeline_options(self._folder_transform)
            except (TypeError, ValueError):  # pipeline= was used instead
                pass
        dtype_name = self._output_dtype(dtype, opts.pop("dtype", None))
        if dtype_name == "uint8" and normalised and not isinstance(pipeline, str):
            raise ValueError("dtype uint8 gives raw 0..255 values: remove Normalize from the "
                             "transforms or choose a float dtype")
        threads = _threads(threads)
        # Python checks the types; the ranges are the C library's, checked by
        # the extension with messages that name the argument. An argument
        # left at None is left out: C's default applies.
        opts.update(
            batch_size=_int("batch_size", batch_size),
            threads=threads,
            device=_device_index(device),
            seed=_int("seed", seed),
            drop_last=bool(drop_last),
            rank=_int("rank", rank),
            world_size=_int("world_size", world_size),
            shard_drop_last=bool(shard_drop_last),
            on_error=on_error,
            dtype=dtype_name,
            layout="nhwc" if channels_last else "nchw",
            prefetch=_int("prefetch", prefetch),
            max_consecutive_failures=_int("max_consecutive_failures", max_consecutive_failures),
            ra_reps=_int("ra_reps", ra_reps),
            verify=bool(verify),
            remote_memory=_int("remote_memory", remote_memory),
            stream_first_epoch=bool(stream_first_epoch),
        )
        if shuffle is not None:  # None: C's default (shuffle for train, not for eval)
            opts["shuffle"] = 1 if shuffle else 0
        if dct_scaling is not None:
            opts["dct_scaling"] = 1 if dct_scaling else 0
        for name, value in (("max_pixels", max_pixels), ("max_device_bytes", max_device_bytes),
                            ("max_file_bytes", max_file_bytes),
                            ("max_decode_bytes", max_decode_bytes)):
            if value is not None:
                opts[name] = _int(name, value)
        # read_timeout: seconds a file read may take (a hung mount) before its
        # sample fails; gpu_cpu_share None: adaptive
        for name, value in (("max_skipped_fraction", max_skipped_fraction),
                            ("gpu_cpu_share", gpu_cpu_share), ("read_timeout", read_timeout)):
            if value is not None:
                opts[name] = _number(name, value)
        opts.update(self._source_options(index, index_dir, shuffle_buffer, allow_stale_cache))
        if cache_dir is not None:  # remote shards: local copies (docs/remote.md)
            opts["cache_dir"] = os.path.expanduser(os.fspath(cache_dir))
            opts["cache_bytes"] = _int("cache_bytes", cache_bytes)

        if mix is not None:
            opts.update(self._mix_options(mix, opts["pipeline"], list_file))
        weights_id = None
        if weights is not None:
            if shuffle is not None and not shuffle:
                raise ValueError("weights: weighted sampling draws at random; shuffle=False "
                                 "does not go with it")
            self._weights_tmp, opts["weights_file"], weights_id = _weights_file(weights)

        # kept for load_state_dict(), which reopens the C loader with a saved seed
        self._c_args = dict(opts, root=root, list_file=list_file, list_base=list_base)
        try:
            self._c = _stoker.Loader(**self._c_args)
        except ValueError as e:
            path = opts.get("weights_file")
            if path is None or path not in str(e):
                raise
            # the C library names the file, which is the loader's own copy of weights=
            raise ValueError(str(e).replace(f"{path} holds", "weights= has")
                             .replace(f"{path}: ", "")) from None
        if cache_from is not None:
            _check_cache_source(self._c, root, cache_from)
        note = self._c.note()
        if note:
            warnings.warn(note, stacklevel=2)
        counts = self._adopt_classes(list_file, imagefolder, root)
        self._init_state(opts, counts, dtype_name, shuffle, pin_memory)
        self._fingerprint["weights"] = weights_id

    def _resolve_source(self, root, list_file, list_base, pipeline):
        """(root, list_file, list_base, pipeline, imagefolder): paths expanded, and a
        torchvision ImageFolder or Subset turned into its root or a list file (with its
        transform as the pipeline)."""
        self._subset_tmp = None
        self._weights_tmp = None
        self._folder_dataset = None  # an ImageFolder given as root (or under a Subset)
        if root is not None and not isinstance(root, (str, bytes, os.PathLike)):
            ds = root
            while hasattr(ds, "dataset") and hasattr(ds, "indices"):
                ds = ds.dataset
            if hasattr(ds, "samples") and hasattr(ds, "transform"):
                self._folder_dataset = ds
                self._folder_transform = ds.transform
        if root is not None and not isinstance(root, (str, bytes, os.PathLike)) and \
                hasattr(root, "dataset") and hasattr(root, "indices"):
            # Subset(ImageFolder(...), idx), random_split(...)[k]: a list file of its
            # samples, with the ImageFolder's class names (kept until the loader goes)
            self._subset_tmp, list_file, pipeline = _subset_list(root, pipeline)
            root = None
        imagefolder = None
        if root is not None and not isinstance(root, (str, bytes, os.PathLike)) and \
                hasattr(root, "root") and hasattr(root, "samples"):
            imagefolder = root
            root, pipeline = _dataset_folder(root, pipeline)
        if pipeline is None:
            pipeline = "train"
        _stoker._source_check(root, list_file)  # the library's rule: exactly one of them
        if root is not None:
            # "~/data" as a shell (and torchvision's ImageFolder) reads it
            root = os.path.expanduser(os.fspath(root))
            # a folder, a cache file or tar shards: the library tells them apart;
            # s3:// and http(s):// roots are remote tar shards (docs/remote.md)
            if not _is_url(root) and not os.path.exists(root):
                raise FileNotFoundError(f"no such folder or file: {root!r}")
        else:
            # (not None: exactly one of root and list_file is given)
            list_file = os.path.expanduser(os.fspath(list_file))
            _check_list_file(list_file)
            if list_base is not None:
                list_base = os.path.expanduser(os.fspath(list_base))
        return root, list_file, list_base, pipeline, imagefolder

    def _adopt_classes(self, list_file, imagefolder, root):
        """The C loader's counts, with the class names a list file or an ImageFolder
        gives (the loader is closed, and ValueError raised, where they disagree)."""
        counts = self._c.counts()
        self._classes = self._c.classes()
        names = _list_classes(list_file) if list_file is not None else None
        if names is not None:
            # the list's own class names: classes and num_classes are those, not
            # max label + 1 (a subset's list need not hold every class)
            if counts["num_classes"] > len(names):
                self._c.close()
                raise ValueError(f"list_file {list_file!r}: labels up to "
                                 f"{counts['num_classes'] - 1} but {len(names)} '# class:' "
                                 "names")
            counts = dict(counts, num_classes=len(names))
            self._classes = names
        if imagefolder is not None and (list(imagefolder.classes) != self._classes
                                        or len(imagefolder.samples) != counts["num_samples"]):
            # a subclass with its own find_classes(), extensions or is_valid_file
            self._c.close()
            raise ValueError(
                f"root: this {type(imagefolder).__name__} has {len(imagefolder.classes)} "
                f"classes and {len(imagefolder.samples)} samples where ImageFolder's scan of "
                f"{root!r} finds {len(self._classes)} and {counts['num_samples']}: the loader "
                "reads the folder as ImageFolder does, pass a plain ImageFolder or its .root")
        return counts

    # ---- the array type of the batches ---------------------------------------
    # ImageLoader hands out torch tensors. stoker.jax subclasses it with host
    # numpy arrays instead, so that it runs where torch is not installed:
    # these methods are the only places that need torch.

    def _require_backend(self) -> None:
        """Raises, naming what to install, when the batches' array library is absent."""
        _torch()

    def _default_seed(self) -> int:
        """seed=None: drawn from torch's default generator (see _draw_seed)."""
        return _draw_seed(_torch())

    def _copy_labels(self, labels: Any) -> Any:
        """The labels as a tensor of their own: they are small, and a copy does
        not hold the batch slot, so keeping only the labels of each batch (a
        list of targets for a confusion matrix) costs nothing, as with
        DataLoader. (A device batch's copy is queued on the consumer's stream,
        before the slot can go back: see Loader.next in _stoker.c.)"""
        return labels.clone()

    def _init_state(self, opts, counts, dtype_name, shuffle, pin_memory):
        """What the Python side keeps of an open loader: its shape, its fingerprint
        (state_dict), the epoch bookkeeping and the pinned-batch guard."""
        self._dtype_name = dtype_name
        self.batch_size = opts["batch_size"]
        self.pipeline = opts["pipeline"]
        self.size = opts["size"]
        self.num_slots = counts["num_slots"]
        self._fingerprint = {
            "num_samples": counts["num_samples"],
            "num_classes": counts["num_classes"],
            "batch_size": opts["batch_size"],
            "seed": opts["seed"],
            "shuffle": bool(shuffle) if shuffle is not None else opts["pipeline"] == "train",
            "drop_last": opts["drop_last"],
            "shard_drop_last": opts["shard_drop_last"],
            "rank": opts["rank"],
            "world_size": opts["world_size"],
            "ra_reps": opts["ra_reps"],
        }
        self._epoch = 0        # epoch of the next pass
        # the epoch of a pass that yielded batches and did not finish: the
        # next pass moves on from it unless set_epoch() or load_state_dict()
        # says otherwise (a new iter() never replays batches unasked)
        self._partial: Optional[int] = None
        self._resume: Optional[Tuple[int, int]] = None  # (epoch, batch) set by load_state_dict
        self._pass: Optional["weakref.ReferenceType[_Pass]"] = None  # the live _Pass, if any
        self._device = opts["device"]
        self._init_arrays(pin_memory)

    def _init_arrays(self, pin_memory: bool) -> None:
        """The DLPack consumer of the batches (torch's) and the pinned-memory state."""
        torch = _torch()
        self._from_dlpack = torch.utils.dlpack.from_dlpack
        # pin_memory: CPU batch slots page-locked through the CUDA runtime,
        # each once, the first time it is handed out, so that
        # .cuda(non_blocking=True) is a true asynchronous copy
        if not isinstance(pin_memory, bool):
            raise TypeError(f"pin_memory must be a bool, got {pin_memory!r}")
        self._pin = pin_memory and self._device < 0 and torch.cuda.is_available()
        self._pinned: Dict[int, int] = {}
        # Pinned batches the user has freed whose copies may still be queued:
        # (event, storage), oldest first. Holding the storage keeps the slot
        # from going back to the workers until the event has completed.
        self._held: "collections.deque[Tuple[Any, Any]]" = collections.deque()

    @staticmethod
    def _mix_options(mix, pipeline, list_file):
        """C options of MixUp/CutMix (the mix_ fields): the library mixes each batch
        and hands out its soft labels, drawn from (seed, epoch, batch index) so that
        resuming repeats them; torchvision v2's semantics (roll(1) pairing, one
        lambda per batch, CutMix's lambda adjusted to the box) or timm's Mixup
        (flip(0) pairing, prob, switch_prob, label smoothing)."""
        m = _T.mix_options(mix)
        if pipeline != "train":
            raise ValueError("mix: MixUp and CutMix belong to the train pipeline")
        nc = m["num_classes"]
        if nc is None and list_file is not None:
            # a list's "# class:" names count the classes, also those no line uses
            names = _list_classes(list_file)
            nc = len(names) if names is not None else None
        out = {"mix_mixup_alpha": m["mixup_alpha"], "mix_cutmix_alpha": m["cutmix_alpha"],
               "mix_classes": int(nc) if nc is not None else 0}  # 0: the source's classes
        if m.get("timm", False):
            out.update(mix_mode="timm", mix_prob=m["prob"], mix_switch_prob=m["switch_prob"],
                       mix_correct_lam=bool(m["correct_lam"]),
                       mix_label_smoothing=m["label_smoothing"])
        return out

    @staticmethod
    def _source_options(index, index_dir, shuffle_buffer, allow_stale_cache):
        """C options of the sources (folder index, tar shuffle buffer, stale caches)."""
        out = {"allow_stale_cache": bool(allow_stale_cache)}
        if index is not None:  # None = the C default: auto
            if isinstance(index, bool):
                index = int(index)
            out["index"] = _int("index", index)
        if index_dir is not None:
            out["index_dir"] = os.fspath(index_dir)
        if shuffle_buffer is not None:
            out["shuffle_buffer"] = _int("shuffle_buffer", shuffle_buffer)
        return out

    @staticmethod
    def _pipeline(pipeline, size):
        """C options of the pipeline, and whether it normalises."""
        if isinstance(pipeline, str):
            if pipeline not in OPTIONS["pipeline"]["choices"]:
                names = ", ".join(repr(c) for c in OPTIONS["pipeline"]["choices"])
                raise ValueError(f"pipeline must be {names} or a list of transforms, "
                                 f"got {pipeline!r}")
            s = DEFAULTS["size"] if size is None else _int("size", size)
            return {"pipeline": pipeline, "size": s}, True  # ImageNet mean/std (C defaults)
        opts = _T.pipeline_options(pipeline)
        if size is not None and _int("size", size) != opts["size"]:
            raise ValueError(f"size={size} contradicts the transforms' size {opts['size']}")
        normalised = "mean" in opts
        if not normalised:
            # No Normalize: ToTensor's [0, 1] values.
            opts["mean"], opts["std"] = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
        return opts, normalised

    @staticmethod
    def _output_dtype(dtype, from_transforms):
        """The images' element type: dtype= when given, else the one the
        transforms end in (uint8 after PILToTensor or ToImage with no float
        conversion), else float32. A dtype= that contradicts the transforms'
        uint8 (or float16/bfloat16) is an error, never a silent float."""
        if dtype is None:
            return from_transforms or "float32"
        name = _dtype_name(dtype)
        if from_transforms is not None and name != from_transforms:
            if from_transforms == "uint8":
                raise ValueError(
                    f"dtype={dtype!r} but the transforms end in a uint8 tensor (PILToTensor, "
                    "ToImage or ToDtype(torch.uint8) with no float conversion after it), which "
                    "torchvision yields as 0..255 integers: add ConvertImageDtype(torch.float) "
                    "(v2: ToDtype(torch.float32, scale=True)) to the transforms for floats in "
                    "[0, 1], or leave dtype= out for uint8")
            raise ValueError(f"dtype={dtype!r} but the transforms convert to {from_transforms}: "
                             "give the element type once")
        return name

    def _stream(self):
        """The consumer's CUDA stream: batches are ordered before it on the device."""
        if self._device < 0:
            return 0
        return _torch().cuda.current_stream(self._device).cuda_stream

    # ---- information ----------------------------------------------------------

    def __len__(self) -> int:
        """Batches per epoch for this rank (when no file is skipped)."""
        return len(self._c)

    @property
    def source_kind(self) -> str:
        """What the loader reads: "folder", "list", "cache" or "tar"."""
        return self._c.source_kind()

    @property
    def note(self) -> str:
        """The warning about the source made at construction ("" if none)."""
        return self._c.note()

    @property
    def classes(self) -> List[str]:
        return list(self._classes)

    @property
    def class_to_idx(self) -> Dict[str, int]:
        return {c: i for i, c in enumerate(self._classes)}

    @property
    def samples(self) -> List[Tuple[str, int]]:
        """[(path, label)] in index order, as ImageFolder.samples."""
        return self._c.samples()

    @property
    def dataset(self) -> "_Dataset":
        """What DataLoader's ``loader.dataset`` gives code that reads it:
        ``len()`` (images in the whole dataset), ``classes``, ``class_to_idx``,
        ``samples``, ``targets``, ``root``."""
        return _Dataset(self)

    @property
    def sampler(self) -> "_Sampler":
        """What a DistributedSampler gives code that reads ``loader.sampler``:
        ``len()`` (this rank's samples per epoch, as DistributedSampler's
        ``len()``), ``set_epoch(e)`` (the loader's), ``epoch``, ``seed``,
        ``shuffle``, ``rank``, ``num_replicas``."""
        return _Sampler(self)

    @property
    def seed(self) -> int:
        """The seed of the order and augmentations: seed= or the one drawn from torch."""
        return self._fingerprint["seed"]

    @property
    def num_samples(self) -> int:
        """Images in the whole dataset."""
        return self._fingerprint["num_samples"]

    @property
    def epoch(self) -> int:
        """The epoch the next pass runs."""
        if self._resume is not None:
            return self._resume[0]
        return self._next_epoch() if self._live_pass() is None else self._epoch

    @property
    def closed(self) -> bool:
        return self._c.closed

    def stats(self) -> Dict[str, Any]:
        """Counters and timings; per-stage seconds are summed over threads."""
        d = self._c.stats()
        d["skipped_files"] = self._c.skipped()
        return d

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self)} batches of {self.batch_size}"
        kind = "" if self.closed else f"{self.source_kind}, "
        return (f"ImageLoader({kind}{self.pipeline}, size={self.size}, {self.num_samples} "
                f"images, {len(self._classes)} classes, {state})")

    # ---- iteration ----------------------------------------------------------

    def _live_pass(self):
        p = self._pass() if self._pass is not None else None
        return p if p is not None and not p._done else None

    def _next_epoch(self) -> int:
        """The epoch a new pass starts, no pass being live."""
        return self._epoch + 1 if self._partial == self._epoch else self._epoch

    def _check_folder_transform(self) -> None:
        """An ImageFolder given as root: its transform is read once, when the
        loader is built. One changed since then (another object, or the same
        Compose changed in place) would be ignored: refused instead."""
        ds = self._folder_dataset
        if ds is None:
            return
        tf, was = getattr(ds, "transform", None), self._folder_transform
        changed = tf is not was
        if not changed and tf is not None and self._folder_options is not None:
            try:
                changed = _T.pipeline_options(tf) != self._folder_options
            except (TypeError, ValueError):
                changed = True
        if changed:
            raise RuntimeError(
                f"the {type(ds).__name__}'s transform changed after the loader was built "
                "(now " + (f"{type(tf).__name__}" if tf is not None else "None") + "): the "
                "loader reads its transforms once, at construction, in C; build another "
                "ImageLoader for the new transform (one for training and one for evaluation, "
                "say), or set the transform back")

    def _start(self, with_info: bool) -> "_Pass":
        if self._c.closed:
            raise ValueError("the loader is closed")
        self._check_folder_transform()
        if self._resume is not None:
            epoch, batch = self._resume
            self._resume = None
        else:
            self._epoch = self._next_epoch()
            epoch, batch = self._epoch, 0
        if epoch != 0:
            self._leave_stream()
        self._partial = None
        self._c.seek(epoch, batch)  # a no-op when already there (keeps the prefetch)
        p = _Pass(self, epoch, batch, with_info)
        self._pass = weakref.ref(p)
        return p

    def __iter__(self) -> Iterator[Tuple["torch.Tensor", "torch.Tensor"]]:
        """One pass over the epoch: yields (images, labels)."""
        return self._start(False)

    def iter_batches(self) -> Iterator[Batch]:
        """Like iter(loader), but yields Batch(images, labels, epoch, batch_index, indices)."""
        return self._start(True)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch of the next pass (its shuffle and augmentation). After
        load_state_dict(), the epoch it resumes keeps its position (the usual
        ``for epoch in range(start, n): loader.set_epoch(epoch)`` loop resumes
        mid-epoch); another epoch drops it."""
        epoch = _int("epoch", epoch, 0)
        if self._resume is not None and self._resume[0] == epoch:
            return  # the C loader is already positioned there
        self._epoch = epoch
        self._partial = None  # asked for: this epoch, even if a pass of it was cut short
        self._resume = None
        if self._live_pass() is None and not self._c.closed:
            if epoch != 0:
                self._leave_stream()
            self._c.set_epoch(epoch)  # start preparing it now

    def state_dict(self) -> Dict[str, Any]:
        """Where the next batch comes from: resume with load_state_dict()."""
        p = self._live_pass()
        if p is not None:
            epoch, batch = p._epoch, p._next
        elif self._resume is not None:
            epoch, batch = self._resume
        else:
            epoch, batch = self._next_epoch(), 0
        return {"epoch": epoch, "batch": batch, "fingerprint": dict(self._fingerprint)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Makes the next pass resume exactly where state_dict() was taken."""
        try:
            epoch, batch, fp = int(state["epoch"]), int(state["batch"]), state["fingerprint"]
        except (KeyError, TypeError, ValueError):
            raise ValueError("not a stoker.ImageLoader state_dict") from None
        if isinstance(fp, Mapping) and "ra_reps" not in fp:
            fp = {**fp, "ra_reps": DEFAULTS["ra_reps"]}  # saved before ra_reps existed: off
        if isinstance(fp, Mapping) and "weights" not in fp:
            fp = {**fp, "weights": None}  # saved before weights existed: none
        diff = [f"{k}: saved {fp.get(k)!r}, now {v!r}" for k, v in self._fingerprint.items()
                if fp.get(k) != v]
        if self._seed_drawn and len(diff) == 1 and diff[0].startswith("seed:") and \
                not self._c.closed and isinstance(fp.get("seed"), int):
            # The seed was drawn from torch (seed=None), not asked for: the
            # saved run's seed wins, so the resume repeats its order and
            # augmentations whatever torch's generator holds now.
            self._reseed(int(fp["seed"]))
            diff = []
        if diff:
            raise ValueError("the state_dict was saved by a loader with other options or data: "
                             + "; ".join(diff))
        if epoch < 0 or batch < 0:
            raise ValueError("epoch and batch must be >= 0")
        self._epoch = epoch
        self._resume = (epoch, batch)
        self._partial = None
        self._pass = None  # an older iterator must not continue
        if not self._c.closed:
            if epoch != 0:
                self._leave_stream()
            self._c.seek(epoch, batch)

    def _leave_stream(self) -> None:
        """After the first epoch of foreign remote shards (streamed, with
        positions for samples: docs/remote.md), reopens the C loader on the
        shards' index, which that epoch wrote to the index folder: the later
        epochs are exact, with their own len(). Shards the index folder still
        lacks (another node's ranks read them) are scanned by this open."""
        if self._c.closed or not self._c.stats().get("remote_streaming"):
            return
        self._pass = None
        self._unpin()
        self._c.close()
        self._c_args["stream_first_epoch"] = False
        self._c = _stoker.Loader(**self._c_args)

    def _reseed(self, seed: int) -> None:
        """Reopens the C loader with another seed (it takes its seed only at
        construction). The old one ends when its last batch is freed, as
        after close(); the reopened source is scanned again (from its
        index, for a folder)."""
        seed = _int("seed", seed)
        self._pass = None
        self._unpin()
        self._c.close()
        self._c_args["seed"] = seed
        self._c = _stoker.Loader(**self._c_args)
        self._fingerprint["seed"] = seed
        self._seed_drawn = False

    # ---- lifetime -------------------------------------------------------------

    def close(self) -> None:
        """Stops the loader. Batches still alive stay valid; the threads end
        when the last of them is freed (at once when there is none)."""
        self._pass = None
        self._unpin()
        self._c.close()

    def _pin_slot(self, images: "torch.Tensor") -> None:
        ptr = images.data_ptr()
        if ptr in self._pinned:
            return
        # the slot holds batch_size images, also when this batch is shorter
        n = images.element_size() * images.numel() // max(1, images.shape[0]) * self.batch_size
        rt = _torch().cuda.cudart()
        if int(rt.cudaHostRegister(ptr, n, 0)) == 0:
            self._pinned[ptr] = n
        else:
            self._pin = False  # the driver refused: plain memory, as without pin_memory
            warnings.warn("pin_memory: the CUDA runtime could not page-lock the batch memory; "
                          "batches stay in pageable memory")

    # Pinned batches and asynchronous copies. A slot registered with
    # cudaHostRegister is not torch's own pinned memory, so torch does not
    # keep it alive while x.cuda(non_blocking=True) is queued: freeing x
    # right after (as `x = x.cuda(non_blocking=True)` does) would hand the
    # slot back to the workers, which could rewrite it before the copy has
    # run. Instead, when the images tensor is freed, an event is recorded on
    # torch's current stream (the one the copy was queued on) and the slot's
    # storage is held here until that event has completed.

    def _guard_pinned(self, images: "torch.Tensor") -> None:
        """Defers the release of a pinned batch's slot past the copies queued
        before its images tensor is freed."""
        storage = (images.untyped_storage() if hasattr(images, "untyped_storage")
                   else images.storage())
        f = weakref.finalize(images, _hold_until_done, self._held, storage, self._new_event)
        f.atexit = False  # at exit, nothing is refilled: no event to record

    @staticmethod
    def _new_event() -> Any:
        """A CUDA event recorded now on torch's current stream."""
        ev = _torch().cuda.Event()
        ev.record()
        return ev

    def _drain_held(self, keep: int) -> None:
        """Lets go of the held slots whose events have completed, then waits
        for the oldest until at most `keep` are held. Only the head is looked
        at: a finalizer may append meanwhile (popleft and append are atomic)."""
        held = self._held
        while held and held[0][0].query():
            held.popleft()
        while len(held) > keep:
            held[0][0].synchronize()
            held.popleft()

    def _next_batch(self) -> Any:
        """The C loader's next batch, first giving back the held pinned slots
        that are done. When every slot is held and some of them only by
        pending copies, waits for those copies and asks again."""
        if self._held:
            # keep at most `prefetch` slots waiting on copies, so that the
            # workers always have slots to prepare batches in
            self._drain_held(max(1, self.num_slots - 2))
        try:
            return self._c.next(self._stream())
        except RuntimeError as e:
            if not self._held or "every batch slot" not in str(e):
                raise
        self._drain_held(0)
        return self._c.next(self._stream())

    def _unpin(self) -> None:
        # the copies still queued from the held slots must finish before the
        # memory is unregistered
        self._drain_held(0)
        if self._pinned:
            rt = _torch().cuda.cudart()
            for ptr in self._pinned:
                rt.cudaHostUnregister(ptr)
            self._pinned.clear()

    def __enter__(self) -> "Self":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_pinned", None):
            self._unpin()  # before the library frees the slots
        c = getattr(self, "_c", None)
        if c is not None:
            c.close()


class _Dataset:
    """loader.dataset: ImageFolder's attributes, read from the loader."""

    def __init__(self, loader: "ImageLoader") -> None:
        self._loader = loader
        self.root = loader._c_args.get("root") or loader._c_args.get("list_file")

    def __len__(self) -> int:
        return self._loader.num_samples

    @property
    def classes(self) -> List[str]:
        return self._loader.classes

    @property
    def class_to_idx(self) -> Dict[str, int]:
        return self._loader.class_to_idx

    @property
    def samples(self) -> List[Tuple[str, int]]:
        return self._loader.samples

    @property
    def targets(self) -> List[int]:
        return [label for _, label in self._loader.samples]

    def __getitem__(self, i: int) -> Any:
        raise TypeError("stoker's dataset is read by the loader's C threads: it has no "
                        "__getitem__ (iterate the loader; loader.samples[i] is the i-th file)")

    def __repr__(self) -> str:
        return f"stoker dataset of {len(self)} images in {len(self.classes)} classes ({self.root})"


class _Sampler:
    """loader.sampler: DistributedSampler's attributes, read from the loader."""

    def __init__(self, loader: "ImageLoader") -> None:
        self._loader = loader
        fp = loader._fingerprint
        self.rank, self.num_replicas = fp["rank"], fp["world_size"]
        self.shuffle, self.seed = fp["shuffle"], fp["seed"]

    def __len__(self) -> int:
        counts = self._loader._c.counts()
        return int(counts["shard_size"])

    @property
    def epoch(self) -> int:
        return self._loader.epoch

    def set_epoch(self, epoch: int) -> None:
        self._loader.set_epoch(epoch)

    def __iter__(self) -> Any:
        raise TypeError("stoker's order is drawn in C: iterate the loader (iter_batches() "
                        "yields each batch's dataset indices)")


def _hold_until_done(held, storage, new_event):
    """weakref.finalize callback of a pinned images tensor: any thread, when
    the tensor is freed. Keeps its storage (so its slot) in `held` with an
    event recorded on torch's current stream; _drain_held drops it once the
    event has completed."""
    try:
        ev = new_event()
    except Exception:  # CUDA unusable (interpreter shutdown): nothing can be queued
        return
    held.append((ev, storage))


# help() and inspect.signature() show __init__'s arguments, not __new__'s (*args, **kwargs)
ImageLoader.__signature__ = inspect.signature(ImageLoader.__init__).replace(  # type: ignore
    parameters=list(inspect.signature(ImageLoader.__init__).parameters.values())[1:],
    return_annotation=inspect.Signature.empty)


class _Pass:
    """Iterator over one pass of an ImageLoader."""

    __slots__ = ("_loader", "_epoch", "_next", "_info", "_done", "__weakref__")

    def __init__(self, loader, epoch, batch, with_info):
        self._loader = loader
        self._epoch = epoch
        self._next = batch  # index of the next batch this pass yields
        self._info = with_info
        self._done = False

    def __iter__(self) -> "_Pass":
        return self

    def __next__(self) -> Any:  # (images, labels), or a Batch from iter_batches()
        if self._done:
            raise StopIteration
        ld = self._loader
        cur = ld._pass() if ld._pass is not None else None
        if cur is not self:
            self._done = True
            raise RuntimeError("this iterator was superseded: a newer pass, load_state_dict() "
                               "or close() took over the loader")
        try:
            r = ld._next_batch()
        except _stoker.DecodeError as e:
            if getattr(e, "code", None) == _stoker.ETOOMANY:
                self._done = True  # the library ended the epoch; a new pass repeats it
            raise
        if r is None:
            self._done = True
            if ld._partial == self._epoch:
                ld._partial = None
            if ld._epoch == self._epoch:  # unless set_epoch() chose the next one meanwhile
                ld._epoch = self._epoch + 1  # a completed pass moves to the next epoch
            raise StopIteration
        cap_images, cap_labels, epoch, batch_index, indices = r
        images = ld._from_dlpack(cap_images)
        # the labels are copied out: only the images hold the batch slot
        labels = ld._copy_labels(ld._from_dlpack(cap_labels))
        del cap_labels
        if ld._pin:
            ld._pin_slot(images)
            ld._guard_pinned(images)
        self._next = batch_index + 1
        ld._partial = self._epoch
        if self._info:
            return Batch(images, labels, epoch, batch_index, indices)
        return images, labels

    def __len__(self) -> int:
        return max(0, len(self._loader) - self._next) if not self._done else 0
