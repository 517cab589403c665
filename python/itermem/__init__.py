"""itermem: iteration-aware GPU memory management (SmartPool + AutoSwap).

The wheel installs the ``itermem`` command (a Rust executable that carries ``libitermem.so``,
the interposer) and this package: ``library_path()`` for PyTorch's pluggable allocator or
``LD_PRELOAD``, ``itermem.torch.use()``, and ``python -m itermem ...`` for the command.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata

__all__ = ["executable", "library_path"]


def executable():
    """The path of the ``itermem`` command installed with this package."""
    try:
        files = metadata.distribution("itermem").files or []
    except metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name == "itermem" and entry.parent.name == "bin":
            path = os.path.abspath(str(entry.locate()))
            if os.path.isfile(path):
                return path
    for candidate in (os.path.join(sysconfig.get_path("scripts"), "itermem"), shutil.which("itermem")):
        if candidate and os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(
        "the itermem command of this package is not installed (is itermem installed from its wheel?)"
    )


def library_path():
    """The path of ``libitermem.so``, the library ``itermem run`` preloads.

    The command carries the library and writes it once to the user's cache directory
    (``$XDG_CACHE_HOME/itermem`` or ``~/.cache/itermem``); this asks the command where it is.
    """
    result = subprocess.run(
        [executable(), "library-path"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    if result.returncode != 0:
        raise RuntimeError("itermem library-path failed: " + result.stderr.strip())
    return result.stdout.strip()


def _main():
    """``python -m itermem ARGS...``: the ``itermem`` command with these arguments."""
    command = executable()
    sys.stdout.flush()
    os.execv(command, [command] + sys.argv[1:])
