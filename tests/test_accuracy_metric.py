"""Accuracy as a gated metric (issue 31): a change that makes ``improved`` ten times less exact, still
inside ``perfguard verify``'s tolerance, fails ``perfguard check`` through the accuracy metric, causal
and not; a comment-only change passes with every accuracy ratio exactly 1.

The project is a full copy of this checkout (every implementation; on ``main`` ``dilated`` declares
no causal mode, :data:`NO_CAUSAL`), main recorded with the accuracy benchmarks only at 512 tokens,
then two branches checked against it:

- ``less-exact``: ``ImprovedDilatedAttention.forward`` adds seeded noise at 4.5e-6 of the output's
  mean magnitude (its float32 error on the CPU is ~3.5e-7: about 10x), so the core and the
  multihead module built on it get less exact, and nothing else does;
- ``comment``: a comment in ``attention/improved.py``.

The reference (perfguard's own, which ``verify`` uses too) is checked against the independent one of
``attention.reference`` (all heads at once, autograd's backward) to 1e-12, on the declared pattern
and on the declared causal pattern.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from attention.reference import multihead_reference, reference_attention
from perfguard import profiles
from perfguard.config import ACCURACY_FLOORS, parse_config
from perfguard.engine import accuracy, cases
from tests.helpers.project import add_branches, append_commit, check_branch, perfguard, project_repo

#: The accuracy benchmarks of the implementations the plant reaches, and of one it does not.
ACCURACY = r"Accuracy\.track_\w+\('(improved|multihead_improved|dilated)', 512,"

LESS_EXACT = """

# --- tests/test_accuracy_metric.py: ten times less exact, still inside verify's tolerance ---
_exact_forward = ImprovedDilatedAttention.forward


def _less_exact_forward(self, *args, **kwargs):
    import torch

    out = _exact_forward(self, *args, **kwargs)
    noise = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(out.device, out.dtype)
    return out + 4.5e-6 * out.detach().abs().mean() * noise


ImprovedDilatedAttention.forward = _less_exact_forward
"""

#: ``dilated`` declares no causal mode: its causal accuracy benchmarks are skipped, not failed.
NO_CAUSAL = """

# --- tests/test_accuracy_metric.py: dilated declares no causal mode ---
import dataclasses as _fixture_dataclasses
import types as _fixture_types

