"""perfguard.verify in-process: every check on implementations that are right, and wrong in known ways.

The implementations are real modules (tests/verify_doubles.py), run through the real checks
against the real float64 reference; nothing of perfguard's is mocked.  The subprocess tests of
the CLI are in test_verify_cli.py.
"""

from __future__ import annotations

import json
from functools import cache
from typing import ClassVar

import pytest
import torch
import verify_doubles as doubles

from attention.registry import REGISTRY
from perfguard.errors import UsageError
from perfguard.verify import CHECKS, SCHEMA, plan, probes, run_verify
from perfguard.verify.results import RowResult
from perfguard.verify.shared import RunCache


@cache
def _row(name: str, seq_len: int | None = None) -> RowResult:
    """One double's row (cached: several tests read the same row; the checks are deterministic)."""
    report = run_verify(doubles.ALL, impls=[name], device="cpu", seq_len=seq_len)
    assert len(report.rows) == 1
    return report.rows[0]


def _status(row: RowResult) -> dict[str, str]:
    return {name: check.status for name, check in row.checks.items()}


# --------------------------------------------------------------------------- the pass path


@pytest.mark.parametrize("name", ["good_core", "good_multihead"])
def test_correct_implementations_pass_every_check(name: str) -> None:
    row = _row(name)
    assert _status(row) == dict.fromkeys(CHECKS, "pass"), row.to_json()["failures"]
    # both modes × causal and not, with a case outcome per case for the per-case checks
    cases = {c.case for c in row.checks["reference"].cases}
    assert cases == {f"{m}, {c}" for m in ("longnet", "head_groups") for c in ("causal", "non-causal")}
    assert {c.case for c in row.checks["build"].cases} == {"longnet", "head_groups"}
    assert row.worst_rel_err is not None and row.worst_rel_err < 1e-5
    assert row.checks["deterministic"].value == 0.0
    assert row.passed


def test_seq_len_option_changes_the_shape_checked() -> None:
    row = _row("good_core", seq_len=40)
    assert row.config["seq_len"] == 40
    assert row.passed


# --------------------------------------------------------------------------- each bug class, in process


@pytest.mark.parametrize("name", sorted(doubles.BROKEN_CASES))
def test_each_known_bug_fails_the_check_that_names_it(name: str) -> None:
    _, check = doubles.BROKEN_CASES[name]
    row = _row(name)
    assert row.checks[check].status == "fail", _status(row)
    assert not row.passed
    assert any(line.startswith(f"{check}: ") for line in row.to_json()["failures"])


def test_head_axis_bug_is_a_reference_mismatch_with_the_number() -> None:
    row = _row("broken_head_axis")
    detail = row.checks["reference"].detail
    assert detail.startswith("rel err ") and "> 1e-05" in detail and "(longnet, non-causal)" in detail
    assert row.checks["reference"].value > 0.1
    # everything structural is fine: only the numbers betray it
    for check in ("build", "forward", "backward", "shape", "return", "finite", "pattern", "same_fn"):
        assert row.checks[check].status == "pass", check


def test_tensor_instead_of_tuple_fails_only_the_return_contract() -> None:
    row = _row("broken_tensor_return")
    assert [name for name, _ in row.failures()] == ["return"]
    assert "plain Tensor" in row.checks["return"].detail


def test_unwritten_row_is_located() -> None:
    row = _row("broken_unwritten_row")
    detail = row.checks["written"].detail
    # 2 batches × 5 heads at the last position (90) of 2 × 91 × 5 rows
    assert detail.startswith("10 of 910 output rows left unwritten") and "position 90" in detail


def test_nan_only_in_causal_cases() -> None:
    row = _row("broken_causal_nan")
    failing = {c.case for c in row.checks["finite"].cases if c.status == "fail"}
    assert failing == {"longnet, causal", "head_groups, causal"}


def test_swapped_arguments_are_caught_by_the_pattern_comparison() -> None:
    row = _row("broken_swapped_args")
    assert row.checks["same_fn"].status == "fail"
    assert "differs from perfguard.engine.dilation.dilated_pattern" in row.checks["same_fn"].detail
    # the module is honest about what it computes, so the reference alone would not catch it
    assert row.checks["reference"].status == "pass"


def test_a_lying_pattern_fails_the_reference_and_a_sneaked_in_pattern_fails_same_fn() -> None:
    lying = _row("lying_pattern")
    assert lying.checks["same_fn"].status == "pass" and lying.checks["reference"].status == "fail"
    sneak = _row("block_pattern_sneak")
    assert sneak.checks["same_fn"].status == "fail" and sneak.checks["reference"].status == "pass"


