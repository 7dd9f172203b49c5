"""``write_atomic``: readers see the old file or the new one, never a partial write."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfguard.files import write_atomic


def test_writes_whole_file_and_creates_parents(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "report.md"
    assert write_atomic(target, "# ok\n") == target
    assert target.read_text(encoding="utf-8") == "# ok\n"
    assert [p.name for p in target.parent.iterdir()] == ["report.md"]


def test_failed_write_keeps_old_content_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "check.json"
    write_atomic(target, '{"old": true}\n')
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, "half \udc80 written")  # a lone surrogate cannot be encoded as UTF-8
    assert target.read_text(encoding="utf-8") == '{"old": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["check.json"]
