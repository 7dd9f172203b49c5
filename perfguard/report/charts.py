"""Chart geometry: the numbers behind the inline SVG the templates draw.

The charts are drawn on the Python side as plain SVG, so a page shows its data with JavaScript
off, prints, and can be checked by reading the DOM; the small script in ``static/perfguard.js``
only adds hover read-outs.  This module turns values into viewBox coordinates and tick labels;
the templates (``templates/macros/charts.html``) turn those into markup.  Coordinates are rounded
to 0.1 of a viewBox unit: invisible on screen, and it keeps a 1,000-point chart small.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from perfguard.units import ERROR_UNIT, format_value, sig3, unit_scale

#: Tableau 10: distinguishable, and still distinguishable for the common colour-vision deficiencies.
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)


def r1(x: float) -> str:
    """A coordinate with one decimal, trailing zeros dropped (``12.0`` -> ``12``)."""
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


def nice_step(span: float, count: int) -> float:
    """A 1-2-5 step that cuts ``span`` into about ``count`` intervals."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 2.5, 5, 10):
        if raw <= mult * magnitude:
            return mult * magnitude
    return 10 * magnitude


def nice_domain(lo: float, hi: float, count: int = 5) -> tuple[float, float, list[float]]:
    """A domain covering ``[lo, hi]`` whose ends are ticks, and the ticks."""
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = nice_step(hi - lo, count)
    start = math.floor(lo / step) * step
    stop = math.ceil(hi / step) * step
    if lo >= 0 > start:
        start = 0.0
    ticks = []
    k = 0
    while True:
        t = start + k * step
        if t > stop + step * 1e-9:
            break
        ticks.append(0.0 if abs(t) < step * 1e-9 else t)
        k += 1
    return start, stop, ticks


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """Evenly spaced ticks with one number of decimals (``0``, ``0.50``, ``1.00``, ``1.50``)."""
    if len(ticks) < 2:
        return [sig3(t) if t else "0" for t in ticks]
    step = abs(ticks[1] - ticks[0])
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    if step > 0 and round(step * 10**decimals) != step * 10**decimals:  # 2.5 steps need one more
        decimals += 1
    return ["0" if t == 0 else f"{t:,.{decimals}f}" for t in ticks]


@dataclass(frozen=True)
class Box:
    """The plot area inside the viewBox."""

    width: float
    height: float
    left: float
    top: float
    right: float
    bottom: float

    @property
    def x0(self) -> float:
        return self.left

    @property
    def x1(self) -> float:
        return self.width - self.right

    @property
    def y0(self) -> float:  # bottom edge (larger y)
        return self.height - self.bottom

    @property
    def y1(self) -> float:  # top edge
        return self.top


@dataclass(frozen=True)
class Linear:
    lo: float
    hi: float
    px_lo: float
    px_hi: float

    def __call__(self, v: float) -> float:
        if self.hi == self.lo:
            return (self.px_lo + self.px_hi) / 2
        return self.px_lo + (v - self.lo) / (self.hi - self.lo) * (self.px_hi - self.px_lo)


@dataclass(frozen=True)
class Log:
    lo: float
    hi: float
    px_lo: float
    px_hi: float

    def __call__(self, v: float) -> float:
        a, b = math.log(self.lo), math.log(self.hi)
        if a == b:
            return (self.px_lo + self.px_hi) / 2
        return self.px_lo + (math.log(v) - a) / (b - a) * (self.px_hi - self.px_lo)


@dataclass(frozen=True)
class Tick:
    px: float
    label: str
    anchor: str = "middle"
    sub: str = ""  # a second line under the label (x axis: the commit's date)


@dataclass
class Marker:
    """A verdict drawn on a chart: a stored check verdict or a step found in the series."""

    index: int  # position in the series' points
    x: float
    y: float
    kind: str  # regression | improvement
    source: str  # check | step
    label: str


@dataclass
class Flag:
    """A step of the baseline branch or an acceptance at one commit: a line across the plot, a pennant.

    ``kind``: ``flagged`` (a step no acceptance covers), ``accepted`` (a step an acceptance covers)
    or ``acceptance`` (an acceptance recorded at that commit); ``label`` is its read-out.
    """

    index: int  # position in the series' points
    x: float
    kind: str
    label: str


