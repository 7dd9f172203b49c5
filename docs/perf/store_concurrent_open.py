"""Stress: three threads open one fresh SQLite store at once, N rounds; prints how many rounds failed.

    python docs/perf/store_concurrent_open.py 1000

Before ``perfguard/store/engine.py`` waited for the switch to WAL itself (SQLite does not call its
busy handler for that), 8 and 12 of 300 rounds failed (two runs) with "database is locked" on the 2-core VM
(2026-11-24); after, 0 of 1,000.  The printed traceback is the first failure's.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import traceback
from pathlib import Path

from perfguard.store import Store


def one_round(url: str, openers: int = 3) -> list[BaseException]:
    """Open (create) the store at ``url`` from ``openers`` threads released together."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(openers)

    def open_it() -> None:
        barrier.wait()
        try:
            Store.open(url).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            errors = one_round(f"sqlite:///{Path(tmp) / f'history-{i}.db'}")
            if errors:
                failed += 1
                if failed == 1:
                    error = errors[0]
                    traceback.print_exception(error.__cause__ or error.__context__ or error)
    print(f"{failed} of {rounds} rounds failed")


if __name__ == "__main__":
    main()
