"""The pieces of the distributed mode on their own: profiles, machine keys, the launch, the
communication arithmetic, how a group's death is described, and plain asv skipping the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attention._distributed import RingSchedule, ring_steps, schedule_for
from attention._plan import Call, build_pieces, chunk_bounds, chunks_connected, split_call, split_lengths
from perfguard import profiles
from perfguard.engine import communication, machine, rank_group
from perfguard.engine.rounds import _describe_group_exit
from perfguard.engine.suite import suite_labels

ROOT = Path(__file__).resolve().parents[1]

# torchrun's summary when rank 1 died of SIGSEGV and rank 0 then left (exit 3): captured from
# torch 2.13's `python -m torch.distributed.run` (its "root cause" is whichever it saw first)
TORCHRUN_SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
perfguard.engine.round_worker FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-25_03:28:22
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 24203)  (SIGSEGV)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 24203
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_03:28:22
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 3 (pid: 24202)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


# torchrun ended rank 0 before it could report the peer's death (a busy machine, 2026-11-27): its
# "Root Cause" is the rank it saw fail first, and the survivor is listed as killed by SIGTERM
TORCHRUN_SUMMARY_TERM = """\
Failures:
[1]:
  time      : 2026-11-27_18:03:28
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 4287)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 4287
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-27_18:03:28
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 4288)  (SIGSEGV)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 4288
======================================================
"""


# --- profiles ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "segments", "rates"),
    [
        (2048, [128, 512, 2048], [1, 4, 16]),
        (4096, [256, 1024, 4096], [1, 4, 16]),
        (131072, [2048, 8192, 32768, 131072], [1, 4, 16, 64]),
        (524288, [2048, 8192, 32768, 131072, 524288], [1, 4, 16, 64, 256]),
        (1048576, [2048, 8192, 32768, 131072, 524288, 1048576], [1, 4, 16, 64, 256, 512]),
    ],
)
def test_distributed_segments_reach_across_the_whole_sequence(
    n: int, segments: list[int], rates: list[int]
) -> None:
    dilation = profiles.distributed_dilation(n)
    assert dilation == {"segment_lengths": segments, "dilation_rates": rates}
    # every branch attends the same number of keys per row, and the largest segment is the sequence
    assert {w // r for w, r in zip(segments, rates, strict=True)} == {segments[0]}
    for world in (2, 4, 8):
        bounds = chunk_bounds(split_lengths(n, world))
        # so key/value shards travel the whole ring: the suite measures communication at every N
        assert ring_steps(bounds, segments, is_causal=False) == world


def _profile_ring(n: int, world: int, rank: int = 0):
    """The ``distributed`` profile's module, schedule, plan and remote steps for ``rank`` of
    ``world`` at ``n`` tokens, in the GPU shape (bf16, 12 x 64), built on the meta device: no
    process group, no memory (what travels is a function of the shapes alone)."""
    import torch

    from attention._distributed import _Ring
    from attention.ring import RingDilatedAttention

    dilation = profiles.distributed_dilation(n)
    module = RingDilatedAttention(**dilation, sequence_parallel=True)
    lengths = split_lengths(n, world)
    q = torch.empty(1, lengths[rank], 12, 64, device="meta", dtype=torch.bfloat16)
    lanes = module.lanes_for(lengths, 1, 12, 64, 2)
    sched = schedule_for(lengths, rank, dilation["segment_lengths"], False, lanes)
    plan = module._plan_global(q, n, lengths, False, sched)
    return module, sched, _Ring(plan, sched, None, q)


@pytest.mark.parametrize("n", [131072, 524288, 1048576])
def test_the_distributed_profile_needs_one_lane_on_gpus(n: int) -> None:
    """Only the rows of the branches whose segments cross a shard boundary travel (one position
    in 64 at 128K, in 512 at 1M), so the module's memory bound needs no lanes at 2-8 ranks: one
    trip around the ring, one packed message and one piece per remote step (issue 33: 8 lanes x
    4 steps = 936 aten ops per forward on 4 ranks before)."""
    dilation = profiles.distributed_dilation(n)
    for world in (2, 4, 8):
        _, sched, ring = _profile_ring(n, world)
        assert sched.lanes == 1 and sched.steps == world
        shards = chunk_bounds(split_lengths(n, world))
        shard = split_lengths(n, world)[0] * 12 * 64
        for step in ring.steps:
            to = sched.target(step.step)
            # k and v of one position in r of the shard, every head, of each branch whose segment
            # holds both shards: 1/64 (+ 1/16 at 8 ranks) of the shard at 128K, 1/512 at 1M
            want = sum(
                shard // r
                for w, r in zip(dilation["segment_lengths"], dilation["dilation_rates"], strict=True)
                if chunks_connected(shards, to, 0, [w], False)
            )
            got = sum(call.sizes[0] * call.sizes[1] * piece.lk * 64 for piece, call in step.send_calls)
            assert got == want <= shard // 8


def test_lanes_are_the_fewest_that_keep_what_a_rank_holds_in_bound() -> None:
    from attention._ring_memory import MAX_LANES, TRANSIENT_SHARE, lanes_for, transient_bytes

    # 4 shards of 512: the segments of 1024 (rate 4) and 2048 (rate 8) cross shard boundaries
    shape = {"batch": 1, "heads": 4, "head_dim": 32, "element_size": 2}
    pattern = {"segment_lengths": [256, 512, 1024, 2048], "dilation_rates": [1, 2, 4, 8], "mode": "longnet"}
    lengths = [512] * 4
    budget = TRANSIENT_SHARE * 512 * 4 * 32 * 2
    lanes = lanes_for(lengths, **shape, **pattern)
    assert lanes == 4
    assert transient_bytes(lengths, lanes, **shape, **pattern) <= budget
    assert transient_bytes(lengths, lanes // 2, **shape, **pattern) > budget
    # segments of 8-32 across shards of 46 and 45: every branch sends rows; 8 lanes at most
    small = {"batch": 2, "heads": 5, "head_dim": 8, "element_size": 4}
    pattern = {"segment_lengths": [8, 16, 32], "dilation_rates": [1, 2, 4], "mode": "longnet"}
    assert lanes_for([46, 45], **small, **pattern) == MAX_LANES == 8
    # never more lanes than the shortest shard has positions, and ring_lanes chooses
    assert lanes_for([5, 3], **small, **pattern) == 3
    assert schedule_for([5, 3], 1, [8], False, 8).lanes == 3
    assert schedule_for([64, 64], 0, [128], False, 2).lanes == 2
    assert schedule_for([32, 32, 32, 32], 0, [16], False, 1).steps == 1


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lengths", [[46, 45], [23, 23, 23, 22]])
def test_lanes_attend_every_pair_once(lengths: list[int], causal: bool) -> None:
    """Summed over every rank's lanes and steps, the pieces attend exactly the (query, key) pairs
    of the whole-shard pieces: lanes neither drop nor repeat work."""
    n, h = sum(lengths), 5
    cfg = {"num_heads": h, "segment_lengths": [8, 16, 32], "dilation_rates": [1, 2, 4], "mode": "longnet"}

    def pairs(bounds, q_chunk: int, k_chunk: int) -> int:
        pieces = build_pieces(
            seq_len=n, bounds=bounds, q_chunk=q_chunk, k_chunk=k_chunk, is_causal=causal, **cfg
        )
        return sum(piece.pairs for piece in pieces)

    shards = chunk_bounds(lengths)
    for rank in range(len(lengths)):
        sched = schedule_for(lengths, rank, cfg["segment_lengths"], causal, 4)
        bounds = RingSchedule.chunk_bounds(lengths, sched.lanes)
        got = sum(pairs(bounds, qi, kc) for qi, kc in sched.pairs())
        want = sum(pairs(shards, rank, c) for c in range(len(lengths)))
        assert got == want > 0


def test_the_distributed_profiles_run_the_distributed_suite() -> None:
    for name in ("distributed", "distributed-quick"):
        profile = profiles.PROFILES[name]
        assert (
            profile.distributed and profile.suite == profiles.DISTRIBUTED_SUITE and name in profiles.CHOICES
        )
    assert profiles.PROFILES["distributed"].seq_lens == (131072, 524288, 1048576)
    assert not any(p.distributed for n, p in profiles.PROFILES.items() if not n.startswith("distributed"))
    assert profiles.resolve("auto", cuda=True).name == "production"  # auto never starts a group


def test_ranks_are_one_per_gpu_two_on_the_cpu_or_what_the_environment_says() -> None:
    dist, quick = profiles.PROFILES["distributed"], profiles.PROFILES["distributed-quick"]
    assert profiles.ranks_for(dist, device="cuda", gpus=4, environ={}) == 4
    assert profiles.ranks_for(quick, device="cpu", gpus=0, environ={}) == 2
    assert (
        profiles.ranks_for(profiles.PROFILES["quick"], device="cpu", gpus=0, environ={"PERFGUARD_RANKS": "4"})
        == 1
    )
    assert profiles.ranks_for(dist, device="cuda", gpus=4, environ={"PERFGUARD_RANKS": "2"}) == 2
    assert profiles.ranks_for(quick, device="cpu", gpus=0, environ={"PERFGUARD_RANKS": "3"}) == 3
    with pytest.raises(ValueError, match="only 4 GPU"):
        profiles.ranks_for(dist, device="cuda", gpus=4, environ={"PERFGUARD_RANKS": "8"})
    for bad in ("0", "two", "-1", "65"):
        with pytest.raises(ValueError, match="PERFGUARD_RANKS"):
            profiles.ranks_for(quick, device="cpu", gpus=0, environ={"PERFGUARD_RANKS": bad})


def test_bench_regexes_of_the_distributed_suite_select_its_implementations() -> None:
    """``perfguard verify --bench`` (what a check verifies) knows the distributed suite's labels."""
    from attention.registry import REGISTRY
    from perfguard.engine import guarded

    distributed = [n for n, e in REGISTRY.items() if guarded.sequence_parallel(e) is not None]
    assert distributed == ["ring", "hilbert_ring", "multihead_ring"]  # what the registry declares
    labels = suite_labels(["ring", "dilated"], [2048], ["float32"], distributed=distributed)
    assert "bench_distributed.Work.track_forward_flops('ring', 2048, 'float32')" in labels
    assert "bench_distributed.Communication.track_forward('ring', 2048, 'float32')" in labels
    assert not any(label.startswith("bench_distributed.") and "'dilated'" in label for label in labels)
    # where the declaration is not read (a check's own process), every implementation may have them
    unknown = suite_labels(["dilated"], [2048], ["float32"])
    assert "bench_distributed.Forward.track_time('dilated', 2048, 'float32')" in unknown


