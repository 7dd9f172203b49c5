"""Where acceptances come from: the grammar, commit trailers, approvals and the history store.

An acceptance is read from a ``Perfguard-Accept`` trailer of a commit in the range a check brings
in, or from the store (``perfguard accept``); :func:`find_acceptances` returns the trusted ones and
every other with why it does not count (:mod:`perfguard.accept`, "Trust").
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.errors import UsageError
from perfguard.metrics import NAMES
from perfguard.store.acceptances import AcceptanceRecord, AcceptanceTerms
from perfguard.store.check_summary import IgnoredAcceptance

if TYPE_CHECKING:
    from perfguard.store import Store

TRAILER = "Perfguard-Accept"
#: A trailer line: the key (case-insensitive, as git trailers) and its value.
_TRAILER_LINE = re.compile(rf"^\s*{TRAILER}\s*:\s*(?P<value>.*?)\s*$", re.IGNORECASE | re.MULTILINE)
_CEILING = re.compile(r"^(?:<=|≤)\s*(?P<number>\S*)$")
EXAMPLE = 'improved Forward.track_time <=1.35 "exact masking costs a pass"'
#: A separator git never puts in a log line (records of ``git log``).
_RECORD = "\x1e"


class AcceptError(UsageError):
    """An acceptance that cannot be read (exit 2 from ``perfguard accept``; ignored, with why, in a check)."""


@dataclass(frozen=True, kw_only=True)
class Acceptance(AcceptanceRecord):
    """An acceptance as a check sees it: the record, the commit it belongs to, its store id if stored."""

    sha: str
    id: int | None = None

    @property
    def origin(self) -> str:
        """Where it comes from: ``trailer in 1a2b3c4d5e`` or ``perfguard accept #7 at 1a2b3c4d5e``."""
        if self.source == "trailer":
            return f"{TRAILER} trailer in {self.sha[:10]}"
        return f"perfguard accept{f' #{self.id}' if self.id is not None else ''} at {self.sha[:10]}"

    @property
    def signed(self) -> str:
        """Who: ``alice`` or ``bob <b@x> (approved by alice)``."""
        return self.author + (f" (approved by {self.approved_by})" if self.approved_by else "")

    def describe(self) -> str:
        return f'{self.scope()} <={self.ceiling:g} "{self.reason}" by {self.signed}, {self.origin}'

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "sha": self.sha,
            "scope": self.scope(),
            "impl": self.impl,
            "benchmark": self.benchmark,
            "metric": self.metric,
            "params": dict(self.params),
            "ceiling": self.ceiling,
            "reason": self.reason,
            "source": self.source,
            "author": self.author,
            "approved_by": self.approved_by,
            "trusted": self.trusted,
        }

    def as_record(self) -> AcceptanceRecord:
        """The plain record (what the store takes), without the commit and id."""
        return AcceptanceRecord(
            **{name: getattr(self, name) for name in AcceptanceRecord.__dataclass_fields__}
        )

    @classmethod
    def of(cls, record: AcceptanceRecord, sha: str, id: int | None = None) -> Acceptance:
        values = {name: getattr(record, name) for name in AcceptanceRecord.__dataclass_fields__}
        return cls(**values, sha=sha, id=id)


@dataclass(frozen=True)
class Found:
    """The acceptances that apply to a commit range: the trusted ones, and the rest with why."""

    trusted: tuple[Acceptance, ...] = ()
    ignored: tuple[IgnoredAcceptance, ...] = ()


# --------------------------------------------------------------------------------------------
# reading acceptances
# --------------------------------------------------------------------------------------------