@dataclass
class LineChart:
    """A series over commits: points, line, confidence band, verdict markers, axes."""

    box: Box
    y_lo: float
    y_hi: float
    polyline: str
    points: str  # one zero-length subpath per point, drawn as a dot by a round line cap
    band: str
    xs: list[float]
    ys: list[float]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    markers: list[Marker] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)  # steps and acceptances (site_steps)
    failures: list[Tick] = field(default_factory=list)  # x of commits whose result failed
    suffix: str = ""
    dense: bool = False  # many points: smaller dots


#: Text width of one character of the charts' 11 px axis labels, in viewBox units (generous, so
#: a label never reaches the edge: issue 14 saw a TFLOP/s label clipped to ".0100").
CHAR_WIDTH = 6.6
#: Above this many points a series' dots shrink (the line carries the shape).
DENSE_POINTS = 150


def line_chart(
    positions: Sequence[int],
    values: Sequence[float],
    lows: Sequence[float | None],
    highs: Sequence[float | None],
    *,
    n_commits: int,
    commit_labels: Sequence[tuple[str, str]],
    unit: str,
    failed_positions: Sequence[int] = (),
    width: float = 800,
    height: float = 260,
) -> LineChart:
    """Geometry of one series: ``positions`` index the machine's commits (x), ``values`` are y.

    The x axis is the machine's commits in commit order, evenly spaced (asv's "even spacing"),
    labelled with the short sha and, under it, the commit time (``commit_labels``: one
    ``(sha, time)`` per commit).  The y axis starts at zero, as asv's does unless zoomed: a 21%
    step between two noisy commits must not look like a cliff.  Every point is drawn as a dot, so
    a series of one commit is visible.
    """
    candidates = [*values, *(v for v in highs if v is not None)]
    data_hi = max(candidates) if candidates else 1.0
    data_lo = min([*candidates, 0.0])  # a negative value would still be shown
    factor, suffix = unit_scale(unit, max(abs(data_lo), abs(data_hi)))
    lo, hi, ticks = nice_domain(data_lo / factor, (data_hi * 1.08 or 1.0) / factor)
    labels = tick_labels(ticks)
    # Room for the longest label at twice the size too: small screens draw axis text at 22 px.
    left = max(48.0, 2 * CHAR_WIDTH * max(len(t) for t in labels) + 8)
    box = Box(width, height, left=left, top=30, right=28, bottom=44)
    y = Linear(lo * factor, hi * factor, box.y0, box.y1)
    x = Linear(0, max(n_commits - 1, 0), box.x0, box.x1)
    # Inline affine maps: this runs for every point of every chart of the site.
    x_scale = (box.x1 - box.x0) / (n_commits - 1) if n_commits > 1 else 0.0
    x_off = box.x0 if n_commits > 1 else (box.x0 + box.x1) / 2
    y_scale = (box.y1 - box.y0) / (y.hi - y.lo)
    y_off = box.y0 - y.lo * y_scale
    xs = [x_off + p * x_scale for p in positions]
    ys = [y_off + v * y_scale for v in values]
    coords = [f"{a:.1f},{b:.1f}" for a, b in zip(xs, ys, strict=True)]
    upper = [f"{a:.1f},{y_off + h * y_scale:.1f}" for a, h in zip(xs, highs, strict=True) if h is not None]
    lower = [f"{a:.1f},{y_off + lw * y_scale:.1f}" for a, lw in zip(xs, lows, strict=True) if lw is not None]
    band = ""
    if upper and lower:
        band = "M" + " L".join(upper + lower[::-1]) + " Z"
    y_ticks = [Tick(y(t * factor), label) for t, label in zip(ticks, labels, strict=True)]
    return LineChart(
        box=box,
        y_lo=lo * factor,
        y_hi=hi * factor,
        polyline=" ".join(coords),
        points="".join(f"M{c}h0" for c in coords),
        band=band,
        xs=xs,
        ys=ys,
        y_ticks=y_ticks,
        x_ticks=commit_ticks(n_commits, commit_labels, x, box),
        failures=[Tick(x(p), "") for p in failed_positions],
        suffix=suffix,
        dense=len(values) > DENSE_POINTS,
    )


