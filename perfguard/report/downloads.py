"""The site's downloads: ``data/history.json`` and ``data/history.csv``, every point of every series.

Apart from the pages because they are a contract of their own (docs/reports.md: the CSV's columns,
the JSON's schema ``perfguard-history/1``) and the largest files of the site (docs/perf/site.md):
how they are written fast and safe to open in a spreadsheet is kept in one place.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from perfguard.report.series import MachineInfo, Series

HISTORY_SCHEMA = "perfguard-history/1"

#: A spreadsheet reads a cell that starts with one of these as a formula (OWASP, "CSV Injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_text(text: str | None) -> str:
    """A text cell a spreadsheet shows as text: a leading ``'`` before a would-be formula.

    Benchmark, implementation and machine names are user-controlled; ``=HYPERLINK(...)`` in
    history.csv would run in whoever opens the download (issue 13, D10).  The JSON keeps the names
    as they are.
    """
    if text is None:
        return ""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def write_downloads(
    out: Path, machines: list[MachineInfo], series: list[Series], *, extra: dict[str, Any] | None = None
) -> None:
    """The downloads: one JSON document (columnar points per series) and one long CSV.

    ``extra``: more top-level keys of the JSON document (the steps and acceptances).
    """
    doc = {
        "schema": HISTORY_SCHEMA,
        "machines": [{"key": m.key, "label": m.label, "kind": m.kind} for m in machines],
        "series": [
            {
                "machine": s.machine.key,
                "benchmark": s.benchmark,
                "impl": s.impl,
                "params": s.params,
                "params_key": s.params_key,
                "metric": s.metric,
                "unit": s.unit,
                "direction": s.direction,
                "gated": s.gated,
                "points": {
                    "sha": [p.commit.sha for p in s.points],
                    "committed_at": [p.commit.iso for p in s.points],
                    "value": [p.value for p in s.points],
                    "low": [p.low for p in s.points],
                    "high": [p.high for p in s.points],
                    "interval": [p.interval for p in s.points],
                    "n": [p.n for p in s.points],
                    "method": [p.method for p in s.points],
                },
                "marks": [
                    {"sha": s.points[m.index].commit.sha, "kind": m.kind, "source": m.source, "text": m.text}
                    for m in s.marks
                ],
            }
            for s in series
        ],
        **(extra or {}),
    }
    # json.dumps, not json.dump: only the former runs the C encoder over the whole document.
    (out / "data" / "history.json").write_text(json.dumps(doc, separators=(",", ":")), encoding="utf-8")
    # CSV: the constant fields of a series are quoted once; per point only numbers, hex shas,
    # ISO dates and fixed labels follow, which never need quoting (method is quoted via a cache).
    header = "machine,benchmark,impl,params,metric,unit,sha,committed_at,value,low,high,interval,n,method\r\n"
    quoted: dict[str | None, str] = {}

    def q(text: str | None) -> str:
        if text not in quoted:
            buf = io.StringIO()
            csv.writer(buf, lineterminator="").writerow([csv_text(text)])
            quoted[text] = buf.getvalue()
        return quoted[text]

    lines = [header]
    for s in series:
        prefix = ",".join(
            q(v)
            for v in (
                s.machine.key,
                s.benchmark,
                s.impl,
                json.dumps(s.params, sort_keys=True),
                s.metric,
                s.unit,
            )
        )
        lines.extend(
            f"{prefix},{p.commit.sha},{p.commit.iso},{p.value!r},{'' if p.low is None else repr(p.low)},"
            f"{'' if p.high is None else repr(p.high)},{p.interval},{p.n},{q(p.method)}\r\n"
            for p in s.points
        )
    (out / "data" / "history.csv").write_text("".join(lines), encoding="utf-8", newline="")
