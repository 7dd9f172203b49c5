"""One measurement per GPU (or per CPU machine) at a time: a lock every measuring command takes.

Two checks measuring on one GPU at once slow each other down and store the disturbed rounds as if
they were the machine's numbers (issue 27, item 9).  So ``run``, ``check``, ``calibrate`` and
``bisect`` take the lock of every device they measure on before anything runs (:func:`open_bench`
in :mod:`perfguard.measuring`) and hold it until they end: a GPU measurement locks the GPUs its
rounds use (the first visible one, or one per rank of a distributed profile), named by their UUID so
that two ``CUDA_VISIBLE_DEVICES`` spellings of one card are one lock; a CPU measurement locks the
machine.  A second command waits, and says for whom; with ``--no-wait`` it exits 2 instead.

**Where**: one file per device in ``$PERFGUARD_LOCK_DIR``, default ``/tmp/perfguard-locks``
(created world-writable with the sticky bit, as ``/tmp`` is, so that every user of the machine
shares it).  Containers that share a GPU but not ``/tmp`` must mount one directory and point
``PERFGUARD_LOCK_DIR`` at it.

**How**: ``flock(2)`` on the file, never the file's existence.  The kernel drops the lock when the
last process holding it ends, however it ends (SIGKILL, the OOM killer, a power cut of the
container), so a killed command never leaves a stale lock behind: the next one finds the file, its
old pid and no lock, and proceeds.  The benchmark and verification processes a command starts
inherit the lock (:attr:`DeviceLock.fds`): a command killed while its benchmark process still
measures leaves that process holding the lock until its round ends, and the next command waits for
it instead of measuring beside it.  The file holds the holder's pid, command line and start time, only
to say who holds it; a waiter checks that pid, and when it is gone says that a process it left
behind (its benchmark process) still measures.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from perfguard.errors import PerfguardError, UsageError

#: Where the lock files live (every user and every checkout on the machine must agree on it).
LOCK_DIR_ENV = "PERFGUARD_LOCK_DIR"
DEFAULT_LOCK_DIR = Path("/tmp/perfguard-locks")
#: How often a waiting command tries again.
POLL_S = 0.5


class DeviceBusy(PerfguardError):
    """``--no-wait`` and another command measures on the device (exit 2)."""


@dataclass(frozen=True)
class DeviceLock:
    """The locks one command holds; ``fds`` are passed on to its benchmark processes."""

    paths: tuple[Path, ...]
    fds: tuple[int, ...]


def lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)


def device_names(kind: str, uuids: Sequence[str | None], ranks: int = 1) -> list[str]:
    """The locks a measurement on ``kind`` takes: ``cpu``, or ``gpu-<uuid>`` of each GPU it uses."""
    if kind != "cuda":
        return ["cpu"]
    used = list(uuids)[: max(1, ranks)] or [None]
    names = []
    for i, uuid in enumerate(used):
        ident = re.sub(r"[^A-Za-z0-9_.-]", "_", uuid) if uuid else f"index{i}"
        names.append(f"gpu-{ident}")
    return sorted(set(names))


def _holder(path: Path) -> str:
    """Who holds ``path``'s lock, from what it wrote there (pid, command, since)."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        pid, command, since = int(info["pid"]), str(info["command"]), str(info["since"])
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"
    alive = True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        alive = False
    except PermissionError:  # another user's process: it exists
        pass
    if not alive:
        return (
            f"a benchmark process left behind by pid {pid} ({command}, since {since}; that process is "
            "gone, the one it started ends with its round)"
        )
    return f"pid {pid} ({command}, since {since})"


def _open(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # shared by every user of the machine, like /tmp
        if path.parent.stat().st_uid == os.getuid():
            path.parent.chmod(0o1777)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise UsageError(
            f"cannot open the device lock {path}: {exc.strerror}",
            hint=f"set {LOCK_DIR_ENV} to a directory every perfguard user of this machine can write",
        ) from None
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)
    return fd


@contextlib.contextmanager
def hold(
    names: Sequence[str], *, command: str, wait: bool, say: Callable[[str], None]
) -> Iterator[DeviceLock]:
    """Hold the lock of every device in ``names`` (in sorted order: two commands never deadlock).

    Waits for a busy device (saying once who holds it), or with ``wait=False`` raises
    :class:`DeviceBusy` (exit 2).  Ctrl-C while waiting interrupts as anywhere else.
    """
    directory = lock_dir()
    fds: list[int] = []
    paths: list[Path] = []
    try:
        for name in sorted(names):
            path = directory / f"{name}.lock"
            fd = _open(path)
            fds.append(fd)
            paths.append(path)
            _acquire(fd, path, name, wait=wait, say=say)
            os.ftruncate(fd, 0)
            since = datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "command": command, "since": since}).encode(), 0)
        yield DeviceLock(tuple(paths), tuple(fds))
    finally:
        for fd in fds:
            os.close(fd)  # closing drops the lock (once the processes that inherited it end too)


def _acquire(fd: int, path: Path, name: str, *, wait: bool, say: Callable[[str], None]) -> None:
    what = "this CPU machine" if name == "cpu" else f"GPU {name.removeprefix('gpu-')}"
    started = time.monotonic()
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            pass
        if not wait:
            raise DeviceBusy(
                f"another measurement runs on {what}: {_holder(path)} holds {path}",
                hint="wait for it (leave out --no-wait), or run on another machine: two measurements "
                "on one device disturb each other's numbers",
            )
        if not told:
            say(
                f"waiting for {what}: {_holder(path)} measures on it ({path}); one measurement per "
                "device at a time, --no-wait exits instead"
            )
            told = True
        time.sleep(POLL_S)
    if told:
        say(f"{what} is free after {time.monotonic() - started:.0f} s: measuring")
