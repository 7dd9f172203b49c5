"""The static history site: ``perfguard report --out DIR``.

Plain files that work from ``file://`` and from GitHub Pages (relative links only, data embedded
in the pages as JSON blocks, no request of any kind, guarded by a Content-Security-Policy):

==========================  ==========================================================================
``index.html``              implementations x machines: latest value, change, sparkline per series
``bench/<slug>.html``       one page per benchmark x params: its series over commits on each machine,
                            hover read-out (commit, date, value, CI), regressions / improvements marked
``compare.html``            implementations against each other over sequence length, with crossovers
``memory.html``             peak memory against sequence length, log-log, with the fitted exponent
``work.html``               the work counts of one call against sequence length
``accuracy.html``           the error of one call against perfguard's float64 reference, per tensor and
                            dtype, against sequence length (its history: each series' page), and
                            the distributed suite's error against the number of ranks
``ranks.html``              the distributed suite against the number of ranks (GPUs), with the ideal
``backends.html``           a declared implementation on each of its kernels over sequence length (latest):
                            fastest marked, kernels that cannot run with why (:mod:`.backends`)
``regressions.html``        every marked change, newest first; every step ``perfguard changes`` stored and
                            every acceptance
``data/history.json|.csv``  every point of every series (downloads: :mod:`perfguard.report.downloads`)
``static/``                 the stylesheet and script (from ``perfguard/static``)
==========================  ==========================================================================

Steps of the baseline branch (``perfguard changes``: flagged, or accepted) and acceptances are
drawn on the charts at their commit and listed on the index (the flagged ones) and the changes
page (:mod:`perfguard.report.site_steps`).

This module builds the site and writes every page; what a page shows is in the site modules: a
benchmark's page (:mod:`~perfguard.report.site_benchmark`), the index and the recent marks
(:mod:`~perfguard.report.site_index`), the cross views (:mod:`~perfguard.report.scaling`,
:mod:`~perfguard.report.ranks`, :mod:`~perfguard.report.backends`).

The site is rebuilt from scratch each time; a directory is only overwritten when it holds a
previous perfguard site (marker file ``.perfguard-site``), so a wrong ``--out`` cannot wipe
something else.
"""

from __future__ import annotations

import shutil
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfguard.errors import UsageError
from perfguard.files import check_output_path
from perfguard.metrics import in_family
from perfguard.profiles import DISTRIBUTED_SUITE
from perfguard.report import accuracy_ranks, formatting, site_benchmark, site_index
from perfguard.report import backends as backends_view
from perfguard.report import ranks as ranks_view
from perfguard.report.charts import PALETTE, loglog_chart
from perfguard.report.downloads import write_downloads
from perfguard.report.lineage import Lineage
from perfguard.report.queries import HISTORY_PURPOSES, check_tallies, open_store, verdict_marks
from perfguard.report.scaling import Group, groups
from perfguard.report.series import Series, assemble, mark_checks, mark_steps, page_slug
from perfguard.report.site_checks import CHECKS_LISTED, check_rows, coverage
from perfguard.report.site_steps import (
    acceptances_json,
    attach_flags,
    change_points_json,
    step_rows,
)
from perfguard.report.templating import SITE_CSP, STATIC_FILES, environment, static_text

SITE_MARKER = ".perfguard-site"


@dataclass(frozen=True)
class SiteSummary:
    """What ``build_site`` wrote, for the CLI to print and the benchmark script to record."""

    out_dir: Path
    pages: int
    series: int
    points: int
    commits: int
    machines: int
    step_marks: int
    check_marks: int
    index_bytes: int
    total_bytes: int
    seconds: float
    change_points: int = 0  # steps perfguard changes stored (flagged or accepted)
    flagged: int = 0  # of those, the ones no acceptance covers
    acceptances: int = 0


