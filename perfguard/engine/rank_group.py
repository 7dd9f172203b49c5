"""The ranks of a distributed round: launching the group, joining it, and what every rank agrees on.

A round of a distributed profile is one *group* of processes (docs/design.md, "Distributed
rounds"): :mod:`perfguard.engine.rounds` starts ``python -m torch.distributed.run --standalone
--nproc_per_node N -m perfguard.engine.round_worker SPEC`` (:func:`launch_command`), and the group is the
round's process: when a rank dies torchrun ends the others and exits non-zero, and the parent
treats that exactly as a worker that died.  Each rank of the worker calls :func:`join` (gloo on the
CPU, NCCL with one GPU per rank on CUDA), discovers the same suite in the same order (checked:
:func:`check_same`), runs every benchmark with the same number of calls (the timer agrees on its
counts), and agrees on each outcome (:func:`agree`); only rank 0 writes the worker's output file.

NVLink multicast stays off in every rank (:data:`LAUNCH_ENV`): the lent multi-GPU machines ask for
it (their device README), and NCCL's NVLS path is not what this suite measures.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from perfguard.engine.round_protocol import ResultEvent

#: Environment of every rank: NVLink multicast (NVLS) off in NCCL, symmetric memory and NVSHMEM.
LAUNCH_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "OMP_NUM_THREADS": "1",  # what torchrun sets anyway (with a warning); the timer pins 1 thread
    "PYTHONFAULTHANDLER": "1",  # a rank that crashes leaves its Python stack in the round's log
}
#: How long a collective may wait for a rank before the group fails (a rank that died or hangs).
TIMEOUT_S = 300
#: Variables torchrun sets in every rank it starts.
_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Group:
    """This process's place in the round's group."""

    rank: int
    world: int
    local_rank: int
    backend: str

    @property
    def writer(self) -> bool:
        """Whether this rank writes the worker's output (rank 0 only)."""
        return self.rank == 0


def launch_command(module_args: Sequence[str], ranks: int) -> list[str]:
    """``python -m torch.distributed.run`` starting ``ranks`` processes of ``python -m <module_args>``.

    ``--standalone``: a rendezvous on a free local port (rounds of parallel checks never collide);
    ``--max-restarts 0``: a rank that dies ends the round's group, and perfguard, not torchrun,
    decides what runs next.
    """
    if ranks < 1:
        raise ValueError(f"a group needs at least one rank, got {ranks}")
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(ranks),
        "--max-restarts",
        "0",
        "--monitor-interval",
        "0.5",
        "-m",
        *module_args,
    ]


def launched(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a rank torchrun started."""
    env = os.environ if environ is None else environ
    return all(name in env for name in _TORCHRUN_VARS)


def join(device: str) -> Group:
    """Join torchrun's group: NCCL with this rank's GPU on CUDA, gloo on the CPU."""
    import torch
    import torch.distributed as dist

    rank, world, local = (int(os.environ[n]) for n in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    if device == "cuda":
        if local >= torch.cuda.device_count():
            raise RuntimeError(
                f"rank {rank} (local rank {local}) has no GPU: {torch.cuda.device_count()} visible"
            )
        torch.cuda.set_device(local)
        backend = "nccl"
        dist.init_process_group(
            backend, timeout=timedelta(seconds=TIMEOUT_S), device_id=torch.device("cuda", local)
        )
    else:
        backend = "gloo"
        dist.init_process_group(backend, timeout=timedelta(seconds=TIMEOUT_S))
    return Group(rank, world, local, backend)


def leave() -> None:
    """Leave the group (at the end of a round; a rank that fails exits without it)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def gather(obj: Any) -> list[Any]:
    """``obj`` (picklable) of every rank, in rank order."""
    import torch.distributed as dist

    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def check_same(what: str, text: str) -> None:
    """Every rank must hold the same ``text`` (the round's plan): a ``RuntimeError`` naming who differs."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    digests = gather(digest)
    odd = [r for r, d in enumerate(digests) if d != digests[0]]
    if odd:
        raise RuntimeError(
            f"the ranks disagree on {what}: rank(s) {odd} differ from rank 0; every rank must run the "
            "same benchmarks in the same order"
        )


_RANK_OF_STATUS = {"ok": 0, "skipped": 1, "failed": 2}


def agree(result: ResultEvent, group: Group) -> ResultEvent:
    """The outcome of one benchmark for the whole group (every rank calls this, rank 0 keeps it).

    Rank 0's result, unless another rank fared worse: a benchmark skipped on any rank is skipped,
    failed on any rank is failed, with that rank's reason.
    """
    mine = (result.status, result.error or "")
    everyone = gather(mine)
    worst = max(range(len(everyone)), key=lambda r: (_RANK_OF_STATUS.get(everyone[r][0], 2), -r))
    status, error = everyone[worst]
    if status == result.status or worst == group.rank:
        return result
    return ResultEvent(result.label, result.benchmark, result.params, status, seconds=result.seconds,
                       error=f"rank {worst} of {group.world}: {error}")  # fmt: skip
