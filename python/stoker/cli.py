"""The ``stoker`` command of a pip install: runs the command-line tool that
ships inside the package (``stoker/bin/stoker``, built with the extension).

``stoker ARGS`` and ``python -m stoker ARGS`` both end up here.
"""
import os
import subprocess
import sys
from typing import List, NoReturn, Optional, Sequence

__all__ = ["binary", "main", "run"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def binary() -> Optional[str]:
    """The path of the stoker executable, or None when there is none.

    An installed package carries it in ``bin/``; a source checkout used with
    ``PYTHONPATH=python`` has the one ``make`` built (``build/stoker``).
    """
    for path in (os.path.join(_HERE, "bin", "stoker"),
                 os.path.join(os.path.dirname(os.path.dirname(_HERE)), "build", "stoker")):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _missing() -> str:
    return ("stoker: the command-line tool is not part of this installation (no "
            f"{os.path.join(_HERE, 'bin', 'stoker')}): install the package with pip, or "
            "build it with make\n")


def run(args: Sequence[str]) -> int:
    """Runs ``stoker ARGS`` in a child process; returns its exit status."""
    exe = binary()
    if exe is None:
        sys.stderr.write(_missing())
        return 127
    return subprocess.call([exe, *args])


def main(argv: Optional[List[str]] = None) -> NoReturn:
    """The console entry point: becomes the stoker executable (exec), so its
    exit status, signals and terminal (the progress bars) are the tool's own."""
    args = sys.argv[1:] if argv is None else list(argv)
    exe = binary()
    if exe is None:
        sys.stderr.write(_missing())
        sys.exit(127)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["stoker", *args])
