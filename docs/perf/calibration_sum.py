"""Add up several ``perfguard calibrate --json`` reports (issue 19's counts span device calls).

Every A/A repetition and every planted repetition is an independent comparison of fresh processes,
so the counts of separate calibrations add up.  Prints, per test: checks, gated *timing*
comparisons (memory and work counts are deterministic and do not count), regressions, the
implementations and sizes covered, and the measured ratio range.

    python docs/perf/calibration_sum.py docs/perf/logs/*calibrate*/*.json
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def main(paths: list[str]) -> None:
    rows: dict[str, dict] = defaultdict(lambda: {"checks": 0, "n": 0, "flagged": 0, "impls": set(),
                                                 "ratios": [], "files": set(), "suspects": 0})  # fmt: skip
    for path in paths:
        report = json.loads(Path(path).read_text())
        runs = [("A/A", r) for r in (report.get("aa") or {}).get("runs", [])]
        for fraction in report["planted"]["fractions"]:
            runs += [(f"planted +{fraction['fraction'] * 100:g}%", r) for r in fraction["runs"]]
        for label, run in runs:
            timings = [i for i in run["items"] if i["metric"] == "time"]
            if not timings:
                continue
            row = rows[label]
            row["checks"] += 1
            row["files"].add(Path(path).name)
            row["n"] += len(timings)
            row["flagged"] += sum(i["verdict"] == "regression" for i in timings)
            row["suspects"] += sum(bool(i["suspect"]) for i in timings)
            row["impls"] |= {i["impl"] for i in timings}
            row["ratios"] += [i["final_ratio"] for i in timings if i["final_ratio"]]
    print("| test | checks | gated timing comparisons | flagged 'regression' | rate | re-measured | "
          "implementations | final ratio: min / median / max | reports |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for label in sorted(rows, key=lambda k: -1.0 if k == "A/A" else float(k.split("+")[-1].rstrip("%"))):
        r = rows[label]
        ratios = r["ratios"]
        spread = f"{min(ratios):.3f} / {statistics.median(ratios):.3f} / {max(ratios):.3f}" if ratios else ""
        files = ", ".join(sorted(r["files"]))
        print(f"| {label} | {r['checks']} | {r['n']} | {r['flagged']} | {r['flagged'] / r['n']:.1%} | "
              f"{r['suspects']} | {len(r['impls'])} | {spread} | {files} |")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