def commit_ticks(n_commits: int, labels: Sequence[tuple[str, str]], x: Linear, box: Box) -> list[Tick]:
    """Every k-th commit, k as small as lets the labels keep a gap between them; the first and
    the last commit always (the outer labels are anchored inwards, so they need 1.5 widths).

    A single commit sits in the middle.  ``Tick.sub`` is the commit's time, under its sha.
    """
    if not n_commits:
        return []
    if n_commits == 1:
        return [Tick((box.x0 + box.x1) / 2, labels[0][0], "middle", labels[0][1])]
    width = CHAR_WIDTH * max(max(len(a), len(b)) for a, b in labels[:n_commits])
    per_commit = (box.x1 - box.x0) / (n_commits - 1)
    inner = width + 16  # between two centred labels
    outer = 1.5 * width + 16  # between an outer (inward-anchored) label and its neighbour
    step = max(1, math.ceil(inner / per_commit))
    chosen = list(range(0, n_commits, step))
    last = n_commits - 1
    while len(chosen) > 1 and (last - chosen[-1]) * per_commit < outer:
        chosen.pop()
    chosen.append(last)
    while len(chosen) > 2 and (chosen[1] - chosen[0]) * per_commit < outer:
        chosen.pop(1)
    out = []
    for k, i in enumerate(chosen):
        anchor = "start" if k == 0 else "end" if k == len(chosen) - 1 else "middle"
        out.append(Tick(x(i), labels[i][0], anchor, labels[i][1]))
    return out


@dataclass
class Sparkline:
    width: float
    height: float
    polyline: str
    last_x: float
    last_y: float