REGISTRY = _fixture_types.MappingProxyType(
    {**REGISTRY, "dilated": _fixture_dataclasses.replace(REGISTRY["dilated"], supports_causal=False)}
)
"""

Project = tuple[Path, str]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    repo = tmp_path_factory.mktemp("accuracy") / "repo"
    repo = project_repo(repo, trim=False)
    append_commit(repo, "attention/registry.py", NO_CAUSAL, "dilated declares no causal mode")
    module = "attention/improved.py"
    add_branches(repo, {"less-exact": [(module, LESS_EXACT)], "comment": [(module, "\n# A comment.\n")]})
    db = repo.parent / "main.db"
    recorded = perfguard(repo, "run", "--bench", ACCURACY, "--rounds", "1", db=f"sqlite:///{db}")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    return repo, str(db)


def _check(project: Project, tmp_path: Path, branch: str) -> tuple[int, dict[str, Any], str]:
    return check_branch(*project, tmp_path, branch, ACCURACY)


def _accuracy_items(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in document["items"] if i["metric"] == "error"]


@pytest.mark.slow
def test_ten_times_less_exact_fails_the_check_through_accuracy(project: Project, tmp_path: Path) -> None:
    code, document, output = _check(project, tmp_path, "less-exact")
    assert code == 1, output
    regressions = [i for i in document["items"] if i["verdict"] == "regression"]
    assert regressions, output
    assert {i["metric"] for i in regressions} == {"error"}
    assert {i["impl"] for i in regressions} == {"improved", "multihead_improved"}
    # the output got less exact, causal and not (the plant adds noise after the call; the
    # gradients pass through)
    assert {i["benchmark"].rsplit(".", 1)[-1] for i in regressions} == {
        "track_output_error",
        "track_output_error_causal",
    }
    for item in regressions:
        assert 5.0 < item["ratio"] < 20.0, item
        assert item["head_value"] < 1e-5  # still inside verify's float32 CPU tolerance
        assert "output error" in item["reason"] and "less exact" in item["reason"]
    assert "causal output error" in output
    # dilated does not import attention/improved.py: not measured
    assert "dilated" in {i["impl"] for i in document["items"] if i["verdict"] == "not affected"}
    assert "output error" in output


@pytest.mark.slow
def test_a_comment_only_change_passes_with_accuracy_ratios_of_one(project: Project, tmp_path: Path) -> None:
    code, document, output = _check(project, tmp_path, "comment")
    assert code == 0, output
    measured = [i for i in _accuracy_items(document) if i["verdict"] != "not affected"]
    assert {i["impl"] for i in measured} == {"improved", "multihead_improved"}
    assert len(measured) == 2 * 8  # output, q, k, v of both, causal and not
    assert all(i["verdict"] == "unchanged" and i["ratio"] == 1.0 for i in measured), measured


@pytest.mark.parametrize("block_rows", [2048, 96], ids=["one-block", "blocks"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("impl", ["improved", "multihead_improved", "block_sparse_ring"])
def test_the_reference_agrees_with_an_independent_one_and_errors_repeat_exactly(
    impl: str, causal: bool, block_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also in blocks of 96 query rows over the key columns they reach (perfguard's own constant
    made small: 512 tokens are one block at the production size)."""
    monkeypatch.setattr(accuracy, "BLOCK_ROWS", block_rows)
    case = cases.build(impl, 512, "float32", "cpu", profiles.PROFILES["quick"])
    counts = accuracy._pattern(case, causal, case.seq_len)
    if causal:
        # the causal reference is the declared causal pattern: the non-causal one, each segment's
        # kept positions seeing only the earlier ones (here: its lower triangle), nothing later
        assert torch.equal(counts, accuracy._pattern(case, False, case.seq_len).tril())
    leaves = tuple(t.detach().to(torch.float64).requires_grad_(True) for t in case.inputs)
    ours = accuracy.reference(case.module, case.multihead, leaves, counts)
    grad = torch.randn(ours.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    our_grads = torch.autograd.grad(ours, leaves, grad)
    # an independent implementation: attention.reference, all heads at once, autograd's backward
    theirs_leaves = tuple(t.detach().to(torch.float64).requires_grad_(True) for t in case.inputs)
    if case.multihead:
        theirs = multihead_reference(case.module, *theirs_leaves, counts=counts)
    else:
        scale = getattr(case.module, "softmax_scale", None)
        theirs = reference_attention(*theirs_leaves, counts, softmax_scale=scale)
    their_grads = torch.autograd.grad(theirs, theirs_leaves, grad)
    assert float((ours - theirs).abs().max()) < 1e-12
    for a, b in zip(our_grads, their_grads, strict=True):
        assert float((a - b).abs().max()) < 1e-12
    first, second = accuracy.measure(case, causal=causal), accuracy.measure(case, causal=causal)
    assert first.relative == second.relative  # same inputs, same kernels: the same numbers
    assert set(first.relative) == set(accuracy.TENSORS)
    # float32 rounding: the call was causal when the reference was (else the error would be O(1))
    assert all(0 < e < 1e-5 and math.isfinite(e) for e in first.relative.values()), first.relative
    if causal:
        assert first.pattern_density < accuracy.measure(case).pattern_density


@pytest.mark.slow
def test_causal_errors_are_recorded_for_implementations_that_declare_causal_support(project: Project) -> None:
    """The recording of main: every accuracy benchmark of improved and multihead_improved, causal and
    not; dilated (``supports_causal=False`` on this main) gets no causal error: skipped, with why."""
    import json
    import sqlite3

    with sqlite3.connect(project[1]) as conn:
        found = conn.execute(
            "SELECT r.benchmark, r.params, r.status, r.error, d.info FROM results r "
            "JOIN result_data d ON d.result_id = r.id WHERE r.benchmark LIKE '%Accuracy%'"
        ).fetchall()
    causal = {f"track_{t}_error_causal" for t in accuracy.TENSORS}
    by_impl: dict[str, dict[str, tuple[str, str | None, dict[str, Any]]]] = {}
    for benchmark, params, status, error, info in found:
        name = benchmark.rsplit(".", 1)[1]
        by_impl.setdefault(json.loads(params)["impl"], {})[name] = (status, error, json.loads(info or "{}"))
    assert set(by_impl) == {"improved", "multihead_improved", "dilated"}
    for impl, results in by_impl.items():
        assert len(results) == 8, (impl, sorted(results))
        for name, (status, error, info) in results.items():
            if impl == "dilated" and name in causal:
                assert status == "skipped" and "declares no causal mode" in (error or ""), (name, error)
            else:
                assert status == "ok", (impl, name, error)
                assert info["causal"] == (name in causal) and 0 < info["max_abs"] < 1e-4


def test_the_accuracy_settings_are_read_and_checked() -> None:
    config = parse_config({"accuracy_threshold": 0.5, "accuracy_floor": 1e-6})
    assert config.rule_for("improved", "bench_attention.Accuracy.track_q_error", "error").threshold == 0.5
    assert config.accuracy_floor_for("bfloat16") == 1e-6
    defaults = parse_config({})
    assert defaults.rule_for("improved", "x", "error").threshold == 1.0  # a doubled error
    assert defaults.accuracy_floor_for("bfloat16") == ACCURACY_FLOORS["bfloat16"] == 2.0**-9
    with pytest.raises(Exception, match="accuracy_floor"):
        parse_config({"accuracy_floor": 0})


def test_every_accuracy_benchmark_has_the_same_name_in_verdict_reasons_and_reports() -> None:
    """The reason of a causal accuracy regression names it in words ("causal output error ... less
    exact"), as the report's columns do, not as ``Accuracy.track_output_error_causal (error)``."""
    from perfguard.compare.model import describe
    from perfguard.engine.suite import kind_of
    from perfguard.report.formatting import metric_label

    names = [f"Accuracy.track_{t}_error{c}" for t in accuracy.TENSORS for c in ("", "_causal")]
    for name in names:
        for suite in ("bench_attention", "bench_distributed"):
            assert kind_of(f"{suite}.{name}", None).metric == "error"
            assert describe(f"{suite}.{name}", "error") == metric_label(f"{suite}.{name}")
        assert metric_label(name).endswith("error") and "track" not in metric_label(name)
    assert describe("Accuracy.track_output_error_causal", "error") == "causal output error"


def test_implementations_of_one_function_share_one_reference_and_get_the_same_errors() -> None:
    """dilated and improved declare the same pattern on the same inputs: the second one's accuracy
    pass reuses the first one's float64 reference (perfguard.engine.reference_cache), and its errors
    are bit for bit those of a recomputed reference; block_sparse_ring's pattern, a causal pattern,
    another length and a multihead module with other weights each get their own."""
    from perfguard.engine import reference_cache

    quick = profiles.PROFILES["quick"]
    dilated, improved = (cases.build(i, 512, "float32", "cpu", quick) for i in ("dilated", "improved"))
    cache = reference_cache.REFERENCES
    cache.clear()
    hits = cache.hits
    accuracy.measure(dilated)
    shared = accuracy.measure(improved)
    assert cache.hits == hits + 1
    cache.clear()
    recomputed = accuracy.measure(improved)
    assert (
        cache.hits == hits + 1
        and shared.relative == recomputed.relative
        and shared.max_abs == recomputed.max_abs
    )
    for other in (
        (cases.build("block_sparse_ring", 512, "float32", "cpu", quick), {}),
        (improved, {"causal": True}),
        (cases.build("improved", 1024, "float32", "cpu", quick), {}),
    ):
        accuracy.measure(other[0], **other[1])
        assert cache.hits == hits + 1, other
    multihead = cases.build("multihead_improved", 512, "float32", "cpu", quick)
    accuracy.measure(multihead)
    with torch.no_grad():
        multihead.module.out_proj.weight.mul_(1.5)  # other weights, other function: not the stored one
    changed = accuracy.measure(multihead)
    cache.clear()
    assert cache.hits == hits + 1 and changed.relative == accuracy.measure(multihead).relative


def test_the_pattern_fingerprint_tells_patterns_apart_that_a_linear_sum_would_not() -> None:
    """Two patterns that differ by a count moved d positions on, twice in opposite directions, have
    equal position-weighted sums; their fingerprints differ, equal patterns' are equal."""
    from perfguard.engine.reference_cache import fingerprint

    base = torch.zeros(2, 64, 64, dtype=torch.int32)
    base[:, torch.arange(64), torch.arange(64)] = 1
    moved = base.clone()
    moved[1].view(-1)[[10, 11, 500, 501]] += torch.tensor([-1, 1, 1, -1], dtype=torch.int32)
    weights = torch.arange(64 * 64)
    assert int((base[1].reshape(-1) * weights).sum()) == int((moved[1].reshape(-1) * weights).sum())
    assert fingerprint(base)[0] == fingerprint(moved)[0] and fingerprint(base)[1] != fingerprint(moved)[1]
    assert fingerprint(base) == fingerprint(base.clone()) and fingerprint(base.float()) != fingerprint(
        moved.float()
    )


@pytest.mark.parametrize("shape", [(3, 64, 64), (2, 40, 72), (1, 8, 8)])
def test_the_gemm_fingerprint_tells_every_single_count_change_apart(shape: tuple[int, int, int]) -> None:
    """Patterns of counts 0..127 on multiples of 8 take the int8 matrix-product path: equal patterns
    (of any integer dtype) get equal fingerprints, and raising, lowering or moving any one count —
    every position of the head, each a different pattern — changes the head's fingerprint."""
    from perfguard.engine.reference_cache import _gemm_fits, fingerprint

    g = torch.Generator().manual_seed(5)
    base = torch.randint(0, 4, shape, generator=g, dtype=torch.int32)
    assert _gemm_fits(base[0]) and not _gemm_fits(base[0].float()) and not _gemm_fits(base[0] - 1)
    want = fingerprint(base)
    assert all(kind == "gemm" for kind, _ in want)
    assert (
        want
        == fingerprint(base.clone())
        == fingerprint(base.to(torch.int64))
        == fingerprint(base.to(torch.uint8))
    )
    last = base.shape[0] - 1
    seen, tried = {want[last]}, 0
    for i in range(base[last].numel()):
        for delta in (1, -1):
            changed = base.clone()
            flat = changed[last].view(-1)
            if flat[i] + delta < 0:
                continue
            flat[i] += delta
            tried += 1
            got = fingerprint(changed)
            assert got[:last] == want[:last] and got[last] != want[last]
            seen.add(got[last])
    assert len(seen) == tried + 1  # every changed pattern a value of its own
    ones = torch.ones(shape, dtype=torch.int32)
    assert fingerprint(ones)[0] != fingerprint(ones.to(torch.bool).logical_not().to(torch.int32))[0]
    assert fingerprint(ones.to(torch.bool)) == fingerprint(ones)


def test_reference_blocks_read_only_the_key_columns_their_rows_reach() -> None:
    """A causal pattern's row blocks stop at their last row; a band's start at their first key; a
    block whose rows have no keys at all is empty (its output rows are 0)."""
    n = 10
    causal = torch.ones(n, n, dtype=torch.int32).tril()
    band = torch.zeros(n, n, dtype=torch.int32)
    for i in range(n):
        band[i, max(0, i - 2) : i + 1] = 1
    band[8:] = 0
    old, accuracy.BLOCK_ROWS = accuracy.BLOCK_ROWS, 4
    try:
        assert [b[:4] for b in accuracy._blocks(causal)] == [(0, 4, 0, 4), (4, 8, 0, 8), (8, 10, 0, 10)]
        assert all(b.keyless is None for b in accuracy._blocks(causal))
        banded = accuracy._blocks(band)
        assert [b[:4] for b in banded] == [(0, 4, 0, 4), (4, 8, 2, 8), (8, 10, 0, 0)]
        assert banded[0].keyless is None and banded[1].keyless is None
        assert banded[2].keyless is not None and banded[2].keyless.tolist() == [True, True]
        q, k, v = (torch.randn(1, n, 1, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(i))
                   for i in range(3))  # fmt: skip
        out = accuracy._HeadwiseAttention.apply(q, k, v, band[None], None)
        assert torch.equal(out[0, 8:], torch.zeros(2, 1, 4, dtype=torch.float64))
        scores = (q[0, :, 0] @ k[0, :, 0].T / 2.0).masked_fill(band == 0, -math.inf)
        want = torch.nan_to_num(torch.softmax(scores, dim=-1)) @ v[0, :, 0]
        torch.testing.assert_close(out[0, :, 0], want, rtol=1e-13, atol=1e-13)
    finally:
        accuracy.BLOCK_ROWS = old


def test_a_pattern_with_a_negative_count_is_refused_not_read_as_another_count() -> None:
    """Counts are multiplicities: a -1 beside positive counts must not index the log table from its end."""
    counts = torch.ones(1, 8, 8, dtype=torch.int32)
    counts[0, 3, 5] = -1
    q, k, v = (torch.randn(1, 8, 1, 4, dtype=torch.float64) for _ in range(3))
    with pytest.raises(ValueError, match="negative count"):
        accuracy._HeadwiseAttention.apply(q, k, v, counts, None)
