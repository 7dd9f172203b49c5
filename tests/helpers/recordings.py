"""Stores that already hold a recording of ``main``: recorded once per test session, copied per test.

Many end-to-end tests start the same way: ``perfguard run`` on ``main`` (three rounds: three fresh
processes that import torch and measure), and only then do what they are about: a check of a
branch against it, a killed or interrupted run, an error path that must leave the store as it was.
Recording that baseline once and giving each test its own copy keeps what every test asserts (each
gets a store it alone writes, holding exactly what ``perfguard run`` stored) and pays the rounds
once: a SQLite file is copied, a PostgreSQL database is created from a template database
(``CREATE DATABASE ... TEMPLATE``, a file-level copy on the server).

The recording is keyed by the commit of ``main`` and the command's arguments, so two test modules
that build the same project at the same commit share it (tests/test_check_cli.py builds its
origin with fixed commit dates for that reason).  The first test that needs a recording makes it,
and the check it is given runs on the recording's output then: the assertions about ``perfguard
run`` itself stay in the suite, once.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: What a test checks on the recording's ``perfguard run`` (called once, when it is made).
Check = Callable[[subprocess.CompletedProcess[str]], None]
#: ``perfguard(repo, *args, db=...)``: how the calling module starts the CLI.
Runner = Callable[..., subprocess.CompletedProcess[str]]


def _main_sha(repo: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "main"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


@dataclass
class Recordings:
    """The session's SQLite recordings of ``main``."""

    directory: Path
    _sources: dict[tuple[str, ...], Path] = field(default_factory=dict)

    def sqlite(self, repo: Path, dest: Path, args: Sequence[str], *, run: Runner, check: Check) -> str:
        """A SQLite store at ``dest/history.db`` holding ``perfguard <args>`` run on ``main``."""
        key = (_main_sha(repo), *args)
        source = self._sources.get(key)
        if source is None:
            source = self.directory / f"main-{len(self._sources)}" / "history.db"
            source.parent.mkdir(parents=True)
            _record(repo, args, f"sqlite:///{source}", run, check)
            self._sources[key] = source
        dest.mkdir(parents=True, exist_ok=True)
        for part in source.parent.glob(f"{source.name}*"):  # the database, and a -wal if one was left
            shutil.copy2(part, dest / part.name)
        return f"sqlite:///{dest / source.name}"


@dataclass
class PostgresRecordings:
    """The session's PostgreSQL recordings of ``main``: template databases on ``server``
    (tests/conftest.py's ``PostgresServer``), and the copies made of them (dropped at the end)."""

    server: Any
    _templates: dict[tuple[str, ...], str] = field(default_factory=dict)
    _databases: list[str] = field(default_factory=list)

    def postgres(self, repo: Path, args: Sequence[str], *, run: Runner, check: Check) -> str:
        """The URL of a new database holding ``perfguard <args>`` run on ``main``."""
        key = (_main_sha(repo), *args)
        template = self._templates.get(key)
        if template is None:
            template = self.server.create_database()
            self._databases.append(template)
            _record(repo, args, self.server.url_for(template), run, check)
            self._templates[key] = template
        name = self.server.create_database(template=template)
        self._databases.append(name)
        return str(self.server.url_for(name))

    def close(self) -> None:
        """Drop every database made here (copies first, then their templates)."""
        for name in reversed(self._databases):
            self.server.drop_database(name)
        self._databases.clear()


def _record(repo: Path, args: Sequence[str], db: str, run: Runner, check: Check) -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    assert head.strip() == _main_sha(repo), "record main with main checked out"
    check(run(repo, *args, db=db))
