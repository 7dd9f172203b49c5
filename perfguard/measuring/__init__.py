"""Measuring commits on this machine: what ``run``, ``check``, ``calibrate`` and ``bisect`` share.

A :class:`Bench` holds what one invocation measures with (repository, machine fingerprint,
profile, stores, round runner, configuration, progress reporter).  :meth:`Bench.measure` runs
rounds of the suite on commits, interleaved A B B A …, and returns them as store records (written by
the caller, all rounds of a side in one transaction); :meth:`Bench.stored_rounds` finds earlier
measurements that can be reused: the same machine key, profile and suite version, and a benchmark
selection that covers the current one.  :func:`open_bench` checks every input before anything is
measured (bad input fails fast), and cleans up afterwards (worktrees, scratch directories), also
when the measurement is interrupted.

**Trust** (docs/ci.md): a bench is *trusted* (a maintainer's run, the baseline branch's workflow)
or *untrusted* (it executes code under review).  An untrusted bench opens the history store
read-only, reads baselines from it, and writes its own runs and checks to a separate results store;
its compilation caches are its own (:func:`perfguard.engine.compile_cache.compile_cache_env`).

What a round is and why rounds are fresh processes: ``docs/verdicts.md``; how a round runs:
:mod:`perfguard.engine.rounds`.

The package: :mod:`~perfguard.measuring.bench` (the bench, its sides and its rounds) and
:mod:`~perfguard.measuring.opening` (opening a bench: every input checked, the stores, the device
lock, the cleanup, interrupts).
"""

from perfguard.measuring.bench import (
    Bench,
    BenchSession,
    QuietReporter,
    Reporter,
    Rounds,
    Side,
    command_line,
    commit_record,
)
from perfguard.measuring.opening import interrupts_as_errors, open_bench

__all__ = [
    "Bench",
    "BenchSession",
    "QuietReporter",
    "Reporter",
    "Rounds",
    "Side",
    "command_line",
    "commit_record",
    "interrupts_as_errors",
    "open_bench",
]
