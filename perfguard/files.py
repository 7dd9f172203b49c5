"""Writing output files whole or not at all, and saying why one cannot be written.

Reports and verdict JSON are read by other programs (a CI step posting the Markdown, a web server
serving the report, a user's script); a file that a killed run left
half-written would be read as truncated data.  Writing to a temporary file in the same directory
and renaming it over the target is atomic on POSIX, so readers see the old file or the new one.

A path that cannot be written (a component that is a file, a full disk, no permission) is an
:class:`~perfguard.errors.OutputError` (exit 2) naming the path; :func:`check_output_path` says so
before a command spends minutes measuring.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from perfguard.errors import OutputError, os_error


def _new_file_mode() -> int:
    """The mode ``open()`` gives a new file: 0o666 less the umask (0o644 under the usual 022).

    Read from /proc where there is one: setting the umask to read it is not thread-safe.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def check_output_path(path: Path, what: str = "output file", *, directory: bool = False) -> None:
    """Raise :class:`OutputError` when ``path`` can certainly not be written as a file (or, with
    ``directory``, as a directory): it is the other kind, or one of its parents is a file.  Cheap
    (a few ``stat`` calls); commands call it for their output paths before they do any work."""
    path = Path(path)
    if directory and path.exists() and not path.is_dir():
        raise OutputError(f"the {what} {path} is a file", hint="name a directory")
    if not directory and path.is_dir():
        raise OutputError(f"the {what} {path} is a directory", hint="name a file")
    for parent in reversed(path.parents):
        try:
            mode = parent.stat().st_mode
        except FileNotFoundError:
            return  # created when written
        except OSError as exc:
            raise os_error(exc, f"checking the {what} {path}") from None
        if not stat.S_ISDIR(mode):
            raise OutputError(
                f"the {what} {path} cannot be written: {parent} is a file, not a directory",
                hint="fix the path, or move that file out of the way",
            )


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename; parents are created.

    The file gets the mode a plain write would give it (``mkstemp`` makes 0600, and a report an
    Actions artifact or a web server must serve to others would be unreadable to them).  A path
    that is not a regular file (``/dev/stdout``, a FIFO, a device) is written in place: renaming
    over it would replace the device node itself.  Every failure is an :class:`OutputError`.
    """
    check_output_path(path)
    try:
        if path.exists() and not path.is_file():
            with path.open("w", encoding="utf-8") as fh:
                fh.write(text)
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise os_error(exc, f"writing {path}") from None
    try:
        os.fchmod(fd, _new_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise os_error(exc, f"writing {path}") from None
        raise
    return path
