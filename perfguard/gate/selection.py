"""Step 0 of the PR check: which implementations the change can reach, so that only those are measured.

Most pull requests touch one implementation, the docs or the tests; measuring all of them costs
minutes a PR and adds nothing (issue 32).  :mod:`perfguard.reach` reads the guarded package's import
graph at the merge-base and at HEAD and says which implementations a changed module reaches, or
that everything must be measured and why.  This step adds what the check knows beyond the sources:

- the implementations and the modules they are built from are read from the **merge-base's**
  registry (code already reviewed: a pull request cannot hide an implementation by editing its
  registry, and a changed registry measures everything anyway);
- a change of the software the baseline was measured with (torch, CUDA, the driver, cuDNN, Triton,
  Python, perfguard itself: :func:`perfguard.engine.machine.software_differences`) measures
  everything, because every number may move;
- ``--all`` measures everything, and so does a check that cannot name HEAD's changes.

The implementations not reached are reported as ``not affected`` (one item each, never gated,
never counted as measured), and their stored baseline stays the baseline.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.errors import PerfguardError

if TYPE_CHECKING:
    from perfguard.compare import Item
    from perfguard.measuring import Bench, Rounds
    from perfguard.reach import Reach
    from perfguard.store.check_summary import Selection

#: Runs in a fresh interpreter over the merge-base's files: every implementation's root modules.
_ROOTS_SCRIPT = """
import json, sys
from perfguard.engine import guarded
package = guarded.current()
def module_of(entry):
    made = getattr(entry, "factory", None) or getattr(entry, "class_path", None)
    if isinstance(made, str):
        return made.partition(":")[0]
    return getattr(made, "__module__", None)
out = {}
for name, entry in package.implementations.items():
    modules = [module_of(entry)]
    core = getattr(entry, "core", None)
    if core is not None:
        modules.append(module_of(package.get(core)))
    out[name] = modules
decl = package.declaration
json.dump({"package": decl.package, "source": decl.source, "registry": decl.registry_module,
           "roots": out}, sys.stdout)
