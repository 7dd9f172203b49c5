"""The commands that read the store, as functions: ``report`` (the history site, a stored check's
reports) and ``history`` (:mod:`perfguard.api`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfguard.report import SiteSummary
    from perfguard.report.lineage import Lineage
    from perfguard.report.terminal import TerminalSummary
    from perfguard.store import StoredSeries


@dataclass
class Rendered:
    """What ``report`` rendered: the site's summary, and one stored check's reports (``terminal``:
    what ``perfguard check`` printed for it, when no file format was asked for)."""

    site: SiteSummary | None = None
    markdown: str | None = None
    html: str | None = None
    json: dict[str, Any] | None = None
    terminal: TerminalSummary | None = None


def report(
    *,
    out_dir: Path | None = None,
    check_id: int | None = None,
    markdown: bool = False,
    html: bool = False,
    json: bool = False,
    db: str | None = None,
    baseline: str = "main",
    cwd: Path | None = None,
) -> Rendered:
    """``perfguard report``: the static history site into ``out_dir``, and/or the reports of stored check
    ``check_id`` (the formats asked for; none: its terminal summary, as ``perfguard check`` printed
    it).  Only reads the store: nothing is created or migrated."""
    from perfguard.errors import UsageError, os_error

    formats = {"html": html, "markdown": markdown, "json": json}
    if check_id is None and any(formats.values()):
        raise UsageError("--html, --markdown and --json render a stored check", hint="add --check ID")
    if out_dir is None and check_id is None:
        raise UsageError(
            "nothing to render",
            hint="pass --out DIR for the history site, or --check ID (with --html/--markdown/--json PATH)",
        )
    from perfguard.report import (
        build_site,
        check_to_json,
        load_check,
        open_store,
        render_html,
        render_markdown,
    )

    rendered = Rendered()
    with open_store(db) as store:
        if check_id is not None:
            stored = load_check(store, check_id)
            rendered.markdown = render_markdown(stored, store=store) if markdown else None
            rendered.html = render_html(stored, store=store) if html else None
            rendered.json = check_to_json(stored, store=store) if json else None
            if not any(formats.values()):
                from perfguard.report import build_report
                from perfguard.report.terminal import terminal_summary

                rendered.terminal = terminal_summary(build_report(stored, store=store))
        if out_dir is not None:
            from perfguard.output_paths import output_path

            site_dir = output_path(out_dir, directory=True)
            try:
                rendered.site = build_site(store, site_dir, lineage=_lineage(baseline, cwd))
            except OSError as exc:  # a full disk halfway through the pages
                raise os_error(exc, f"writing the site to {site_dir} (left incomplete)") from None
    return rendered


def _lineage(baseline: str, cwd: Path | None) -> Lineage:
    from perfguard.errors import GitError
    from perfguard.gitrepo import repo_root
    from perfguard.report.lineage import lineage

    try:
        root = repo_root(cwd)
    except GitError:
        root = None
    return lineage(root, baseline)


@dataclass
class History:
    """What ``history`` found: the store it read and the matching series; ``message`` says why
    there is nothing to show (no store yet, or no series matching the filters)."""

    store: str
    series: list[StoredSeries] = field(default_factory=list)
    message: str | None = None
    lineage: Lineage | None = None  # the baseline branch's first parents: which points are its steps

    def to_json(self) -> dict[str, Any]:
        """``perfguard history --json``: each point says whether it is on the baseline's lineage."""
        series = [s.to_json() for s in self.series]
        if self.lineage is not None:
            for s in series:
                for point in s["points"]:
                    point["on_baseline"] = self.lineage.on(point["sha"])
        baseline = None
        if self.lineage is not None:
            baseline = {
                "ref": self.lineage.ref,
                "known": self.lineage.shas is not None,
                "why": self.lineage.why,
            }
        return {"store": self.store, "baseline": baseline, "series": series}


def history(
    *,
    impl: str | None = None,
    benchmark: str | None = None,
    machine: str | None = None,
    profile: str | None = None,
    branch: str | None = None,
    include_dirty: bool = False,
    limit: int = 20,
    db: str | None = None,
    baseline: str = "main",
    cwd: Path | None = None,
) -> History:
    """``perfguard history``: the stored series (newest ``limit`` commits each), filtered; read-only.

    ``impl`` matches exactly, ``benchmark`` and ``machine`` by substring.  A ``db`` that names a
    SQLite file that does not exist is a :class:`StoreError`; the default store not existing yet is
    an empty history with a message.  ``baseline``: the branch whose first-parent lineage the
    changes follow (:mod:`perfguard.report.lineage`; unknown outside a git repository).
    """
    from perfguard.console import visible
    from perfguard.errors import StoreError
    from perfguard.store import Store, resolve

    store_url = resolve(db)
    path = store_url.sqlite_path
    if path is not None and not path.exists():
        if not store_url.is_default:
            raise StoreError(
                f"there is no history store at {path}",
                hint="check --db (or PERFGUARD_DB); perfguard run creates the store when it records results",
            )
        where = store_url.masked
        return History(where, message=f"{where}: no history store here yet: perfguard run records results")
    with Store.open(db, read_only=True) as store:
        found = store.series(
            machine=machine,
            benchmark=benchmark,
            impl=impl,
            profile=profile,
            branch=branch,
            include_dirty=include_dirty,
            last=limit,
            match="contains",
        )
        if found:
            stored = (p.sha for s in found for p in s.points)
            return History(store.url, found, lineage=_lineage(baseline, cwd).of(stored))
        filters = {"impl": impl, "benchmark": benchmark, "machine": machine}
        given = ", ".join(f"{name}={visible(repr(v))}" for name, v in filters.items() if v is not None)
        if not given:
            return History(
                store.url, message=f"{store.url}: no results stored yet (perfguard run records some)"
            )
        lines = [f"{store.url}: no stored series match {given}"]
        for name, value in filters.items():
            if value is not None:
                known = store.distinct(name)
                shown = ", ".join(visible(k) for k in known[:12]) + (", ..." if len(known) > 12 else "")
                lines.append(f"  stored {name} values: {shown or '(none)'}")
        return History(store.url, message="\n".join(lines))
