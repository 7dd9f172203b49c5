"""Where a round's compiled code persists: one cache directory per trust domain, bytecode included.

Inductor, Triton and CUDA's JIT caches, and Python's bytecode (``PYTHONPYCACHEPREFIX``), live in
``$PERFGUARD_CACHE_DIR`` (default ``~/.cache/perfguard/compile``), one subdirectory per *trust
domain*: code under review compiles into ``untrusted`` and never writes what a trusted round loads
(docs/ci.md, "Trust model").

Bytecode under a prefix mirrors the source's path, so the bytecode of a source inside an
invocation's scratch directory (the suite through the import shim, a baseline's git worktree) is
dead once that directory is gone: :func:`forget_bytecode` removes it with the directory, and
:func:`prune_bytecode` removes the bytecode of every directory that is gone (what a killed
invocation left, a removed clone).  Without them every check added its files for good (34,282
files, 667 MB under the scratch directories on the 2-core CI machine:
docs/perf/test_suite_time.md).

A path whose bytecode is reused may hold different source later (a branch checked out again) with
the same size and, within a second, the same mtime: a timestamp ``.pyc`` would pass for it.
:func:`use_checked_bytecode` makes the bytecode of the code perfguard measures *checked-hash*
(PEP 552): Python compares the source's hash with the one in the ``.pyc`` at every import and
rewrites a stale one as checked-hash again, so a round never runs bytecode of other source.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import py_compile
import shutil
import sys
from pathlib import Path

#: Where compilation caches live (one subdirectory per trust domain); default ~/.cache/perfguard/compile.
CACHE_ENV = "PERFGUARD_CACHE_DIR"
TRUST_DOMAINS = ("trusted", "untrusted")
#: The flags word of a checked-hash .pyc (PEP 552: bit 0 hash-based, bit 1 check the source).
_CHECKED_HASH_FLAGS = (0b11).to_bytes(4, "little")
_CHECKED_HASH = py_compile.PycInvalidationMode.CHECKED_HASH


def cache_dir(domain: str) -> Path:
    """The cache directory of trust domain ``domain`` (``ValueError`` for any other name)."""
    if domain not in TRUST_DOMAINS:
        raise ValueError(f"trust domain must be one of {TRUST_DOMAINS}, not {domain!r}")
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "perfguard" / "compile") / domain


def compile_cache_env(domain: str) -> dict[str, str]:
    """Environment that puts Inductor, Triton and CUDA JIT caches in ``domain``'s own directory.

    Python's bytecode too: a round is a fresh process that imports torch's compiler stack, and where
    site-packages is read-only or ``PYTHONDONTWRITEBYTECODE`` is set (GPU images often do both) every
    round compiled that source again: 23 s of a 66 s production round on an H100 (py-spy,
    docs/perf/check.md).  ``PYTHONPYCACHEPREFIX`` keeps the bytecode beside the other caches, in the
    trust domain's directory, so code under review cannot write bytecode that a baseline round loads.
    """
    root = cache_dir(domain)
    return {
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "CUDA_CACHE_PATH": str(root / "cuda"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
        "PYTHONPYCACHEPREFIX": str(root / "pycache"),
        "PYTHONDONTWRITEBYTECODE": "",  # empty = unset: the bytecode goes to the prefix above
    }


def bytecode_mirror(domain: str, directory: Path) -> Path:
    """Where ``domain``'s processes keep the bytecode of the sources under ``directory`` (an
    absolute path): the prefix followed by the path, as Python's ``cache_from_source`` does."""
    return cache_dir(domain) / "pycache" / str(directory).lstrip(os.sep)


def forget_bytecode(directory: Path) -> None:
    """Remove the bytecode of the sources under ``directory``, in every domain: call it when the
    directory itself is removed (nothing can import from it any more)."""
    for domain in TRUST_DOMAINS:
        shutil.rmtree(bytecode_mirror(domain, directory), ignore_errors=True)


def prune_bytecode() -> int:
    """Remove, in every domain, the bytecode of directories that no longer exist; how many were removed.

    What a killed invocation left of its scratch directory, a removed clone or virtualenv: nothing
    can import from a directory that is gone, and one made again at the same path compiles anew.
    Safe while other perfguard processes work: a directory exists before anything under it is
    imported.  Only directories that exist are walked (1,349 of them in 22 ms on the 2-core CI
    machine, where 284 gone ones held 44,170 files)."""
    removed = 0
    for domain in TRUST_DOMAINS:
        prefix = str(cache_dir(domain) / "pycache")
        folders = [prefix]
        while folders:
            try:
                entries = list(os.scandir(folders.pop()))
            except OSError:
                continue
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                if os.path.lexists(entry.path[len(prefix) :]):
                    folders.append(entry.path)
                else:
                    shutil.rmtree(entry.path, ignore_errors=True)
                    removed += 1
    return removed


def use_checked_bytecode(directory: Path) -> None:
    """Make the bytecode of every ``.py`` under ``directory`` (the path as imported) checked-hash.

    Python writes timestamp ``.pyc`` files (source mtime in seconds, and size) and keeps a hash-based
    one hash-based when it rewrites it, so each file is compiled here once, when its ``.pyc`` is
    missing or a timestamp one; from then on every import compares the source's hash (module
    docstring).  Only where bytecode goes to a prefix (a round, a check's verification): a plain
    ``perfguard`` command never writes into the work tree.  A file that does not compile is left
    to the import, which says why.
    """
    if sys.pycache_prefix is None or sys.dont_write_bytecode:
        return
    for folder, subfolders, files in os.walk(directory):
        subfolders[:] = [d for d in subfolders if d != "__pycache__"]
        for name in files:
            if not name.endswith(".py"):
                continue
            source = os.path.join(folder, name)
            cached = importlib.util.cache_from_source(source)
            try:
                with open(cached, "rb") as pyc:
                    if pyc.read(8) == importlib.util.MAGIC_NUMBER + _CHECKED_HASH_FLAGS:
                        continue
            except OSError:
                pass
            with contextlib.suppress(py_compile.PyCompileError, OSError, ValueError):
                py_compile.compile(source, cfile=cached, doraise=True, invalidation_mode=_CHECKED_HASH)