def test_own_pattern_implementations_skip_same_fn_but_still_get_a_sane_pattern_check() -> None:
    row = _row("broken_block_softmax_sum")
    assert row.checks["same_fn"].status == "n/a"
    assert row.checks["pattern"].status == "pass"
    leaky = _row("leaky_causal_pattern")
    assert leaky.checks["pattern"].status == "fail"
    assert "lets query 0 see later key 1" in leaky.checks["pattern"].detail


def test_a_block_sparse_module_that_ignores_its_sparsity_fails_the_pattern_check() -> None:
    row = _row("sparsity_ignored")
    assert row.checks["pattern"].status == "fail" and row.checks["reference"].status == "pass"
    # 91 tokens in blocks of 8: 12x12 pairs; sparsity 0.9 -> about 14 active, the window has 34
    assert row.checks["pattern"].detail == (
        "declares sparsity 0.9 (about 14 of 12x12 block pairs of 8 active) but its pattern has 34 active "
        "(0.764 skipped) (longnet, non-causal); 1 more case(s) failed"
    )


# --------------------------------------------------------------------------- isolation, determinism


def test_a_crashing_implementation_fails_build_and_the_others_still_run() -> None:
    report = run_verify(doubles.ALL, impls=["crashing", "good_core"], device="cpu")
    crashing, good = report.rows
    assert crashing.checks["build"].status == "fail"
    detail = crashing.checks["build"].detail
    assert "TypeError: __init__() got an unexpected keyword argument 'embed_dim'" in detail
    assert all(crashing.checks[c].status == "not run" for c in CHECKS if c not in ("build", "same_fn"))
    assert good.passed and not report.passed


def test_a_forward_crash_in_one_case_leaves_the_other_cases_checked() -> None:
    row = _row("causal_crash")
    forward = {c.case: c.status for c in row.checks["forward"].cases}
    assert forward["longnet, non-causal"] == "pass" and forward["longnet, causal"] == "fail"
    reference = {c.case: c.status for c in row.checks["reference"].cases}
    assert reference["head_groups, non-causal"] == "pass" and reference["head_groups, causal"] == "not run"
    assert row.checks["forward"].detail.startswith("RuntimeError: causal masking not implemented")


def test_nondeterminism_within_tolerance_is_reported_as_a_number() -> None:
    row = _row("jitter")
    det = row.checks["deterministic"]
    assert det.status == "pass" and det.value is not None and 0 < det.value <= 1e-5
    big = _row("big_jitter")
    assert big.checks["deterministic"].status == "fail"
    assert big.checks["deterministic"].detail.startswith("two identical runs differ: rel err")


class PrecisionChangingCore(doubles.GoodCore):
    """Switches float32 matmuls to reduced precision globally, as DarcStar's 'improved' did with TF32."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        torch.set_float32_matmul_precision("medium")


def test_global_numerics_changes_are_noted_and_undone() -> None:
    spec = doubles.entry_for("precision", PrecisionChangingCore, same_function_as="dilated")
    report = run_verify({**doubles.ROOTS, "precision": spec}, impls=["precision"], device="cpu")
    assert any("float32_matmul_precision 'highest' -> 'medium'" in n for n in report.rows[0].notes)
    assert torch.get_float32_matmul_precision() == "highest"
    assert report.settings["float32_matmul_precision"] == "highest"


# --------------------------------------------------------------------------- what rows share


def test_expected_patterns_are_built_once_per_case_and_shared_across_rows() -> None:
    cache = RunCache()
    report = run_verify(
        doubles.ALL, impls=["good_core", "jitter", "good_multihead"], device="cpu", cache=cache
    )
    assert report.passed, [r.to_json()["failures"] for r in report.rows]
    # one build per mode × causal flag (same configuration, seq_len and heads), then only lookups
    assert (cache.patterns.builds, cache.patterns.hits) == (4, 8)
    # core and multihead inputs differ in shape: one draw each, reused by the other cases
    assert cache.inputs.builds == 2 and cache.inputs.hits == 10
    assert len(cache.patterns) == 0 and len(cache.inputs) == 0  # emptied at the end of the run


def test_a_shared_expected_pattern_never_hides_an_implementation_that_differs() -> None:
    """Each implementation's own pattern is compared in full, whatever ran before it."""
    report = run_verify(
        doubles.ALL,
        impls=["good_core", "block_pattern_sneak", "lying_pattern", "good_multihead", "broken_swapped_args"],
        device="cpu",
    )
    rows = {r.impl: r for r in report.rows}
    assert rows["good_core"].passed and rows["good_multihead"].passed
    assert rows["block_pattern_sneak"].checks["same_fn"].status == "fail"
    assert rows["broken_swapped_args"].checks["same_fn"].status == "fail"
    lying = rows["lying_pattern"]
    assert lying.checks["same_fn"].status == "pass" and lying.checks["reference"].status == "fail"


