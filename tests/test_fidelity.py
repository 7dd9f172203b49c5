"""Issue 26 on the CPU: measuring does not change what is measured.

- A fallback inside a round (the guarded package warns that it switched path) fails that case,
  and no number of the other path is stored under its name.
- ``perfguard fidelity``: the work counts of every case of a full ``quick`` round equal those of
  the case measured alone in a fresh process (the real repository's nine implementations).
- The work counter counts a higher-order op (FlexAttention, eager on the CPU) as one op with its
  registered FLOPs, and is transparent to ``torch.compile``.
- Path fingerprints: base against HEAD, a changed path is found, the same path is not.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from sqlalchemy import create_engine, text

from perfguard.compare.paths import path_changes
from perfguard.engine.work import dispatch_counts
from perfguard.fidelity import compare_alone, sample_cases
from perfguard.store.records import ResultRecord
from tests.helpers.project import ROOT, git, perfguard, project_repo, tracked_files

#: dilated switches to a slower path for the rest of the process the first time it runs under a
#: dispatch mode, and says so with a RuntimeWarning: the sticky fallback of issue 26, in miniature.
STICKY = """

# --- tests/test_fidelity.py: a fallback that a counting pass makes sticky ---
import warnings as _sticky_warnings

from torch.utils._python_dispatch import _get_current_dispatch_mode as _sticky_mode

_sticky_build = ImplSpec.build
_sticky_state = {"switched": False}


def _sticky(self, *args, **kwargs):
    module = _sticky_build(self, *args, **kwargs)
    if self.name == "dilated":
        forward = module.forward

        def switching(*a, **k):
            if _sticky_mode() is not None and not _sticky_state["switched"]:
                _sticky_state["switched"] = True
                _sticky_warnings.warn("dilated: the fast path failed under a mode; using the slow path "
                                      "for the rest of the process", RuntimeWarning, stacklevel=2)
            if _sticky_state["switched"]:
                forward(*a, **k)
            return forward(*a, **k)

        module.forward = switching
    return module


ImplSpec.build = _sticky
"""


def test_a_fallback_inside_a_round_fails_its_case_and_stores_no_number_of_the_other_path(
    tmp_path: Path,
) -> None:
    repo = project_repo(tmp_path / "project")
    with (repo / "attention" / "registry.py").open("a") as fh:
        fh.write(STICKY)
    git(repo, "commit", "-qam", "sticky fallback")
    db = f"sqlite:///{tmp_path / 'history.db'}"
    bench = r"(Forward\.track_time|Work\.track_forward_(flops|ops))\('(dilated|improved)', 512,"
    result = perfguard(repo, "run", "--bench", bench, "--rounds", "1", db=db)
    assert result.returncode == 1, result.stdout + result.stderr
    engine = create_engine(db)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT benchmark, impl, status, error FROM results")).all()
    engine.dispose()
    dilated = {b.split(".", 1)[1]: (s, e) for b, i, s, e in rows if i == "dilated"}
    improved = {b.split(".", 1)[1]: s for b, i, s, e in rows if i == "improved"}
    # the first pass under the counting mode saw the switch: that benchmark fails with the message
    status, error = dilated["Work.track_forward_flops"]
    assert status == "failed" and "switched to another path" in error and "slow path" in error
    # every later benchmark of the case would measure the slow path: they fail too, saying why
    for name in ("Work.track_forward_ops", "Forward.track_time"):
        status, error = dilated[name]
        assert status == "failed" and "an earlier benchmark of this case" in error, (name, error)
    assert set(improved.values()) == {"ok"}, improved


def _full_repo(path: Path) -> Path:
    """This repository's tracked files (all nine implementations) as a git repository."""
    for name in tracked_files():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, path / name)
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return path


@pytest.mark.slow
def test_work_counts_of_every_case_of_a_full_quick_round_equal_the_case_alone(tmp_path: Path) -> None:
    repo = _full_repo(tmp_path / "project")
    out = tmp_path / "fidelity.json"
    result = perfguard(repo, "fidelity", "--profile", "quick", "--bench", r"Work\.track_forward",
                       "--json", str(out), db=f"sqlite:///{tmp_path / 'h.db'}")  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(out.read_text())
    from attention.registry import names

    assert document["cases"] == document["cases_in_round"] == 2 * len(names())  # 512 and 1024 tokens
    counted = [r for r in document["rows"] if r["metric"] in ("flops", "ops", "allocated")]
    assert len(counted) == 6 * document["cases"]  # forward and forward+backward
    assert all(r["agree"] is True and r["in_round"] == r["alone"] for r in counted), [
        r for r in counted if not r["agree"]
    ]


