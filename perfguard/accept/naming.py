"""An acceptance must name something that was measured: its globs checked against the stored series.

``perfguard accept rnig Forwrd.track_time --max 1.5`` stored an acceptance that matched nothing and
said "recorded" (issue 30): the regression it was meant for then failed the next check, and the
acceptance sat in the history looking as if it mattered.  Before anything is written, the
implementation glob must match a stored implementation, the benchmark glob a stored benchmark (with
or without asv's module, as a check matches it) and the two together one stored series; otherwise
the command stops with exit 2, the known names and the closest ones.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable
from fnmatch import fnmatchcase

from perfguard.accept.finding import AcceptError
from perfguard.store.acceptances import AcceptanceTerms, short_benchmark

#: How many stored names an error lists before "and N more".
NAMES_LISTED = 20


def _matches(glob: str, name: str) -> bool:
    return fnmatchcase(name, glob)


def _benchmark_matches(glob: str, benchmark: str) -> bool:
    return fnmatchcase(short_benchmark(benchmark), glob) or fnmatchcase(benchmark, glob)


def _listing(names: Iterable[str]) -> str:
    names = sorted(set(names))
    shown = ", ".join(names[:NAMES_LISTED])
    return shown + (f", and {len(names) - NAMES_LISTED} more" if len(names) > NAMES_LISTED else "")


def _suggest(glob: str, names: Collection[str]) -> str:
    close = difflib.get_close_matches(glob, sorted(set(names)), n=3, cutoff=0.6)
    return f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""


def check_names(terms: AcceptanceTerms, series: Collection[tuple[str, str]]) -> None:
    """Raise :class:`AcceptError` (exit 2) unless ``terms`` names at least one stored series.

    ``series``: the stored (implementation, benchmark) pairs.  A store with none cannot confirm any
    name, so it refuses too: the acceptance would be recorded blind.
    """
    scope = terms.scope()
    if not series:
        raise AcceptError(
            f"the history store holds no measured series to check {scope!r} against",
            hint="record the baseline first (`perfguard run` or a check), then accept what it measured",
        )
    impls = {impl for impl, _ in series}
    benchmarks = {short_benchmark(b) for _, b in series}
    if not any(_matches(terms.impl, impl) for impl in impls):
        raise AcceptError(
            f"no stored implementation matches {terms.impl!r}",
            hint=f"{_suggest(terms.impl, impls)}the stored ones: {_listing(impls)}",
        )
    if not any(_benchmark_matches(terms.benchmark, b) for _, b in series):
        raise AcceptError(
            f"no stored benchmark matches {terms.benchmark!r}",
            hint=f"{_suggest(terms.benchmark, benchmarks)}the stored ones: {_listing(benchmarks)}",
        )
    both = [(i, b) for i, b in series if _matches(terms.impl, i) and _benchmark_matches(terms.benchmark, b)]
    if not both:
        of_impl = {short_benchmark(b) for i, b in series if _matches(terms.impl, i)}
        raise AcceptError(
            f"{terms.impl!r} has no stored benchmark matching {terms.benchmark!r}",
            hint=f"its stored benchmarks: {_listing(of_impl)}",
        )
