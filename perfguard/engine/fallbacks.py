"""A fallback inside a round is a failure, not a number (issue 26, DESIGN.md "Fidelity").

The guarded package announces a switch to another code path (a kernel that failed and was
replaced, a compiled path that could not run, a merge done another way) with a
``RuntimeWarning``.  A number measured after such a switch is of a path that a user's plain call
may not run: ``block_sparse_ring`` at 16K was gated at 12.55 ms on the gather path while users ran
FlexAttention at 0.24 ms, because one measuring pass had switched the process over.  So while a
round measures a case, every ``RuntimeWarning`` is caught; the benchmark in flight fails with the
package's message, and every later benchmark of the same case fails with it (its numbers would be
of the other path).  Benchmarks of the case measured before the switch keep their numbers: they
were taken on the path the case started on.

Other warnings are shown as usual.  A ``RuntimeWarning`` that is not a fallback (say, numpy's
"invalid value") fails the case too: a measurement that raises one is not to be trusted quietly,
and the message says where it came from.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Caught:
    """The RuntimeWarnings raised inside one :meth:`FallbackWatch.watch` block, as messages."""

    messages: list[str] = field(default_factory=list)


class FallbackWatch:
    """Catches RuntimeWarnings per benchmark and remembers the cases they tainted."""

    def __init__(self) -> None:
        self._tainted: dict[str, str] = {}

    def tainted(self, case: str) -> str | None:
        """Why ``case``'s later benchmarks cannot be measured (a switch seen earlier), or None."""
        return self._tainted.get(case)

    @contextmanager
    def watch(self, case: str) -> Iterator[Caught]:
        """Run a benchmark of ``case``; RuntimeWarnings inside go to the yielded :class:`Caught`."""
        caught = Caught()
        records: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as records:
                warnings.simplefilter("always", RuntimeWarning)
                yield caught
        finally:
            # Other warnings are shown only here, after ``catch_warnings`` has put the original
            # ``showwarning`` back: inside the block it appends to ``records``, so re-showing them
            # there appended each to the list being walked, for ever (issue 26: a worker spun on
            # the first backward's "no current CUDA context" UserWarning until its time ran out).
            for w in records:
                if issubclass(w.category, RuntimeWarning):
                    caught.messages.append(f"{w.message} ({w.filename}:{w.lineno})")
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        if caught.messages:
            self._tainted.setdefault(case, caught.messages[0])


def failure_text(messages: list[str]) -> str:
    """The error a benchmark fails with when the guarded package switched path under it."""
    said = "\n".join(f"  {m}" for m in messages[:5])
    more = f"\n  (and {len(messages) - 5} more)" if len(messages) > 5 else ""
    return (
        "the code under test switched to another path while it was measured (a RuntimeWarning): "
        f"the number would not be of the path a plain call runs, so none is stored\n{said}{more}"
    )


def tainted_text(reason: str) -> str:
    """The error of a later benchmark of a case whose path switched in an earlier one."""
    return (
        "an earlier benchmark of this case saw the code under test switch to another path, so this "
        f"one would measure that other path: {reason}"
    )
