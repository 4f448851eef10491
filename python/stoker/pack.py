"""stoker.pack: an image folder (or list file) into a pre-decoded cache or tar shards."""
import os
import sys
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Union

from . import _stoker
from ._common import (PACK_DEFAULTS, PACK_OPTIONS, StrPath, _check_list_file, _default_threads,
                      _device_index, _int, _number)

__all__ = ["pack", "PackResult"]


class PackResult(NamedTuple):
    """What ``stoker.pack()`` wrote: fields by name (``r.packed``), by key
    (``r["packed"]``, as a dict) or by position."""

    packed: int                       # samples written
    failed: int                       # files left out
    bytes: int                        # bytes written
    shards: int                       # tar: shard files written (0 for a cache)
    left_out: List[Tuple[str, str]]   # (path, reason) of each file left out
    device_packed: int = 0            # device=: samples the GPU decoded (the rest: the CPU)
    device_stopped: bool = False      # device=: the CPU packed faster and took over

    def __getitem__(self, key: Any) -> Any:  # a field name, an index or a slice
        if isinstance(key, str):
            if key not in self._fields:
                raise KeyError(key)
            return getattr(self, key)
        return tuple.__getitem__(self, key)

    def keys(self) -> Tuple[str, ...]:
        return self._fields


def _bar(done: int, total: int) -> None:
    """The default progress display: one line on stderr, redrawn."""
    width = 30
    fill = min(width, width * done // total) if total > 0 else 0
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} files ")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _format_rule(format: str, given: Dict[str, Any]) -> None:
    """The keywords of one format only (the pack table's "only" column) given
    with the other format: a ValueError that says why, as `stoker pack` refuses
    them. An unknown format is left to the library's own message."""
    if format not in PACK_OPTIONS["format"]["choices"]:
        return
    off = [kw for kw, v in given.items()
           if PACK_OPTIONS[kw]["only"] not in (None, format) and v != PACK_DEFAULTS[kw]]
    if not off:
        return
    other = PACK_OPTIONS[off[0]]["only"]
    off = [kw for kw in off if PACK_OPTIONS[kw]["only"] == other]
    why = ("tar shards keep each file's bytes as they are: nothing is decoded" if other == "cache"
           else "a cache is one file, and decodes every image anyway")
    names = ", ".join(off[:-1]) + " and " + off[-1] if len(off) > 1 else off[0]
    verb = "apply" if len(off) > 1 else "applies"
    raise ValueError(f"{names} {verb} to format={other!r} only ({why})")