def sparkline(
    values: Sequence[float], *, width: float = 120, height: float = 28, buckets: int = 60
) -> Sparkline:
    """The whole history in ``buckets`` points (median of each bucket), for the index page; y from zero."""
    if len(values) > buckets:
        size = len(values) / buckets
        reduced = []
        for b in range(buckets):
            chunk = sorted(values[int(b * size) : max(int((b + 1) * size), int(b * size) + 1)])
            reduced.append(chunk[len(chunk) // 2])
        reduced[-1] = values[-1]  # the latest value is exact, not a bucket median
        values = reduced
    # From zero, like the charts: a 2% wobble stays a 2% wobble at 28 px.
    lo, hi = min(0.0, min(values)), max(values)
    if hi == lo:
        hi = lo + 1.0
    x = Linear(0, max(len(values) - 1, 1), 2, width - 3)
    y = Linear(lo, hi, height - 3, 3)
    pts = [(x(i), y(v)) for i, v in enumerate(values)]
    return Sparkline(
        width=width,
        height=height,
        polyline=" ".join(f"{r1(a)},{r1(b)}" for a, b in pts),
        last_x=pts[-1][0],
        last_y=pts[-1][1],
    )


def log_ticks(lo: float, hi: float, *, base: float) -> list[float]:
    """Powers of ``base`` spanning ``[lo, hi]`` (at least the two ends)."""
    first = math.floor(math.log(lo, base) + 1e-9)
    last = math.ceil(math.log(hi, base) - 1e-9)
    return [base**k for k in range(first, last + 1)]


@dataclass
class LogLogLine:
    name: str
    color: str
    polyline: str
    points: list[tuple[float, float, float, float]]  # (x px, y px, n, value)
    label: str = ""


@dataclass
class LogLogChart:
    """Several lines over sequence length, both axes logarithmic."""

    box: Box
    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    lines: list[LogLogLine]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    verticals: list[Tick] = field(default_factory=list)  # crossovers
    guides: list[LogLogLine] = field(default_factory=list)  # reference slopes


def loglog_chart(
    lines: Sequence[tuple[str, str, Sequence[tuple[float, float]]]],
    *,
    unit: str,
    verticals: Sequence[tuple[float, str]] = (),
    guide_slopes: Sequence[tuple[float, str]] = (),
    width: float = 640,
    height: float = 320,
) -> LogLogChart:
    """``lines`` are ``(name, colour, [(n, value), ...])`` with positive n and values."""
    ns = [n for _, _, pts in lines for n, _ in pts]
    vs = [v for _, _, pts in lines for _, v in pts]
    x_ticks_v = log_ticks(min(ns), max(ns), base=2)
    # Tick every power of 2 up to ~8 labels, else every 4th.
    ybase = 1024.0 if unit == "bytes" else 10.0
    y_ticks_v = log_ticks(min(vs), max(vs), base=ybase)
    if len(y_ticks_v) < 3 and ybase == 1024.0:
        y_ticks_v = log_ticks(min(vs), max(vs), base=2)
        if len(y_ticks_v) > 8:
            y_ticks_v = log_ticks(min(vs), max(vs), base=8)
    y_labels = []
    for t in y_ticks_v:
        if unit == ERROR_UNIT:  # 1e-7 .. 1e-2: "1.00e-07", the unit named by the chart's title
            y_labels.append(format_value(t, unit))
            continue
        factor, suffix = unit_scale(unit, t)
        y_labels.append(f"{sig3(t / factor)} {suffix}".strip())
    # The left margin holds the longest tick label (issue 14: "0.0100 TFLOP/s" was cut to ".0100").
    left = max(60.0, CHAR_WIDTH * max(len(t) for t in y_labels) + 14)
    box = Box(width, height, left=left, top=14, right=16, bottom=38)
    x = Log(x_ticks_v[0], x_ticks_v[-1], box.x0, box.x1)
    y = Log(y_ticks_v[0], y_ticks_v[-1], box.y0, box.y1)
    out_lines = []
    for name, color, pts in lines:
        coords = [(x(n), y(v), n, v) for n, v in sorted(pts)]
        out_lines.append(
            LogLogLine(
                name=name,
                color=color,
                polyline=" ".join(f"{r1(a)},{r1(b)}" for a, b, _, _ in coords),
                points=coords,
            )
        )
    step = 1 if len(x_ticks_v) <= 9 else 2
    x_ticks = [Tick(x(t), _count_label(t)) for t in x_ticks_v[::step]]
    y_ticks = [Tick(y(t), label) for t, label in zip(y_ticks_v, y_labels, strict=True)]
    guides = []
    if guide_slopes and lines:
        # Anchor the reference slopes at the smallest n and the smallest value: both rise into the plot.
        n0, n1 = x_ticks_v[0], x_ticks_v[-1]
        v0 = min(v for _, _, pts in lines for n, v in pts if n == min(ns))
        for slope, label in guide_slopes:
            v1 = v0 * (n1 / n0) ** slope
            # Clip at the top of the plot so a steep guide stays inside the axes.
            if v1 > y_ticks_v[-1]:
                n1c = n0 * (y_ticks_v[-1] / v0) ** (1 / slope)
                v1c = y_ticks_v[-1]
            else:
                n1c, v1c = n1, v1
            guides.append(
                LogLogLine(
                    name=label,
                    color="#888",
                    polyline=f"{r1(x(n0))},{r1(y(v0))} {r1(x(n1c))},{r1(y(v1c))}",
                    points=[(x(n1c), y(v1c), n1c, v1c)],
                    label=label,
                )
            )
    return LogLogChart(
        box=box,
        x_lo=x_ticks_v[0],
        x_hi=x_ticks_v[-1],
        y_lo=y_ticks_v[0],
        y_hi=y_ticks_v[-1],
        lines=out_lines,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        verticals=[Tick(x(n), label) for n, label in verticals if x_ticks_v[0] <= n <= x_ticks_v[-1]],
        guides=guides,
    )


def _count_label(n: float) -> str:
    """Sequence lengths: 512, 4K, 64K, 1M (binary prefixes, as the profiles are written)."""
    n = round(n)
    for factor, suffix in ((1 << 20, "M"), (1 << 10, "K")):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{suffix}"
    return str(n)


@dataclass
class RatioAxis:
    """The shared log axis of the per-row ratio plots in the check report (a forest plot)."""

    lo: float
    hi: float
    width: float = 120

    def __call__(self, r: float) -> str:
        """The x coordinate of ratio ``r`` (clamped to the axis), as SVG text."""
        r = min(max(r, self.lo), self.hi)
        return r1(Log(self.lo, self.hi, 4, self.width - 4)(r))


def ratio_axis(ratios: Sequence[float], threshold: float) -> RatioAxis:
    """Wide enough for every ratio and CI bound, and always for ``1 ± threshold`` both ways."""
    lo = min([1 / (1 + threshold) ** 1.5, *ratios])
    hi = max([(1 + threshold) ** 1.5, *ratios])
    return RatioAxis(lo=lo / 1.05, hi=hi * 1.05)
