"""The hierarchical bootstrap: the percentile interval of the oriented ratio of medians.

Each side's rounds are resampled, then the samples inside each drawn round, so the
process-to-process variance (the dominant term on a GPU) is part of the interval
(``docs/verdicts.md``, "How the interval is computed (and why it is fast)": rounds of 20 samples or
more use the exact law of the resampled median instead of drawing samples).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from perfguard.stats.ratio import Direction, check_direction, safe_ratio
from perfguard.stats.samples import FloatArray, Samples

Seed = int | Sequence[int]

#: Rounds with fewer samples are bootstrapped by plain Monte Carlo resampling; larger ones by the
#: exact-law method of :func:`_median_laws` (the same distribution, computed far more cheaply).
#: From 20 samples a round the two agree to a few % of the interval width, about the Monte Carlo
#: error of a 2000-resample bootstrap itself (``tests/test_stats.py``).
ANALYTIC_MIN_SAMPLES = 20
#: Up to this many round compositions are enumerated exactly (k <= 5 rounds: 126); beyond it the
#: round level is sampled (SAMPLED_COMPOSITIONS draws).
MAX_ENUMERATED_COMPOSITIONS = 256
SAMPLED_COMPOSITIONS = 512
#: Work arrays of the vectorised bootstrap are kept under this many elements per chunk.
_CHUNK_ELEMENTS = 200_000
#: Resamples of at least this many samples use one law for the median (see :func:`_median_laws`).
SMALL_POOL = 200
#: Half-width, in standard deviations of a round's median, of the window the law is computed on.
_WINDOW_Z = 2.5


@lru_cache(maxsize=16)
def _compositions(k: int) -> tuple[NDArray[np.int64], FloatArray]:
    """Every way k rounds drawn with replacement out of k can repeat, with its probability.

    Drawing k of k rounds with replacement gives a count vector c (sum k) with the multinomial
    probability k! / prod(c_r!) / k^k: 10 vectors for k = 3, 126 for k = 5.
    """
    counts = np.asarray(
        [np.bincount(combo, minlength=k) for combo in itertools.combinations_with_replacement(range(k), k)],
        dtype=np.int64,
    )
    logw = special.gammaln(k + 1) - special.gammaln(counts + 1).sum(axis=1) - k * math.log(k)
    w = np.exp(logw)
    return counts, w / w.sum()


def _round_weights(k: int, rng: np.random.Generator) -> tuple[NDArray[np.int64], FloatArray]:
    if math.comb(2 * k - 1, k) <= MAX_ENUMERATED_COMPOSITIONS:
        return _compositions(k)
    counts = rng.multinomial(k, np.full(k, 1.0 / k), size=SAMPLED_COMPOSITIONS)
    return counts, np.full(SAMPLED_COMPOSITIONS, 1.0 / SAMPLED_COMPOSITIONS)


def _support(side: Samples) -> FloatArray:
    """The distinct sample values the bootstrap median of ``side`` can take, up to ~1e-6.

    A pooled median lies between the smallest and the largest median of the rounds that were
    drawn, and a round's resampled median falls below its own (0.5 - 2.5/sqrt(n)) quantile (or
    above the mirror one) with probability ~3e-7.  Values outside that window carry no mass worth
    computing, and leaving them out makes the law 2-5x cheaper for 100+ samples a round.
    """
    lo = math.inf
    hi = -math.inf
    for r in side.rounds:
        last = r.size - 1
        delta = _WINDOW_Z / math.sqrt(r.size)
        lo = min(lo, r[max(0, math.floor((0.5 - delta) * last))])
        hi = max(hi, r[min(last, math.ceil((0.5 + delta) * last))])
    p = side.pooled[np.searchsorted(side.pooled, lo, "left") : np.searchsorted(side.pooled, hi, "right")]
    keep = np.empty(p.size, dtype=bool)
    keep[:1] = True
    np.not_equal(p[1:], p[:-1], out=keep[1:])
    return p[keep]


def _median_laws(
    sides: Sequence[Samples], counts: NDArray[np.int64], weights: FloatArray, *, one_law: bool
) -> tuple[FloatArray, FloatArray, FloatArray | None]:
    """Support and CDFs of the pooled median of each side under the hierarchical bootstrap.

    All ``sides`` have the same number of rounds k, and every round has at least
    ANALYTIC_MIN_SAMPLES samples.  The two-level resample (draw k rounds with replacement, then
    n_r samples with replacement inside each drawn round, pool, take the median) is computed
    without drawing samples.  Given the round counts c, the number of resampled values <= x is a
    sum of independent binomials Bin(c_r * n_r, F_r(x)) (F_r: empirical CDF of round r), and the
    m-th smallest resampled value is <= x exactly when that count reaches m.  The count is
    replaced by its normal approximation (continuity-corrected), evaluated at the distinct sample
    values where the median can fall (:func:`_support`) and mixed over the round compositions.

    numpy's median of N values averages the order statistics floor((N+1)/2) and floor(N/2)+1.
    Both laws are returned and a draw averages the two at the same uniform (adjacent order
    statistics, so this comonotone coupling is close to exact), unless ``one_law``: when every
    resample holds at least SMALL_POOL samples the two differ by less than one sample spacing and
    one law, of the half-way rank N/2 + 1/2, stands for both (``cdf_high`` is None).
    ``tests/test_stats.py`` checks both paths against a plain Monte Carlo bootstrap.

    Returns (grid, cdf_low, cdf_high), each (len(sides), U): grid rows padded with their last
    value, CDF rows with 1.
    """
    supports = [_support(s) for s in sides]
    width = max(g.size for g in supports)
    grid = np.empty((len(sides), width))
    k = len(sides[0].rounds)
    # float32 for the (sides x compositions x support) work: counts and probabilities need no
    # more, and it halves the memory traffic that dominates the cost.
    F = np.ones((len(sides), k, width), dtype=np.float32)
    n = np.empty((len(sides), k), dtype=np.float32)
    for i, (s, g) in enumerate(zip(sides, supports, strict=True)):
        grid[i, : g.size] = g
        grid[i, g.size :] = g[-1]
        for r, samples in enumerate(s.rounds):
            F[i, r, : g.size] = np.searchsorted(samples, g, side="right") / samples.size
            n[i, r] = samples.size
    draws = counts.astype(np.float32)[None, :, :] * n[:, None, :]  # (S, M, k): drawn per round
    total = draws.sum(axis=2)[..., None]  # (S, M, 1)
    mu = np.matmul(draws, F)  # (S, M, U): expected number of resampled values <= x
    sd = np.sqrt(np.matmul(draws, F * (1.0 - F)))
    ranks = [total / 2.0 + 0.5] if one_law else [np.floor((total + 1) / 2), np.floor(total / 2) + 1]
    w = weights.astype(np.float32)
    cdfs = []
    for m in ranks:
        # P(m-th smallest <= x) = P(count >= m) ~ Phi((mu - m + 1/2) / sd).  Where sd = 0 the
        # count is exactly mu, an integer, so the gap is +-1/2 or more and z is +-inf.
        z = mu - (m - 0.5)
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(z, sd, out=z)
        cdf = np.maximum.accumulate(np.matmul(w, _normal_cdf(z)).astype(np.float64), axis=1)
        cdfs.append(cdf / cdf[:, -1:])
    return grid, cdfs[0], cdfs[1] if len(cdfs) > 1 else None


def _normal_cdf(z: NDArray[np.float32]) -> NDArray[np.float32]:
    """Phi(z) to within 1.5e-4 (Bowling et al. 2009: 1 / (1 + exp(-(1.5976 z + 0.07056 z^3)))).

    Three times cheaper than scipy.special.ndtr, which dominated the bootstrap's cost; the error
    is far below that of the normal approximation of the counts and of 2000-resample Monte Carlo.
    """
    t = z * z
    t *= np.float32(0.07056)
    t += np.float32(1.5976)
    t *= z
    np.negative(t, out=t)
    with np.errstate(over="ignore"):
        np.exp(t, out=t)
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    return t


def _draw_rows(grid: FloatArray, cdf: FloatArray, u: FloatArray) -> FloatArray:
    """Inverse-CDF draws, row by row: the first support value whose CDF reaches each uniform."""
    out = np.empty_like(u)
    last = grid.shape[1] - 1
    for i in range(grid.shape[0]):
        out[i] = grid[i, np.minimum(np.searchsorted(cdf[i], u[i], side="left"), last)]
    return out


def _bootstrap_medians_mc(
    rounds: Sequence[FloatArray], resamples: int, rng: np.random.Generator
) -> FloatArray:
    """Plain Monte Carlo hierarchical bootstrap of the pooled median (rounds, then samples).

    Used for rounds too small for the exact-law method, and as the reference that method is
    tested against.
    """
    k = len(rounds)
    sizes = np.array([r.size for r in rounds])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = np.concatenate(rounds)
    chosen = rng.integers(0, k, size=(resamples, k))
    n_chosen = sizes[chosen]
    n_max = int(sizes.max())
    u = rng.random((resamples, k, n_max))
    idx = offsets[chosen][..., None] + np.floor(u * n_chosen[..., None]).astype(np.int64)
    values = flat[np.minimum(idx, flat.size - 1)]
    valid = np.arange(n_max)[None, None, :] < n_chosen[..., None]
    return np.nanmedian(np.where(valid, values, np.nan).reshape(resamples, -1), axis=1)


def _seed_list(seed: Seed) -> list[int]:
    return [int(seed)] if isinstance(seed, int | np.integer) else [int(s) for s in seed]


def _bootstrap_median_draws(
    sides: Sequence[Samples], uniforms: FloatArray, seeds: Sequence[list[int]]
) -> FloatArray:
    """Bootstrap draws of each side's pooled median, one row per side, ``uniforms.shape``."""
    out = np.empty_like(uniforms)
    analytic: dict[tuple[int, bool], list[int]] = {}
    for i, s in enumerate(sides):
        if s.n == 0:
            raise ValueError("no samples to bootstrap")
        smallest = min(r.size for r in s.rounds)
        if smallest >= ANALYTIC_MIN_SAMPLES:
            analytic.setdefault((s.k, s.k * smallest >= SMALL_POOL), []).append(i)
        else:
            rng = np.random.default_rng([*seeds[i], 1])
            out[i] = _bootstrap_medians_mc(s.rounds, uniforms.shape[1], rng)
    for (k, one_law), idx in analytic.items():
        # Sampled compositions (k > 5) depend on k only, so a side's law never depends on which
        # other sides share its batch.
        counts, weights = _round_weights(k, np.random.default_rng([k, 0x5EED]))
        width = max(sides[i].n for i in idx)
        per_chunk = max(1, _CHUNK_ELEMENTS // (len(weights) * max(width, 1)))
        for start in range(0, len(idx), per_chunk):
            chunk = idx[start : start + per_chunk]
            grid, lo, hi = _median_laws([sides[i] for i in chunk], counts, weights, one_law=one_law)
            u = uniforms[chunk]
            drawn = _draw_rows(grid, lo, u)
            out[chunk] = drawn if hi is None else 0.5 * (drawn + _draw_rows(grid, hi, u))
    return out


def bootstrap_ratio_cis(
    pairs: Sequence[tuple[Samples, Samples]],
    directions: Sequence[Direction] | Direction = "lower",
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seeds: Sequence[Seed] | None = None,
) -> FloatArray:
    """Percentile intervals of the oriented ratio of medians for many (base, head) pairs.

    Returns an array (len(pairs), 2) of (low, high).  Pair i's interval depends only on its own
    data and ``seeds[i]`` (default: its index), never on the other pairs, so one benchmark gets
    the same interval alone or inside a suite.  See :func:`bootstrap_ratio_ci`.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), not {confidence}")
    if resamples < 10:
        raise ValueError(f"resamples must be >= 10, not {resamples}")
    n = len(pairs)
    dirs = [directions] * n if isinstance(directions, str) else list(directions)
    for d in dirs:
        check_direction(d)
    seed_lists = [_seed_list(s) for s in (seeds if seeds is not None else range(n))]
    if len(seed_lists) != n or len(dirs) != n:
        raise ValueError("one seed and one direction per pair")
    if n == 0:
        return np.empty((0, 2))
    # Stratified uniforms (one per 1/resamples slice, in increasing order so the inverse-CDF
    # search runs over sorted keys) steady the interval ends.  The base draws are then put in a
    # fixed random order so that base and head draws are paired independently; the order is the
    # same for every pair (it depends on nothing but ``resamples``), which leaves each pair's
    # interval its own and saves a per-pair shuffle.
    slots = np.arange(resamples)
    base_u = np.empty((n, resamples))
    head_u = np.empty((n, resamples))
    for i, s in enumerate(seed_lists):
        jitter = np.random.default_rng(s).random((2, resamples))
        base_u[i] = (slots + jitter[0]) / resamples
        head_u[i] = (slots + jitter[1]) / resamples
    order = np.random.default_rng(resamples).permutation(resamples)
    b = _bootstrap_median_draws([p[0] for p in pairs], base_u, [[*s, 10] for s in seed_lists])[:, order]
    h = _bootstrap_median_draws([p[1] for p in pairs], head_u, [[*s, 20] for s in seed_lists])
    lower = np.array([d == "lower" for d in dirs])
    num = h if lower.all() else np.where(lower[:, None], h, b)
    den = b if lower.all() else np.where(lower[:, None], b, h)
    ratios = safe_ratio(num, den) if (den == 0).any() else num / den
    # Percentile interval ("inverted CDF": the smallest draw whose empirical CDF reaches the tail).
    tail = (1.0 - confidence) / 2.0
    ranks = [max(0, math.ceil(tail * resamples) - 1), max(0, math.ceil((1.0 - tail) * resamples) - 1)]
    ratios.partition(ranks, axis=1)
    return np.ascontiguousarray(ratios[:, ranks])


def bootstrap_ratio_ci(
    base_rounds: Iterable[ArrayLike] | Samples,
    head_rounds: Iterable[ArrayLike] | Samples,
    direction: Direction = "lower",
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: Seed = 0,
) -> tuple[float, float]:
    """Percentile ``confidence`` interval of the oriented ratio of medians R (> 1 = worse).

    Hierarchical: each side's rounds are resampled, then the samples inside each drawn round, so
    the process-to-process variance (the dominant term on a GPU) is part of the interval
    (gpu_timing.md §6.2, after Kalibera & Jones).  With one round a side only the within-process
    variance is seen and the interval is too narrow for a comparison across processes; that is
    why a suspect is re-measured over several interleaved rounds.  Deterministic for a given
    ``seed``.
    """
    b = base_rounds if isinstance(base_rounds, Samples) else Samples.of(base_rounds)
    h = head_rounds if isinstance(head_rounds, Samples) else Samples.of(head_rounds)
    lo, hi = bootstrap_ratio_cis(
        [(b, h)], direction, confidence=confidence, resamples=resamples, seeds=[seed]
    )[0]
    return float(lo), float(hi)