# --- machine keys -------------------------------------------------------------------------------------


def test_the_machine_key_names_the_ranks() -> None:
    gpu = machine.Fingerprint("cuda", "NVIDIA H200 x4", "NVIDIA H200 ×4", {"gpu_count": 4})
    four = machine.with_ranks(gpu, 4)
    assert four.key == "NVIDIA H200 x4 ranks=4" and four.hardware == {"gpu_count": 4, "ranks": 4}
    assert four.label == "NVIDIA H200 ×4, 4 ranks"
    assert machine.with_ranks(gpu, 2).key != four.key  # a 2-rank baseline is never a 4-rank one's
    assert machine.split_ranks(four.key) == ("NVIDIA H200 x4", 4)
    assert machine.split_ranks("NVIDIA H200 x4") == ("NVIDIA H200 x4", None)
    with pytest.raises(ValueError, match="already"):
        machine.with_ranks(four, 2)
    with pytest.raises(ValueError, match="positive"):
        machine.with_ranks(gpu, 0)


def test_scaling_classes_join_gpu_counts_and_keep_cpu_cores() -> None:
    assert machine.scaling_class("NVIDIA H200 x2 ranks=2") == machine.scaling_class("NVIDIA H200 x4 ranks=4")
    assert machine.scaling_class("NVIDIA H200 x4 ranks=4") == "NVIDIA H200"
    cpu = "cpu:Intel(R) Xeon(R) Processor x2"
    assert machine.scaling_class(f"{cpu} ranks=1") == machine.scaling_class(f"{cpu} ranks=2") == cpu
    assert machine.scaling_class("cpu:Other x64 ranks=2") != cpu


