"""Writing output files whole or not at all.

Reports and verdict JSON are read by other programs (a CI step posting the Markdown, a web server
serving the report, a user's script); a file that a killed run left
half-written would be read as truncated data.  Writing to a temporary file in the same directory
and renaming it over the target is atomic on POSIX, so readers see the old file or the new one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename; parents are created.

    The file gets the mode a plain write would give it (``mkstemp`` makes 0600, and a report an
    Actions artifact or a web server must serve to others would be unreadable to them).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, _new_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
