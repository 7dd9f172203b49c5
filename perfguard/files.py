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


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename; parents are created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
