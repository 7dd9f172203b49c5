"""A check report rendered: GitHub-flavoured Markdown (the PR comment and the job summary, within
GitHub's comment limit) and one self-contained HTML page, both through the Jinja2 templates of
``templates/check/`` (:mod:`perfguard.report.templating`)."""

from __future__ import annotations

from perfguard.report.check_report import CheckReport, report_of
from perfguard.report.templating import environment, inline_csp, static_text
from perfguard.store import Store, StoredCheck

#: The first line of every Markdown report: a workflow finds its PR comment by it and edits it.
MARKER = "<!-- perfguard-report -->"
#: GitHub rejects issue and PR comments longer than this (characters).
GITHUB_COMMENT_LIMIT = 65_536
#: Default budget for the Markdown: under the limit, with room for a workflow to append a line.
MARKDOWN_BUDGET = 65_000


def render_markdown(
    check: StoredCheck | CheckReport,
    *,
    max_chars: int = MARKDOWN_BUDGET,
    marker: str = MARKER,
    site_url: str | None = None,
    report_url: str | None = None,
    store: Store | None = None,
) -> str:
    """GitHub-flavoured Markdown for the job summary and the sticky PR comment.

    Starts with ``marker`` (a hidden HTML comment) so a workflow can find and update its comment.
    The visible part is the verdict, the items that decide it and one line for the rest; the
    results (one row per implementation and parameters), the environment and the repro lines are
    collapsed.  When the text would exceed ``max_chars`` (counted in UTF-16 units, as GitHub does;
    the default stays under GitHub's 65,536 limit), rows are dropped from the end (quiet ones
    first, since rows with news sort first) and a note says how many and where the full report is.
    """
    if not (marker.startswith("<!--") and marker.endswith("-->") and "-->" not in marker[4:-3]):
        raise ValueError(f"marker must be one HTML comment, got {marker!r}")
    report = report_of(check, site_url=site_url, report_url=report_url, store=store)
    template = environment().get_template("check/report.md")
    grid = report.grid

    def render(limit: int | None) -> str:
        return template.render(r=report, grid=grid, marker=marker, limit=limit)

    text = render(None)
    if _utf16_len(text) <= max_chars:
        return text
    lo, hi = 0, len(grid.rows)  # largest limit that fits, by bisection
    if _utf16_len(render(0)) > max_chars:
        return _hard_cut(render(0), max_chars)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _utf16_len(render(mid)) <= max_chars:
            lo = mid
        else:
            hi = mid - 1
    return render(lo)


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _hard_cut(text: str, max_chars: int) -> str:
    """Last resort (a giant environment): cut, and say so."""
    note = "\n\n… report cut to fit GitHub's comment limit; see the HTML or JSON report.\n"
    budget = max_chars - _utf16_len(note)
    cut = text[:budget]
    while _utf16_len(cut) > budget:
        cut = cut[:-100]
    return cut + note


def render_html(
    check: StoredCheck | CheckReport, *, site_url: str | None = None, store: Store | None = None
) -> str:
    """A single self-contained HTML page (inline CSS and JS, nothing fetched)."""
    report = report_of(check, site_url=site_url, store=store)
    css, js = static_text("perfguard.css"), static_text("perfguard.js")
    return (
        environment()
        .get_template("check/report.html")
        .render(
            r=report,
            css=css,
            js=js,
            csp=inline_csp(css, js),
            inline_assets=True,
            root="",
            page="check",
        )
    )