def parse_tokens(tokens: Sequence[str], *, where: str = "acceptance") -> AcceptanceTerms:
    """``IMPL BENCHMARK [metric=M] [NAME=GLOB ...] <=CEILING REASON...`` -> :class:`AcceptanceTerms`."""
    hint = f"write it as: {EXAMPLE}"
    if len(tokens) < 2:
        raise AcceptError(f"{where} names no implementation and benchmark", hint=hint)
    impl, benchmark, *rest = tokens
    for name, value in (("an implementation", impl), ("a benchmark", benchmark)):
        if not value or "=" in value or _CEILING.match(value):
            raise AcceptError(f"{where}: {value!r} is not {name} glob", hint=hint)
    metric: str | None = None
    params: dict[str, str] = {}
    ceiling: float | None = None
    reason_tokens: list[str] = []
    for i, token in enumerate(rest):
        match = _CEILING.match(token)
        if match:
            text = match.group("number") or (rest[i + 1] if i + 1 < len(rest) else "")
            reason_tokens = rest[i + 1 :] if match.group("number") else rest[i + 2 :]
            ceiling = _ceiling(text, where, hint)
            break
        name, sep, value = token.partition("=")
        if not sep or not name or not value:
            raise AcceptError(
                f"{where}: {token!r} is neither NAME=GLOB nor the ceiling <=RATIO "
                "(which comes before the reason)",
                hint=hint,
            )
        if name == "metric":
            if value not in NAMES:
                raise AcceptError(f"{where}: metric {value!r} is not one of {', '.join(NAMES)}", hint=hint)
            metric = value
        else:
            params[name] = value
    if ceiling is None:
        raise AcceptError(f"{where} has no ceiling: say up to what ratio it is accepted (<=1.35)", hint=hint)
    reason = " ".join(reason_tokens).strip()
    if not reason:
        raise AcceptError(f"{where} gives no reason: say why the regression is intended", hint=hint)
    return AcceptanceTerms(
        impl=impl, benchmark=benchmark, ceiling=ceiling, reason=reason, metric=metric, params=params
    )