# The defaults are the C library's pack table's (PACK_DEFAULTS); None defaults
# leave the option to C. test_defaults_single_source.py holds each against C's.
def pack(source: Optional[StrPath], output: StrPath, *, format: str = PACK_DEFAULTS["format"],
         encoding: str = PACK_DEFAULTS["encoding"], max_side: int = PACK_DEFAULTS["max_side"],
         quality: int = PACK_DEFAULTS["quality"],
         shard_bytes: int = PACK_DEFAULTS["shard_bytes"], threads: Optional[int] = None,
         list_file: Optional[StrPath] = None, list_base: Optional[StrPath] = None,
         max_pixels: Optional[int] = None, max_file_bytes: Optional[int] = None,
         check: bool = PACK_DEFAULTS["check"], read_timeout: Optional[float] = None,
         device: Any = None, plain_chroma: bool = PACK_DEFAULTS["plain_chroma"],
         progress: Union[bool, Callable[[int, int], object], None] = False,
         max_decode_bytes: Optional[int] = None) -> PackResult:
    """Packs the images of ``source`` into ``output``; returns a PackResult.

    ``source`` is an ImageFolder tree (or None with ``list_file``, a file of
    ``path label`` lines). ``format="cache"`` writes one pre-decoded cache
    file ``output``: ``encoding="raw"`` RGB8 pixels or ``"jpeg"`` re-encoded
    at ``quality``, images whose longer side exceeds ``max_side`` shrunk to
    it (0 = keep the size). ``format="tar"`` writes WebDataset tar shards of
    about ``shard_bytes`` each into the folder ``output``. Either can then be
    given to ``ImageLoader`` as ``root``.

    Files that cannot be read or decoded are left out and listed in
    ``left_out``; the pack fails (``DecodeError``, ``ValueError``, ...) only
    when nothing is left or the output cannot be written. The output is
    written under a temporary name and renamed at the end.

    ``check=True`` (tar) decodes every image in full and leaves out those that
    fail; without it tar shards read only each file's header. ``read_timeout``
    (seconds, default 300, 0 = none) bounds each file read and a FIFO list.
    ``max_decode_bytes`` (default 384 MiB, the loader's) is the memory the
    pack's decodes take together, shared by its threads; a larger decode
    waits for the others and runs alone.

    ``device`` (a cache only): ``None`` or ``"cpu"`` packs on the CPU;
    ``"cuda[:N]"``, an index or a ``torch.device`` decodes the JPEGs with
    nvJPEG (the GPU's hardware JPEG engines where it has them) and resizes
    them on that GPU, with the CPU pack's resize arithmetic, before they are
    written (up to 8 threads drive it). ``max_side`` must then be 1..8192.
    The file is the same format; its pixels are nvJPEG's decode, which
    differs slightly from the CPU's (docs/storage.md says how much).
    ``plain_chroma=True`` uses the engines' plain chroma upsampling instead
    of libjpeg-turbo's interpolated one: up to 2.3x faster, but 0.1-1.8% of
    the values then differ from the CPU pack's by more than 1 level (up to
    40, at colour edges); without it none does.
    ``device_packed`` in the result counts the samples the GPU decoded; the
    others (PNG, CMYK, RGB-coded or truncated JPEGs) are decoded on the CPU
    as without a device.

    ``threads=None`` uses the CPUs this process may run on. ``progress``:
    False, True (a bar on stderr) or a callable ``f(done, total)``.

    Ctrl-C (or any exception a signal handler or ``progress`` raises) stops
    the pack between files, within 16 files; the exception is raised and
    nothing is left under ``output``'s name, nor the temporary file. (Python
    runs signal handlers on the main thread only: a pack on another thread
    runs to its end.)
    """
    dev = -1 if device is None else _device_index(device)
    _format_rule(format, dict(encoding=encoding, max_side=max_side, quality=quality,
                              shard_bytes=shard_bytes, check=bool(check), device=dev,
                              plain_chroma=bool(plain_chroma)))
    _stoker._source_check(source, list_file)  # the library's rule: exactly one of them
    if source is not None:
        source = os.fspath(source)
        if not os.path.isdir(source):
            raise FileNotFoundError(f"no such folder: {source!r}")
    else:
        # (not None: exactly one of source and list_file is given)
        list_file = os.fspath(list_file)  # type: ignore[arg-type]
        _check_list_file(list_file)
    if progress is True:
        progress = _bar
    elif progress is False or progress is None:
        progress = None
    elif not callable(progress):
        raise TypeError(f"progress must be a bool or a callable(done, total), got {progress!r}")
    # Python checks the types; the ranges and the rules between options
    # (plain_chroma needs a device, a device pack's max_side) are the C
    # library's, whose messages name the argument.
    kw = dict(format=format, encoding=encoding, max_side=_int("max_side", max_side),
              quality=_int("quality", quality), shard_bytes=_int("shard_bytes", shard_bytes),
              threads=_default_threads() if threads is None else _int("threads", threads),
              list_file=list_file, list_base=None if list_base is None else os.fspath(list_base),
              check=bool(check), device=dev, plain_chroma=bool(plain_chroma), progress=progress)
    if max_pixels is not None:
        kw["max_pixels"] = _int("max_pixels", max_pixels)
    if max_file_bytes is not None:
        kw["max_file_bytes"] = _int("max_file_bytes", max_file_bytes)
    if read_timeout is not None:
        kw["read_timeout"] = _number("read_timeout", read_timeout)
    if max_decode_bytes is not None:
        kw["max_decode_bytes"] = _int("max_decode_bytes", max_decode_bytes)
    r = _stoker.pack(source, os.fspath(output), **kw)
    return PackResult(r["packed"], r["failed"], r["bytes"], r["shards"], r["left_out"],
                      r["device_packed"], r["device_stopped"])
