"""Accepted regressions: a maintainer says a regression is intended, within a scope and a ceiling.

A correctness fix that costs 30% must not fail every check after it, and must not need the gate
turned off.  An **acceptance** names a scope (implementation glob, benchmark glob, optionally a
metric and parameter globs), a ratio ceiling and a reason::

    Perfguard-Accept: improved Forward.track_time <=1.35 "exact masking costs a pass"
    Perfguard-Accept: dilated * seq_len=512 <=2.1 "the reference path runs twice, on purpose"

It comes from a line of that form in a commit message (a *trailer*; any line of the message, so
that squash merges keep it) or from ``perfguard accept`` (recorded in the history store).  Applied
to a finished comparison (:func:`apply_acceptances`), every ``regression`` inside the scope and
within the ceiling becomes ``accepted`` (which does not fail the check) and says who accepted it,
why and up to what; beyond the ceiling or outside the scope it stays a regression.

**Trust** (docs/ci.md, "Trust model"; docs/living-with-regressions.md): an acceptance counts only
when a trusted party made it.  ``perfguard accept`` writes the history store, which only trusted
contexts can write, so its acceptances are trusted.  A trailer is written by the pull request's
own code: it is trusted only when a maintainer approved it (``approved_by``: the workflow passes
the login of the maintainer who applied the approval label, after checking their permission).
Untrusted acceptances are ignored, and the check says so.

Grammar of one acceptance (trailer value, or ``perfguard accept``'s arguments)::

    IMPL BENCHMARK [metric=METRIC] [NAME=GLOB ...] <=CEILING REASON...

``IMPL`` and ``BENCHMARK`` are shell globs (``*`` for all; the benchmark glob matches the name with
or without asv's module: ``Forward.track_time``, ``Work.track_forward_*``); ``CEILING`` is a ratio
above 1 (1.35 = up to 35% worse); the rest of the line is the reason (quotes optional).

The package: :mod:`~perfguard.accept.finding` (the grammar, trailers, approvals, stored acceptances:
what applies to a commit range, trusted or ignored with why) and :mod:`~perfguard.accept.applying`
(:func:`apply_acceptances` on a finished comparison, and what it did for the check's summary).
"""

from perfguard.accept.applying import Applied, Decision, apply_acceptances, beyond_ceiling
from perfguard.accept.finding import (
    EXAMPLE,
    TRAILER,
    Acceptance,
    AcceptError,
    Approval,
    CommitMessage,
    Found,
    command_spec,
    commit_messages,
    find_acceptances,
    parse_line,
    parse_tokens,
    range_shas,
    trailer_acceptances,
    trailer_values,
)
from perfguard.store.check_summary import IgnoredAcceptance

__all__ = [
    "EXAMPLE",
    "TRAILER",
    "AcceptError",
    "Acceptance",
    "Applied",
    "Approval",
    "CommitMessage",
    "Decision",
    "Found",
    "IgnoredAcceptance",
    "apply_acceptances",
    "beyond_ceiling",
    "command_spec",
    "commit_messages",
    "find_acceptances",
    "parse_line",
    "parse_tokens",
    "range_shas",
    "trailer_acceptances",
    "trailer_values",
]