"""


def reach_of_change(
    bench: Bench, base_sha: str, head_sha: str | None, *, measure_all: bool = False
) -> tuple[Reach, tuple[str, ...]]:
    """What the change from ``base_sha`` to HEAD (``head_sha``, or the work tree when None) reaches,
    and every implementation of the merge-base.

    Raises nothing for a change it cannot read: it answers "everything" with the reason.
    """
    from perfguard.engine.machine import software_differences
    from perfguard.reach import Reach, reach
    from perfguard.reach.trees import Tree

    if measure_all:
        return Reach.all_of_it("--all"), ()
    base_stored = bench.stored_rounds(base_sha, trusted_only=True)
    moved = software_differences(_baseline_software(bench, base_sha, base_stored), bench.machine.software)
    if moved:
        name, (old, new) = next(iter(moved.items()))
        return Reach.all_of_it(f"the baseline was measured with {name} {old}, this machine has {new}"), ()
    try:
        declared = _declared(bench.root, base_sha)
    except PerfguardError as exc:
        return Reach.all_of_it(f"the merge-base's implementations could not be read ({exc.message})"), ()
    roots = {name: tuple(m for m in modules if m) for name, modules in declared["roots"].items()}
    names = tuple(roots)
    missing = [name for name, modules in roots.items() if not modules]
    if missing:
        return Reach.all_of_it(f"{missing[0]}'s module could not be told from its registry entry"), names
    source = str(declared["source"]).strip("/") or "."
    package_dir = declared["package"] if source == "." else f"{source}/{declared['package']}"
    found = reach(
        Tree(bench.root, base_sha),
        Tree(bench.root, head_sha),
        package=declared["package"],
        package_dir=package_dir,
        roots=roots,
        declaration_modules=(declared["registry"],),
    )
    return found, names


def _baseline_software(bench: Bench, base_sha: str, base_stored: Rounds) -> Mapping[str, object]:
    """The software of the stored baseline rounds the check will use (this machine's when none)."""
    ids = {getattr(r, "run_id", None) for results in base_stored for r in results} - {None}
    if not ids or bench.baseline_store is None:
        return bench.machine.software
    runs = bench.baseline_store.runs_for(bench.machine.key, base_sha, bench.profile.name)
    used = [r for r in runs if r.id in ids]
    return used[-1].software if used else bench.machine.software


def _declared(root: Path, sha: str) -> dict:
    """The merge-base's declaration and its implementations' root modules, read in a fresh
    interpreter over that commit's files (never HEAD's, never this process's imports)."""
    from perfguard.declaration import SOURCE_ENV
    from perfguard.gitrepo import git

    with tempfile.TemporaryDirectory(prefix="perfguard-reach-") as tmp:
        archive = git(root, "archive", "--format=tar", sha, binary=True)
        assert isinstance(archive, bytes)
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        env = {**os.environ, SOURCE_ENV: tmp}
        command = [sys.executable, "-c", _ROOTS_SCRIPT]
        proc = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise PerfguardError(last)
    return json.loads(proc.stdout)


def narrowed(bench_regexes: Sequence[str], implementations: Sequence[str]) -> tuple[str, ...]:
    """The ``--bench`` selection of the reached implementations within the user's own selection.

    asv labels read ``Class.method('impl', ...)``: the implementation is the first parameter of
    every suite.  The user's regexes are alternatives; the implementations narrow them (both must
    match), in one regex so that the rounds, the verification and the stored rounds all use it.
    """
    impls = "|".join(re.escape(i) for i in sorted(implementations))
    own = f"\\('(?:{impls})',"
    if not bench_regexes:
        return (own,)
    return (f"^(?=.*(?:{'|'.join(bench_regexes)})).*{own}",)


def within_bench(bench: Bench, user_bench: Sequence[str], implementations: Sequence[str]) -> list[str]:
    """The reached implementations the user's own ``--bench`` selection measures any benchmark of.

    Read from the suite's labels for the profile (:func:`perfguard.engine.suite.suite_labels`), so
    that a selection that picks none of them is "nothing to measure", not a round that finds no
    benchmark.  The backends comparison's labels name kernels that only the guarded package knows
    (importing it here would run HEAD's code in this process): a selection that names
    ``Backends`` keeps every implementation, and the rounds decide.
    """
    from perfguard.engine.suite import suite_labels

    if not user_bench or any("Backends" in r for r in user_bench):
        return list(implementations)
    compiled = [re.compile(r) for r in user_bench]
    dtypes, lengths = bench.profile.dtypes(bench.device), bench.profile.seq_lens
    return [
        impl
        for impl in implementations
        if any(r.search(label) for r in compiled for label in suite_labels([impl], lengths, dtypes))
    ]


def not_affected_items(reach: Reach, implementations: Sequence[str], threshold: float) -> list[Item]:
    """One ``not affected`` item per implementation the change does not reach (never gated)."""
    from perfguard.compare import REACH_BENCHMARK, Item, Verdict

    why = reach.reason if not reach.implementations else "it imports none of the changed modules"
    reason = f"not measured: {why}; its stored baseline stands"
    return [
        Item.of_implementation(
            impl, REACH_BENCHMARK, Verdict.NOT_AFFECTED, gated=False, threshold=threshold, reason=reason
        )
        for impl in sorted(implementations)
        if not reach.reaches(impl)
    ]


def selection_line(selection: Selection) -> str:
    """The line the check prints and every report shows: what was measured and why."""
    if selection.everything:
        return f"measuring every implementation: {selection.reason}"
    skipped = len(selection.not_measured)
    if not selection.measured:
        return f"measuring no implementation: {selection.reason} ({skipped} not affected)"
    return (
        f"measuring {len(selection.measured)} of {len(selection.measured) + skipped} implementations, "
        f"those the change reaches ({', '.join(selection.measured)}); {skipped} not affected, not measured"
    )


def selection_record(reach: Reach, implementations: Sequence[str]) -> Selection:
    """What the stored check keeps of the selection (:class:`perfguard.store.check_summary.Selection`)."""
    from perfguard.store.check_summary import Selection

    if reach.everything:
        return Selection(True, reach.reason, {}, (), len(reach.changed))
    return Selection(
        False,
        reach.reason,
        {impl: tuple(reach.why.get(impl, ())) for impl in sorted(reach.implementations)},
        tuple(sorted(i for i in implementations if not reach.reaches(i))),
        len(reach.changed),
    )