def build_site(
    source: Any,
    out_dir: str | Path,
    *,
    step_threshold: float = 0.05,
    workers: int | None = None,
    title: str = "perfguard history",
    lineage: Lineage | None = None,
) -> SiteSummary:
    """Render the whole site from the store into ``out_dir`` (see the module docstring).

    ``lineage``: the baseline branch's first parents (:mod:`perfguard.report.lineage`): the charts'
    points; results of other commits are listed under their chart as such (None: every commit)."""
    started = time.perf_counter()
    out = Path(out_dir)
    _check_out(out)  # refuse a wrong --out before reading anything; write nothing until the store is read
    with open_store(source) as store:
        # the published history is of trusted runs only (docs/ci.md, "Trust model"): a check of a pull
        # request, local or in CI, stores its rounds untrusted, and they are never a point of it
        stored = store.series(purposes=HISTORY_PURPOSES, trusted_only=True)
        machines_stored = store.machines()
        vmarks = verdict_marks(store)
        tallies = check_tallies(store)
        points = store.change_points()
        accepted = store.acceptances()
    if lineage is not None:
        lineage = lineage.of(p.sha for st in stored for p in st.points)
    machines, series = assemble(stored, machines_stored, lineage)
    # A series that was only ever skipped (peak GPU memory on a CPU) has nothing to draw.
    series = [s for s in series if s.points or s.failures]
    # ... but the kernel comparison lists the kernels a machine skipped, with why: it keeps its own.
    kernel_series = [st for st in stored if backends_view.is_backends(st.benchmark)]
    del stored
    mark_steps(series, threshold=step_threshold, workers=workers)
    mark_checks(series, vmarks)
    flags = attach_flags(series, points, accepted)

    _prepare(out)
    pages: dict[tuple[str, str], list[Series]] = defaultdict(list)
    for s in series:
        pages[s.page_key].append(s)
    slugs = {
        key: page_slug(members[0].benchmark, members[0].params, key[1]) for key, members in pages.items()
    }
    impls = sorted({s.impl for s in series})
    colors = {impl: i for i, impl in enumerate(impls)}
    n_commits = len({c.sha for m in machines for c in m.commits})
    checks = check_rows(tallies, {c.sha for m in machines for c in m.commits})
    common = {
        "csp": SITE_CSP,
        "inline_assets": False,
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "n_series": len(series),
        "n_commits": n_commits,
        "n_machines": len(machines),
        "site_title": title,
    }
    env = environment()

    def write(rel: str, template: str, **context: Any) -> int:
        depth = rel.count("/")
        text = env.get_template(template).render(root="../" * depth, **common, **context)
        path = out / rel
        path.write_text(text, encoding="utf-8")
        return len(text.encode("utf-8"))

    (out / "bench").mkdir(parents=True, exist_ok=True)
    (out / "static").mkdir(exist_ok=True)
    (out / "data").mkdir(exist_ok=True)
    for name in STATIC_FILES:
        (out / "static" / name).write_text(static_text(name), encoding="utf-8")

    commit_labels = {m.key: site_benchmark.commit_labels(m) for m in machines}
    by_benchmark: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for key, members in pages.items():
        s = members[0]
        link = (s.impl, formatting.natural_key(s.other_params), formatting.params_label(s.params), slugs[key])
        by_benchmark[s.benchmark].append(link)
    for links in by_benchmark.values():
        links.sort()
    for key, members in pages.items():
        first = members[0]
        siblings = [link for link in by_benchmark[first.benchmark] if link[3] != slugs[key]]
        write(
            f"bench/{slugs[key]}.html",
            "site/benchmark.html",
            page="benchmark",
            first=first,
            chart_views=[
                site_benchmark.chart_view(s, k, commit_labels[s.machine.key], flags.get(id(s), []))
                for k, s in enumerate(members)
            ],
            siblings=[(impl, label, slug) for impl, _, label, slug in siblings],
        )

    labels = {m.key: m.label for m in machines_stored}
    steps = step_rows(points, slugs, labels)
    index_bytes = write(
        "index.html",
        "site/index.html",
        page="index",
        machines=machines,
        rows=site_index.index_rows(series, slugs, machines),
        recent=site_index.recent_marks(series, slugs)[:10],
        title=title,
        flagged=[r for r in steps if r.flagged],
        n_steps=len(steps),
    )
    write(
        "compare.html",
        "site/compare.html",
        page="compare",
        groups=[
            _group_view(g, memory=False)
            for g in groups(
                series,
                metrics=in_family("time"),
                colors=colors,
                slugs=slugs,
                min_lines=2,
            )
        ],
    )
    for name, metrics, heading, intro, empty, guides in (
        (
            "memory",
            in_family("memory"),
            "Memory scaling",
            "Peak GPU memory.",
            "No peak-memory results are stored yet (memory benchmarks run on CUDA machines only).",
            True,
        ),
        (
            "work",
            in_family("work"),
            "Work per call",
            "Deterministic counts of one call: FLOPs, dispatched aten ops, CUDA kernels launched and "
            "bytes allocated; they do not depend on a quiet machine and are gated like memory.",
            "No work metrics are stored yet.",
            True,
        ),
    ):
        write(
            f"{name}.html",
            "site/scaling.html",
            page=name,
            heading=heading,
            intro=intro,
            empty=empty,
            guides=guides,
            groups=[
                _group_view(g, memory=guides, crossovers=guides)
                for g in groups(series, metrics=metrics, colors=colors, slugs=slugs)
            ],
        )
    errors = in_family("accuracy")
    single_process = [s for s in series if not s.benchmark.startswith(f"{DISTRIBUTED_SUITE}.")]
    write(
        "accuracy.html",
        "site/accuracy.html",
        page="accuracy",
        heading="Accuracy",
        intro="The relative L2 error of one call's output and of each input gradient against perfguard's "
        "float64 reference of the same inputs (perfguard.engine.accuracy), per dtype, not causal and "
        "causal; gated on growth by a factor above the dtype's roundoff. A flat line: the error does "
        "not grow with the length. Each series' history is on its page (index).",
        empty="No accuracy results of the single-process suite are stored yet.",
        guides=False,
        groups=[
            _group_view(g, memory=False, crossovers=False)
            for g in groups(single_process, metrics=errors, colors=colors, slugs=slugs)
        ],
        # the distributed suite's errors against the number of ranks
        rank_groups=[
            GroupView(group=g, chart=accuracy_ranks.chart(g))
            for g in accuracy_ranks.error_groups(
                ranks_view.groups(series, colors=colors, slugs=slugs, metrics=errors)
            )
        ],
    )
    write(
        "ranks.html",
        "site/ranks.html",
        page="ranks",
        groups=[
            GroupView(group=g, chart=ranks_view.chart(g))
            for g in ranks_view.groups(series, colors=colors, slugs=slugs)
        ],
    )
    write(
        "backends.html",
        "site/backends.html",
        page="backends",
        groups=[
            GroupView(group=g, chart=backends_view.chart(g))
            for g in backends_view.groups(kernel_series, slugs=slugs)
        ],
    )
    write(
        "regressions.html",
        "site/regressions.html",
        page="regressions",
        marks=site_index.recent_marks(series, slugs),
        checks=checks[:CHECKS_LISTED],
        checks_more=max(0, len(checks) - CHECKS_LISTED),
        covers=coverage(n_commits, len(machines), checks, lineage),
        steps=steps,
        acceptances=sorted(accepted, key=lambda a: (a.created_at, a.id), reverse=True),
    )
    write_downloads(
        out,
        machines,
        series,
        extra={
            "change_points": change_points_json(points),
            "acceptances": acceptances_json(accepted),
        },
    )
    (out / ".nojekyll").write_text("", encoding="utf-8")  # GitHub Pages: serve the files as they are
    (out / SITE_MARKER).write_text(
        "written by perfguard report; safe to delete with the site\n", encoding="utf-8"
    )

    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return SiteSummary(
        out_dir=out,
        pages=len(pages) + 7,
        series=len(series),
        points=sum(len(s.points) for s in series),
        commits=n_commits,
        machines=len(machines),
        step_marks=sum(1 for s in series for m in s.marks if m.source == "step"),
        check_marks=sum(1 for s in series for m in s.marks if m.source == "check"),
        index_bytes=index_bytes,
        total_bytes=total,
        seconds=time.perf_counter() - started,
        change_points=len(points),
        flagged=sum(1 for p in points if p.flagged),
        acceptances=len(accepted),
    )


