"""Counts of docs/perf/verdicts_calibration.sh: A/A false alarms and planted-slowdown detection.

python docs/perf/verdicts_calibration_sum.py DIR
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def main(out: Path) -> None:
    for kind in ("aa", "plant"):
        files = sorted(out.glob(f"{kind}-*.json"), key=lambda p: int(p.stem.split("-")[1]))
        verdicts: Counter[str] = Counter()
        failed_checks = improved_checks = 0
        ratios = []
        for f in files:
            items = [i for i in json.loads(f.read_text())["items"] if i["gated"] and i["metric"] == "time"]
            verdicts.update(i["verdict"] for i in items)
            failed_checks += any(i["verdict"] == "regression" for i in items)
            improved_checks += any(i["verdict"] == "improvement" for i in items)
            ratios += [i["ratio"] for i in items if i["ratio"] is not None]
        spread = f"ratios {min(ratios):.3f}-{max(ratios):.3f}" if ratios else "no ratios"
        name = "A/A (comment only)" if kind == "aa" else "planted 2x (time only)"
        print(
            f"{name}: {len(files)} checks; checks with a regression {failed_checks}, with an improvement "
            f"{improved_checks}; gated timings {dict(sorted(verdicts.items()))}; {spread}"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