# --- the launch -------------------------------------------------------------------------------------


def test_the_group_is_launched_by_torchrun_with_nvlink_multicast_off() -> None:
    command = rank_group.launch_command(["perfguard.engine.round_worker", "/x/spec.json"], 4)
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--standalone" in command and command[command.index("--nproc-per-node") + 1] == "4"
    assert command[command.index("--max-restarts") + 1] == "0"
    assert command[-3:] == ["-m", "perfguard.engine.round_worker", "/x/spec.json"]
    assert rank_group.LAUNCH_ENV["NCCL_NVLS_ENABLE"] == "0"
    assert rank_group.LAUNCH_ENV["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert rank_group.LAUNCH_ENV["NVSHMEM_DISABLE_NVLS"] == "1"
    assert not rank_group.launched({"RANK": "0"})
    assert rank_group.launched(
        dict.fromkeys(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"), "0")
    )


def test_a_groups_death_names_every_failed_rank_signals_first() -> None:
    assert _describe_group_exit(1, TORCHRUN_SUMMARY) == (
        "exit status 1; rank 1: killed by SIGSEGV, rank 0: exit status 3"
    )
    assert _describe_group_exit(1, "no summary at all") == "exit status 1"


def test_a_rank_torchrun_terminated_is_named_after_the_rank_that_died() -> None:
    assert _describe_group_exit(1, TORCHRUN_SUMMARY_TERM) == (
        "exit status 1; rank 1: killed by SIGSEGV, rank 0: killed by SIGTERM"
    )


# --- communication ----------------------------------------------------------------------------------


def test_exposed_communication_is_what_no_other_kernel_covers() -> None:
    comm = [(0.0, 4.0), (3.0, 6.0), (10.0, 11.0)]  # union [0, 6] and [10, 11]: 7 busy
    other = [(1.0, 2.0), (5.0, 10.5)]  # covers 1 + 1 + 0.5
    assert communication.exposed(comm, other) == (7.0, 4.5)
    assert communication.exposed(comm, []) == (7.0, 7.0)
    assert communication.exposed([], other) == (0.0, 0.0)


def test_share_is_the_median_communication_over_the_median_call() -> None:
    host = communication.Exchange([1.0, 2.0, 3.0], [10.0, 10.0, 20.0], 8, 1, "host-wait")
    assert host.share == pytest.approx(0.2)
    nccl = communication.Exchange([5.0, 5.0, 5.0], [10.0, 10.0, 10.0], 8, 1, "nccl-kernels", [1.0, 1.0, 1.0])
    assert nccl.share == pytest.approx(0.1)  # exposed, not busy


# --- plain asv ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_plain_asv_skips_the_distributed_suite_with_the_reason(tmp_path: Path) -> None:
    """``python -m asv run`` on a copy of the project: no process group, every benchmark skipped."""
    import shutil

    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in (f for f in files.decode().split("\0") if f and (ROOT / f).is_file()):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=tmp_path, check=True)
    # asv drops PYTHONPATH from its benchmark processes; ASV_PYTHONPATH is how it passes one on
    env = {**os.environ, "ASV_PYTHONPATH": str(ROOT), "PYTHONPATH": str(ROOT), "PERFGUARD_DEVICE": "cpu"}
    env.pop("PERFGUARD_PROFILE", None)
    asv = [sys.executable, "-m", "asv"]
    subprocess.run([*asv, "machine", "--yes", "--machine", "plain"], cwd=tmp_path, env=env, check=True,
                   capture_output=True)  # fmt: skip
    proc = subprocess.run(
        [*asv, "run", "-E", "existing:same", "--set-commit-hash", "HEAD", "--machine", "plain",
         "-b", r"bench_distributed\.Forward\.track_time", "--show-stderr"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    skipped = re.findall(r"asv: skipped: NotImplementedError\('no torch\.distributed process group", out)
    assert len(skipped) == 6, out  # ring, hilbert_ring, multihead_ring x 2048, 4096


def test_a_call_over_its_bound_is_cut_into_calls_that_cover_the_same_rows_once() -> None:
    """The sequence-parallel plan bounds each kernel call's query rows (issue 33: the rate-1
    branch as one call made the backward's peak 12.1 output shards on 2 H200s)."""
    call = Call(sizes=(32, 12), q_strides=(24576, 64), k_strides=(24576, 64), q_offset=7, k_offset=3)
    subs = split_call(call, 2048, 32 * 12 * 2048 // 4)
    assert [c.sizes for c in subs] == [(8, 12)] * 4
    assert all(c.sizes[0] * c.sizes[1] * 2048 <= 32 * 12 * 2048 // 4 for c in subs)
    assert [c.q_offset for c in subs] == [7 + i * 8 * 24576 for i in range(4)]
    assert [c.k_offset for c in subs] == [3 + i * 8 * 24576 for i in range(4)]
    uneven = split_call(call, 2048, 5 * 12 * 2048)  # 32 = 6 x 5 + 2
    assert [c.sizes[0] for c in uneven] == [5] * 6 + [2]
    one_batch = split_call(Call((1, 12), (0, 64), (0, 64), 0, 0), 1024, 4 * 1024)
    assert [c.sizes for c in one_batch] == [(1, 4)] * 3 and [c.q_offset for c in one_batch] == [0, 256, 512]
    assert split_call(call, 2048, 32 * 12 * 2048) == [call]
