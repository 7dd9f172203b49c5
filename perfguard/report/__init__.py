"""Reports from the history store: the check report (Markdown / HTML / JSON) and the history site.

Reports only *read* the store.  The API for ``perfguard check`` and other callers:

``render_markdown(check, *, max_chars=65_000, marker="<!-- perfguard-report -->", site_url=None,
report_url=None) -> str``
    GitHub-flavoured Markdown for ``$GITHUB_STEP_SUMMARY`` and the sticky PR comment.  The first
    line is always ``marker`` (a hidden HTML comment) so a workflow can find its comment and edit
    it in place; pass a per-machine marker when several GPU runners comment on one PR.  Visible:
    the headline over the gated items (``perfguard: 2 regressions (gated) · 4 derived``), the
    failing implementations with what changed underneath, one line for the rest, why anything is
    unstable; collapsed: the results grid (only the rows with news when there are more than 12
    rows or a ``report_url`` to the full HTML report), the environment, the repro lines.  It stays within
    ``max_chars`` UTF-16 units (GitHub's comment limit is 65,536): rows are dropped from the end
    with a note saying how many.

``render_html(check, *, site_url=None) -> str``
    One self-contained HTML page: inline CSS and JS, a Content-Security-Policy that allows
    nothing but those two blocks, no request of any kind.  Its results table fits 1280 px; the
    statistics columns come on demand.

``check_to_json(check) -> dict``
    The same data as plain JSON types (schema ``perfguard-check-report/1``, documented in
    ``docs/reports.md``): write it with ``json.dumps``.

    All three take a ``perfguard.store.StoredCheck`` (``Store.get_check(id)``; :func:`load_check`
    adds an error message for a missing id) and an optional keyword ``store=``.  The software of
    both sides comes from ``check.environment["base"/"head"]`` when the check recorded it, else
    from the runs of both commits through ``store.runs_for`` (see ``docs/design.md``, Reports).
    Typical use in ``perfguard check``::

        check = store.get_check(check_id)
        Path(markdown_path).write_text(render_markdown(check, store=store))

``build_site(source, out_dir, *, step_threshold=0.05, workers=None) -> SiteSummary``
    Writes the static history site into ``out_dir``.  ``source`` is a ``perfguard.store.Store``
    or a database URL (``None``: ``PERFGUARD_DB`` or the repository's store), opened with
    ``migrate=False``: nothing is created or migrated.  ``out_dir`` must be new, empty, or a
    previous perfguard site.

Verdict strings are those of ``perfguard.compare.Verdict``: regression, accepted, improvement,
unchanged, unstable, new, missing, broken, failed, skipped.  ``accepted`` (a regression within a
trusted acceptance's scope and ceiling) is counted in the headline, never as failing, and the
check's ``summary["acceptances"]`` is shown with it (:mod:`perfguard.report.acceptances`).
"""

from __future__ import annotations

from perfguard.report.check_json import JSON_SCHEMA, check_to_json
from perfguard.report.check_render import GITHUB_COMMENT_LIMIT, MARKER, render_html, render_markdown
from perfguard.report.check_report import CheckReport, build_report
from perfguard.report.queries import load_check, open_store
from perfguard.report.site import SiteSummary, build_site

__all__ = [
    "GITHUB_COMMENT_LIMIT",
    "JSON_SCHEMA",
    "MARKER",
    "CheckReport",
    "SiteSummary",
    "build_report",
    "build_site",
    "check_to_json",
    "load_check",
    "open_store",
    "render_html",
    "render_markdown",
]