def _ceiling(text: str, where: str, hint: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise AcceptError(f"{where}: the ceiling {text!r} is not a number", hint=hint) from None
    if not math.isfinite(value) or value <= 1.0:
        raise AcceptError(
            f"{where}: the ceiling {text} accepts nothing; "
            "it is the largest ratio accepted (1.35 = 35% worse)",
            hint=hint,
        )
    return value


def refuse_untrusted(what: str) -> None:
    """Stop (exit 2) where ``PERFGUARD_UNTRUSTED`` is set: code under review cannot accept its own
    regressions, nor revoke what a maintainer accepted."""
    import os

    if os.environ.get("PERFGUARD_UNTRUSTED", "").strip().lower() not in ("", "0", "false", "no"):
        raise UsageError(
            f"perfguard accept does not {what} in an untrusted context (PERFGUARD_UNTRUSTED is set): "
            "code under review cannot change what is accepted",
            hint="a maintainer runs it with write access to the history store, or approves the "
            "Perfguard-Accept trailer with the approval label",
        )


def command_spec(
    spec: Sequence[str], *, ceiling: float | None = None, reason: str | None = None
) -> AcceptanceTerms:
    """What ``perfguard accept`` records: ``spec`` in the trailer's grammar, or the scope alone with
    ``ceiling`` (``--max``) and ``reason`` (``--reason``).

    Refused where ``PERFGUARD_UNTRUSTED`` is set: code under review cannot accept its own regressions.
    """
    refuse_untrusted("run")
    tokens = list(spec)
    if ceiling is not None:
        tokens.append(f"<={ceiling!r}")
    elif reason is not None and not any(t.startswith(("<=", "≤")) for t in tokens):
        raise AcceptError("--reason needs --max (the largest accepted ratio)", hint="add --max 1.35")
    if reason is not None:
        tokens.append(reason)
    return parse_tokens(tokens, where="perfguard accept")


def parse_line(value: str, *, where: str = "acceptance") -> AcceptanceTerms:
    """One trailer value (``improved Forward.track_time <=1.35 "why"``) -> :class:`AcceptanceTerms`."""
    try:
        tokens = shlex.split(value)
    except ValueError as exc:
        raise AcceptError(f"{where}: {exc} in {value!r}", hint=f"write it as: {EXAMPLE}") from None
    return parse_tokens(tokens, where=where)


def trailer_values(message: str) -> list[str]:
    """The values of every ``Perfguard-Accept:`` line of a commit message, in order."""
    return [m.group("value") for m in _TRAILER_LINE.finditer(message)]


@dataclass(frozen=True)
class CommitMessage:
    sha: str
    author: str
    message: str


def commit_messages(root: Path, base: str, head: str) -> list[CommitMessage]:
    """The commits in ``base..head`` (every commit the range brings in), oldest first."""
    from perfguard.gitrepo import git

    out = git(root, "log", "--reverse", f"--format=%H%x00%an <%ae>%x00%B{_RECORD}", f"{base}..{head}")
    assert isinstance(out, str)
    messages = []
    for record in out.split(_RECORD):
        record = record.strip("\n")
        if not record:
            continue
        sha, author, message = record.split("\x00", 2)
        messages.append(CommitMessage(sha, author, message))
    return messages


def range_shas(root: Path, base: str, head: str) -> list[str]:
    """Every commit in ``base..head`` plus ``head`` itself (``head`` may equal ``base``)."""
    from perfguard.gitrepo import git

    out = git(root, "rev-list", f"{base}..{head}")
    assert isinstance(out, str)
    shas = out.split()
    return shas if head in shas else [*shas, head]


@dataclass(frozen=True)
class Approval:
    """A maintainer's approval of the ``Perfguard-Accept`` trailers of exactly these commits.

    A maintainer approves a pull request at the commits they saw (a push removes the label), so
    the approval covers those commits' trailers and nothing else: not a trailer of a commit merged
    earlier that nobody approved, even where it falls in the same range of history (issue 27).
    """

    by: str
    commits: frozenset[str]

    @classmethod
    def of_pull_request(cls, root: Path, by: str | None, base: str, head: str) -> Approval | None:
        """``by`` approved the pull request at ``head``: its commits since the merge-base ``base``."""
        return cls(by, frozenset(range_shas(root, base, head))) if by else None

    @classmethod
    def of_merge(cls, root: Path, by: str | None, sha: str) -> Approval | None:
        """``by`` approved the pull request merged as ``sha`` on the baseline branch: the commits that
        merge brought in (``sha^1..sha``: the squashed commit, or a merge commit and its branch)."""
        if not by:
            return None
        from perfguard.gitrepo import git

        parents = str(git(root, "rev-list", "--parents", "-n", "1", sha)).split()[1:]
        return cls(by, frozenset(range_shas(root, parents[0], sha) if parents else [sha]))


def trailer_acceptances(
    messages: Iterable[CommitMessage], *, approval: Approval | None
) -> tuple[list[Acceptance], list[IgnoredAcceptance]]:
    """The trailers of these commits: trusted where ``approval`` covers their commit, else ignored."""
    found: list[Acceptance] = []
    ignored: list[IgnoredAcceptance] = []
    for commit in messages:
        for value in trailer_values(commit.message):
            where = f"{TRAILER} trailer in {commit.sha[:10]}"
            try:
                spec = parse_line(value, where=where)
            except AcceptError as exc:
                ignored.append(IgnoredAcceptance(commit.sha, value, exc.format_message().replace("\n", " ")))
                continue
            if approval is None:
                ignored.append(IgnoredAcceptance(commit.sha, value, _UNAPPROVED))
                continue
            if commit.sha not in approval.commits:
                why = (
                    f"{approval.by}'s approval covers the commits of the pull request they approved, "
                    "not this one (approve the pull request that brought it in)"
                )
                ignored.append(IgnoredAcceptance(commit.sha, value, why))
                continue
            record = spec.record(
                source="trailer", author=commit.author, trusted=True, approved_by=approval.by
            )
            found.append(Acceptance.of(record, commit.sha))
    return found, ignored


_UNAPPROVED = (
    "written in the pull request's own commit and not approved by a maintainer "
    "(the approval label, docs/living-with-regressions.md)"
)


def find_acceptances(
    root: Path, store: Store | None, base: str, head: str, *, approval: Approval | None = None
) -> Found:
    """Every acceptance that applies to the commits ``base..head``: stored ones and trailers.

    ``store``: the *trusted* history store (an untrusted check's baseline store, opened read-only);
    acceptances of a results store written by code under review must never be passed here.
    ``approval``: whose approval makes the trailers of which commits trusted; a trailer of a
    commit it does not cover is ignored, with why.
    ``head`` may be a dirty key (``<sha>+dirty.<hash>``): its commit's range is used.
    """
    head_commit = head.split("+dirty.", 1)[0]
    trusted: list[Acceptance] = []
    ignored: list[IgnoredAcceptance] = []
    if store is not None:
        for stored in store.acceptances(range_shas(root, base, head_commit)):
            acceptance = Acceptance.of(stored, stored.sha, stored.id)
            if stored.revoked_at is not None:
                ignored.append(IgnoredAcceptance(stored.sha, acceptance.describe(), stored.revocation))
            elif stored.trusted:
                trusted.append(acceptance)
            else:
                ignored.append(IgnoredAcceptance(stored.sha, acceptance.describe(), "stored as untrusted"))
    from_trailers, unapproved = trailer_acceptances(
        commit_messages(root, base, head_commit), approval=approval
    )
    return Found(tuple(trusted + from_trailers), tuple(ignored + unapproved))