def test_sample_cases_spreads_deterministically() -> None:
    cases = [(f"impl{i}", f"seq_len={n}") for i in range(3) for n in (1, 2, 3)]
    assert sample_cases(cases, 0) == sorted(cases)
    assert sample_cases(cases, 3) == [("impl0", "seq_len=1"), ("impl1", "seq_len=1"), ("impl2", "seq_len=1")]
    assert sample_cases(cases, 3) == sample_cases(list(reversed(cases)), 3)
    assert sample_cases(cases, 99) == sorted(cases)


def test_the_work_counter_counts_an_eager_higher_order_op_as_one_op_with_its_flops() -> None:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q, k, v = (torch.randn(1, 2, 128, 16) for _ in range(3))
    mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, 1, 1, 128, 128, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # eager flex warns that it is not compiled
        counts = dispatch_counts(lambda: flex_attention(q, k, v, block_mask=mask))
    # the attention is one op, run as it is; its Python wrapper may dispatch a scalar or two (which
    # ones depends on what this process compiled before), never the dense math inside it
    assert counts.op_counts["higher_order::flex_attention"] == 1, counts.op_counts
    assert not [op for op in counts.op_counts if "bmm" in op or "softmax" in op or "matmul" in op]
    assert counts.flops == 4 * 1 * 2 * 128 * 128 * 16  # the registry's SDPA formula: 4·b·h·n²·d
    assert counts.allocated_bytes > 0


def _result(impl: str, benchmark: str, digest: str, names: list[str]) -> SimpleNamespace:
    path = {"kind": "CUDA kernels", "digest": digest, "names": names}
    return SimpleNamespace(impl=impl, params_key="seq_len=16384", benchmark=benchmark, status="ok",
                           info={"path": path})  # fmt: skip


def test_path_changes_name_what_left_and_what_came_and_nothing_else() -> None:
    flex, gather = ["triton_tem_fused_flex_attention_0"], ["index_select_kernel", "mm_kernel"]
    base = [
        [_result("bs", "Forward.track_time", "a", flex), _result("ring", "Forward.track_time", "r", ["k"])]
    ]
    head = [
        [_result("bs", "Forward.track_time", "b", gather), _result("ring", "Forward.track_time", "r", ["k"])]
    ]
    (entry,) = path_changes(base, head)
    assert entry.impl == "bs" and list(entry.removed) == flex and list(entry.added) == gather
    assert entry.varies == ()
    assert path_changes(base, base) == []


def test_a_path_that_differs_between_rounds_of_one_side_is_said() -> None:
    base = [
        [_result("bs", "Forward.track_time", "a", ["x"])],
        [_result("bs", "Forward.track_time", "b", ["y"])],
    ]
    head = [[_result("bs", "Forward.track_time", "a", ["x"])]]
    (entry,) = path_changes(base, head)
    assert entry.varies == ("base",) and entry.base == ("a", "b")


def _error_result(value: float) -> ResultRecord:
    return ResultRecord(
        benchmark="bench_attention.Accuracy.track_q_error",
        impl="ring",
        params={"impl": "ring", "seq_len": 4096, "dtype": "bfloat16"},
        metric="error",
        unit="relative error",
        direction="lower",
        gated=True,
        value=value,
    )


def test_an_error_that_repeats_within_its_gpu_spread_agrees_and_one_beyond_it_differs() -> None:
    """On an H200 the q gradient's error of two processes differed by up to 7.5e-6 relative (dq is
    accumulated with atomic adds): that is the same number; a path that moves it 0.1% is not."""
    a = 0.005291586854737052
    same = compare_alone(_error_result(a), _error_result(0.005291547071923167), None)
    assert same.agree is True and "repeat tolerance" in same.why
    assert compare_alone(_error_result(a), _error_result(a), None).agree is True
    moved = compare_alone(_error_result(a), _error_result(a * 1.001), None)
    assert moved.agree is False and moved.why == "an exact number that differs"
