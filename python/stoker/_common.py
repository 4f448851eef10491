"""What loader.py and pack.py share, so that neither imports the other's
internals: the path type, the C library's options tables and the argument
helpers both use.

The C library owns every default and range (src/core/options.h): the
tables below are read from it at import, the Python signatures take their
defaults from them, and a value out of range is refused by the extension
with the library's message, which names the argument. Python checks only
what C cannot see: the Python types (an int, not a bool or a float), and the
spellings that are Python's own (``device="cuda:1"``, ``dtype=torch.half``).
python/tests/test_defaults_single_source.py compares every Python default with C's.
"""
import numbers
import os
from typing import Any, Dict, Union

# (from the module itself: without a built extension the error is "No module
# named 'stoker._stoker'", not a circular-import message about the package)
from ._stoker import GPU_MAX_SIDE as _GPU_MAX_SIDE
from ._stoker import options as _options
from ._stoker import pack_options as _pack_options

# A file system path, as os.fspath() takes it.
StrPath = Union[str, "os.PathLike[str]"]

# The loader's options table: name -> {type, default, min, max, choices, cli,
# keyword, doc}. Public as stoker.OPTIONS.
OPTIONS: Dict[str, Dict[str, Any]] = {d["name"]: d for d in _options()}
# The pack options table, by pack()'s keyword ("source" is the row root), with
# "only": the format a row applies to ("cache", "tar") or None.
PACK_OPTIONS: Dict[str, Dict[str, Any]] = {d["keyword"]: d for d in _pack_options()}
# The defaults alone, for the signatures: DEFAULTS["batch_size"] is 256 as C says.
DEFAULTS: Dict[str, Any] = {name: row["default"] for name, row in OPTIONS.items()}
PACK_DEFAULTS: Dict[str, Any] = {kw: row["default"] for kw, row in PACK_OPTIONS.items()}
# The longest side a GPU decodes into: the bound of size and of a device pack's max_side.
GPU_MAX_SIDE: int = _GPU_MAX_SIDE


def choices_text(name: str, table: Dict[str, Dict[str, Any]] = OPTIONS) -> str:
    """An enum option's names as a message lists them: "a, b or c"."""
    names = list(table[name]["choices"])
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def _torch():
    try:
        import torch  # deferred: `import stoker` works without torch
    except ImportError as e:
        # ModuleNotFoundError stays one (torch absent); a broken install stays an ImportError
        cls = ModuleNotFoundError if isinstance(e, ModuleNotFoundError) else ImportError
        raise cls("stoker.ImageLoader needs PyTorch (1.13 or later), which cannot be imported "
                  f"here ({e}): install it, e.g. `pip install torch` (stoker.pack(), "
                  "stoker.check_file() and, for JAX, stoker.jax.JaxLoader work without it)",
                  name="torch") from e
    return torch


def _int(name, v, lo=None):
    """An integer argument: a Python int (numpy's too), not a bool or a float.
    Its range is the C library's, checked by the extension; `lo` is for the
    values that have no row in the options tables (an epoch)."""
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    v = int(v)
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    return v


def _number(name, v):
    """A number argument (int or float, not a bool) as a float; its range is C's."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ValueError(f"{name} must be a number, got {v!r}")
    return float(v)


def _device_index(device):
    """-1 for the CPU, else the CUDA device index (the C library decides)."""
    if isinstance(device, numbers.Integral) and not isinstance(device, bool):
        return int(device)
    dev_type, index = None, None
    if isinstance(device, str):
        dev_type, colon, idx = device.partition(":")
        # "cuda:-1" used to mean the CPU (-1 is its number in the C library)
        if colon and not (idx.isdigit() and idx.isascii()):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N' with N >= 0, "
                             f"got {device!r}")
        index = int(idx) if idx else None
    elif hasattr(device, "type"):  # torch.device
        dev_type, index = device.type, device.index
    if dev_type == "cpu":
        return -1
    if dev_type == "cuda":
        if index is None:
            torch = _torch()
            index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        return index
    raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}")


def _check_list_file(path: str) -> None:
    """A list file may be a regular file, a FIFO or a pipe (``/dev/fd/N``, as
    ``<(command)`` gives): the library reads FIFOs and pipes within
    ``read_timeout``. Anything else is refused here with what it is."""
    import stat as _stat
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"no such list file: {path!r}") from None
    if _stat.S_ISDIR(mode):
        raise IsADirectoryError(f"list file {path!r} is a folder (give a folder as root)")
    if not (_stat.S_ISREG(mode) or _stat.S_ISFIFO(mode)):
        raise ValueError(f"list file {path!r} is not a regular file, a FIFO or a pipe")


def _cpu_count():
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may use
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _default_threads():
    """The CPUs this process may use, shared among the processes that
    torchrun started on this machine (LOCAL_WORLD_SIZE): eight ranks of a
    128-core machine get 16 threads each, not 128 each."""
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        local = 1
    return max(1, _cpu_count() // max(1, local))
