"""Which code path each timing stands for, base against HEAD (issue 26, DESIGN.md "Fidelity").

Every timed result carries a *path fingerprint* in ``info["path"]``
(:meth:`perfguard.engine.passes.Pass.path`:
the timed graph's CUDA kernel names, or the aten op multiset on the CPU).  A change of path is
worth saying even when the time moved less than the threshold: "flex → gather" or "cuDNN → flash"
means the numbers of the two sides are of different code, and the next change to either path will
move one side only.  This module finds such changes; it compares, it does not judge (a path change
never fails a check by itself).

Pure: rounds of results in (their ``info`` read through
:class:`~perfguard.store.result_info.ResultInfo`), typed entries out (the check's ``summary.paths``:
:class:`~perfguard.store.check_summary.PathChange`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from perfguard.store.check_summary import PathChange
from perfguard.store.result_info import CodePath, ResultInfo

#: How many removed / added names an entry keeps (the rest are counted).
NAMES_SHOWN = 4
#: How many entries a check keeps.
MAX_ENTRIES = 40
#: Kernel names are long (template arguments); an entry shows this many characters of each.
NAME_CHARS = 80


def _fingerprints(rounds: Iterable[Iterable[Any]]) -> dict[tuple[str, str, str], list[CodePath]]:
    """(impl, params_key, benchmark) -> the path fingerprints of its ok results, round by round."""
    found: dict[tuple[str, str, str], list[CodePath]] = {}
    for results in rounds:
        for r in results:
            path = ResultInfo.from_json(r.info).path
            if r.status != "ok" or path is None:
                continue
            found.setdefault((r.impl, r.params_key, r.benchmark), []).append(path)
    return found


def _short(names: Iterable[str]) -> tuple[str, ...]:
    ordered = sorted(names)
    shown = [n if len(n) <= NAME_CHARS else n[: NAME_CHARS - 1] + "…" for n in ordered[:NAMES_SHOWN]]
    if len(ordered) > NAMES_SHOWN:
        shown.append(f"(and {len(ordered) - NAMES_SHOWN} more)")
    return tuple(shown)


def path_changes(
    base_rounds: Sequence[Iterable[Any]], head_rounds: Sequence[Iterable[Any]]
) -> list[PathChange]:
    """Every timed benchmark x params whose path differs between the sides or within one side.

    An entry (:class:`~perfguard.store.check_summary.PathChange`): ``impl``, ``params_key``,
    ``benchmark``, ``kind`` (CUDA kernels / aten ops), ``base`` / ``head`` (the digests, several when
    the rounds of a side disagree), ``removed`` / ``added`` (names in one side's path only, a few
    shown) and ``varies`` (the sides whose own rounds ran different paths: a path that depends on
    what ran before it).
    """
    base, head = _fingerprints(base_rounds), _fingerprints(head_rounds)
    entries: list[PathChange] = []
    for key in sorted(set(base) & set(head)):
        b, h = base[key], head[key]
        b_digests = tuple(sorted({p.digest for p in b}))
        h_digests = tuple(sorted({p.digest for p in h}))
        varies = tuple(side for side, d in (("base", b_digests), ("head", h_digests)) if len(d) > 1)
        if b_digests == h_digests and not varies:
            continue
        b_names, h_names = set(b[0].names), set(h[0].names)
        entries.append(
            PathChange(
                impl=key[0],
                params_key=key[1],
                benchmark=key[2],
                kind=h[0].kind or b[0].kind or "path",
                base=b_digests,
                head=h_digests,
                removed=_short(b_names - h_names),
                added=_short(h_names - b_names),
                varies=varies,
            )
        )
        if len(entries) >= MAX_ENTRIES:
            break
    return entries