class DeviceRecordingCore(doubles.GoodCore):
    """Declares its pattern with the contract's ``device=`` keyword and records what it was asked."""

    asked: ClassVar[list[object]] = []

    def attention_pattern(
        self,
        seq_len: int,
        is_causal: bool = False,
        *,
        num_heads: int | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        DeviceRecordingCore.asked.append(device)
        return super().attention_pattern(seq_len, is_causal, num_heads=num_heads).to(device)


def test_a_root_the_registry_leaves_out_is_said_not_guessed() -> None:
    """Which pattern ``same_function_as`` holds an entry to comes from the registry, never from a name
    perfguard knows: without its root the check is not applicable, and says why."""
    spec = doubles.entry_for("alone", doubles.GoodCore, same_function_as="dilated")
    row = run_verify({"alone": spec}, device="cpu").rows[0]
    assert row.checks["same_fn"].status == "n/a"
    assert (
        row.checks["same_fn"].not_applicable
        == "same_function_as names dilated, which this registry leaves out"
    )
    assert row.checks["reference"].status == "pass"


def test_patterns_are_asked_for_on_the_rows_device() -> None:
    DeviceRecordingCore.asked.clear()
    spec = doubles.entry_for("recording", DeviceRecordingCore, same_function_as="dilated")
    report = run_verify({**doubles.ROOTS, "recording": spec}, impls=["recording"], device="cpu")
    assert report.passed and report.rows[0].checks["same_fn"].status == "pass"
    # verify asks once per case, on the row's device (the double's own forward asks without one)
    assert [d for d in DeviceRecordingCore.asked if d is not None] == ["cpu"] * 4
    # a module written before the keyword (GoodCore) still works: its pattern is moved
    core = doubles.GoodCore(segment_lengths=[8, 16, 32], dilation_rates=[1, 2, 4], num_heads=5)
    assert probes.declared_pattern(core, False, 20, 5, True, device="cpu").shape == (5, 20, 20)


def test_timing_is_split_into_verification_and_setup() -> None:
    report = run_verify(doubles.ALL, impls=["good_core"], device="cpu")
    data = report.to_json()
    assert data["seconds"] > 0 and data["setup_seconds"] == {}  # no CUDA: nothing to initialise
    assert data["results"][0]["peak_memory_bytes"] is None  # measured on CUDA rows only


# --------------------------------------------------------------------------- report data


def test_json_is_strict_and_names_every_check() -> None:
    report = run_verify(doubles.ALL, impls=["good_core", "broken_causal_nan"], device="cpu")
    data = json.loads(json.dumps(report.to_json(), allow_nan=False))
    assert data["schema"] == SCHEMA and data["passed"] is False and data["seed"] == 0
    assert list(data["checks"]) == list(CHECKS)
    good, nan = data["results"]
    assert good["passed"] and set(good["checks"]) == set(CHECKS)
    assert nan["worst_rel_err"] == "inf"
    assert nan["checks"]["finite"]["status"] == "fail"
    assert nan["checks"]["finite"]["detail"].endswith("(longnet, causal); 1 more case(s) failed")
    assert data["environment"]["devices"] == ["cpu"]


# --------------------------------------------------------------------------- planning / usage errors


def test_unknown_implementation_lists_the_known_ones() -> None:
    with pytest.raises(UsageError) as err:
        plan(REGISTRY, impls=["dilatd"])
    assert "dilatd" in err.value.message and "multihead_block_sparse_ring" in (err.value.hint or "")


def test_half_precision_on_cpu_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="bfloat16 is not verified on cpu"):
        plan(REGISTRY, device="cpu", dtypes=["bfloat16"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message when CUDA is absent")
def test_cuda_without_a_gpu_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"torch\.cuda\.is_available"):
        plan(REGISTRY, device="cuda")


def test_default_plan_is_every_implementation_in_float32_on_cpu() -> None:
    rows = plan(REGISTRY, device="cpu")
    assert [r.spec.name for r in rows] == list(REGISTRY)
    assert {r.dtype for r in rows} == {torch.float32} and {r.device for r in rows} == {"cpu"}


def test_non_positive_seq_len_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--seq-len"):
        run_verify(doubles.ALL, impls=["good_core"], seq_len=0)


# --------------------------------------------------------------------------- registry entries


def test_an_implementation_entry_builds_the_class_with_its_config() -> None:
    spec = doubles.GOOD["good_multihead"]
    module = spec.build("cpu", dtype=torch.float64, mode="head_groups")
    assert isinstance(module, doubles.GoodMultihead) and not module.training
    assert module.attention.mode == "head_groups"
    assert module.q_proj.weight.dtype == torch.float64
    assert module.embed_dim == REGISTRY["multihead_dilated"].cpu.shape.embed_dim


# --------------------------------------------------------------------------- probes


def _rows(*values: float) -> torch.Tensor:
    column = torch.tensor(values, dtype=torch.float32).reshape(1, len(values), 1)
    return column.expand(1, len(values), 4).clone()


def test_unwritten_rows_catch_zero_stale_and_poisoned_rows_only() -> None:
    ref_a, ref_b = _rows(1.0, 2.0, 3.0, 0.0), _rows(-1.0, -2.0, -3.0, 0.0)  # row 3 has no keys
    out_a, out_b = ref_a.clone(), ref_b.clone()
    assert probes.unwritten_rows(out_a, out_b, ref_a, ref_b, ("batch", "position")) is None
    stale_b = out_b.clone()
    stale_b[0, 1] = out_a[0, 1]  # unchanged when v changes (a reused buffer)
    problem = probes.unwritten_rows(out_a, stale_b, ref_a, ref_b, ("batch", "position"))
    assert problem == "1 of 4 output rows left unwritten (unchanged when v changes), e.g. batch 0, position 1"
    zero_a = out_a.clone()
    zero_a[0, 2] = 0.0
    assert "all zero" in (probes.unwritten_rows(zero_a, out_b, ref_a, ref_b, ("batch", "position")) or "")
    poisoned = out_a.clone()
    poisoned.view(torch.int32)[0, 3, 0] = 0x7FA57FA5
    problem = probes.unwritten_rows(poisoned, out_b, ref_a, ref_b, ("batch", "position"))
    assert problem is not None and "still poisoned" in problem and "position 3" in problem


def test_poisoned_allocator_block_is_a_nan_in_every_dtype() -> None:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        word = torch.full((4,), probes.POISON_WORD, dtype=torch.int16).view(dtype)
        assert torch.isnan(word).all(), dtype


def test_pattern_sanity_messages() -> None:
    good = torch.ones(2, 3, 3, dtype=torch.int32).tril()
    assert probes.pattern_problem(good, 2, 3, causal=True) is None
    assert "integer" in (probes.pattern_problem(good.float(), 2, 3, False) or "")
    wrong_shape = probes.pattern_problem(good, 2, 4, False) or ""
    assert "shape (2, 3, 3), expected (H, n, n) = (2, 4, 4)" in wrong_shape
    assert "negative" in (probes.pattern_problem(-good, 2, 3, False) or "")
    assert "attends to nothing" in (probes.pattern_problem(good * 0, 2, 3, False) or "")
    assert "later key" in (probes.pattern_problem(torch.ones(2, 3, 3, dtype=torch.int32), 2, 3, True) or "")


def test_return_contract() -> None:
    t = torch.zeros(1)
    assert probes.unwrap((t, None), multihead=True) == (t, None)
    assert probes.unwrap(t, multihead=True)[1] is not None
    assert probes.unwrap((t, t), multihead=True)[1] is not None
    assert probes.unwrap([t, None], multihead=True)[1] is not None
    assert probes.unwrap(t, multihead=False) == (t, None)
    message = probes.unwrap((t, None), multihead=False)[1]
    assert message == "returned a tuple of 2; core modules return a Tensor"


# --------------------------------------------------------------------------- CUDA (skipped without a GPU)


@pytest.mark.cuda
def test_cuda_rows_pin_tf32_off_and_catch_a_broken_ring() -> None:
    report = run_verify(
        doubles.ALL,
        impls=["good_core", "good_multihead", "broken_ring_no_lse"],
        device="cuda",
        dtypes=["bfloat16", "float32"],
    )
    rows = {(r.impl, r.dtype): r for r in report.rows}
    assert {r.device for r in report.rows} == {"cuda"} and len(rows) == 6
    for impl in ("good_core", "good_multihead"):
        for dtype in ("bfloat16", "float32"):
            row = rows[(impl, dtype)]
            assert row.passed, (impl, dtype, row.to_json()["failures"])
            assert row.config["seq_len"] == REGISTRY["dilated"].gpu.shape.seq_len
    assert rows[("good_core", "float32")].tolerance == 1e-3
    assert rows[("good_core", "bfloat16")].tolerance == 2e-2
    assert rows[("broken_ring_no_lse", "bfloat16")].checks["reference"].status == "fail"
    assert all(r.peak_memory_bytes for r in report.rows)
    assert report.setup_seconds["cuda_init"] > 0
    assert report.settings["cuda_matmul_allow_tf32"] is False
    assert report.settings["cudnn_allow_tf32"] is False
    assert report.environment["gpu"]