def _check_out(out: Path) -> None:
    """``out`` must be new, empty, or a previous perfguard site."""
    check_output_path(out, "site directory", directory=True)
    if out.is_dir() and any(out.iterdir()) and not (out / SITE_MARKER).is_file():
        raise UsageError(
            f"{out} is not empty and holds no perfguard site",
            hint="pass an empty or new directory to --out (perfguard only replaces its own sites)",
        )


def _prepare(out: Path) -> None:
    """Create ``out``, or clear the previous perfguard site there.

    perfguard writes no symbolic link into a site, so a link in one (``bench/``, ``data/``,
    ``static/`` or a page pointing elsewhere) was put there by someone else: it is removed, never
    followed, and the site is written as new files and directories in its place (issue 27).
    """
    _check_out(out)
    if out.is_dir() and any(out.iterdir()):
        for entry in out.iterdir():
            if entry.is_symlink():
                entry.unlink()
        for child in ("bench", "data", "static"):
            shutil.rmtree(out / child, ignore_errors=True)
        for page in out.glob("*.html"):
            page.unlink()
    out.mkdir(parents=True, exist_ok=True)


@dataclass
class GroupView:
    group: Group
    chart: Any


def _group_view(g: Group, *, memory: bool, crossovers: bool = True) -> GroupView:
    """``memory``: the O(n) and O(n²) guides; ``crossovers``: where one implementation overtakes another
    (not drawn for errors: which implementation is more exact at a length is in the table)."""
    lines = [(ln.impl, PALETTE[ln.color], list(ln.points.items())) for ln in g.lines]
    chart = loglog_chart(
        lines,
        unit=g.unit,
        verticals=[(c.seq_len, c.label) for c in g.crossovers] if crossovers else [],
        guide_slopes=((1.0, "O(n)"), (2.0, "O(n²)")) if memory else (),
    )
    return GroupView(group=g, chart=chart)
