"""Which implementations a change reaches, or why it must be taken to reach them all.

The rules (docs/reach.md), in the order they are applied:

1. a changed file the measurement cannot see (``IGNORED``: docs, tests, workflows, Markdown) is
   left out;
2. any other changed file outside the guarded package (the benchmark suite, the configuration,
   perfguard itself, a build file) reaches everything: it can change how every number is taken;
3. a changed file inside the package that is not Python (a kernel source, a data file), a changed
   declaration module (the registry: which implementations exist and how they are built), or a
   package file that does not parse reaches everything;
4. otherwise an implementation is reached when a changed module is in the import closure of its
   root modules (its class's module; a multihead module's core's too) on either side — the union,
   so an import added or removed by the change counts — and a closure that holds a dynamic import
   reaches everything, because its true extent is unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from perfguard.reach.import_graph import ImportGraph
from perfguard.reach.trees import Tree, changed_files

#: files no measurement reads (fnmatch patterns; ``*`` crosses ``/``)
IGNORED: tuple[str, ...] = (
    "docs/*",
    "tests/*",
    ".github/*",
    "*.md",
    "*.rst",
    "LICENSE*",
    ".gitignore",
    ".ci/*",
)


@dataclass(frozen=True)
class Reach:
    """The answer: ``everything`` (and why), or the implementations reached and by which modules."""

    everything: bool
    reason: str
    implementations: frozenset[str] = frozenset()
    why: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # impl -> changed modules reaching it
    changed: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()

    @classmethod
    def all_of_it(cls, reason: str, changed: Sequence[str] = (), ignored: Sequence[str] = ()) -> Reach:
        return cls(True, reason, changed=tuple(changed), ignored=tuple(ignored))

    def reaches(self, implementation: str) -> bool:
        return self.everything or implementation in self.implementations


def reach(
    base: Tree,
    head: Tree,
    *,
    package: str,
    package_dir: str,
    roots: Mapping[str, Sequence[str]],
    declaration_modules: Iterable[str] = (),
    ignored: Sequence[str] = IGNORED,
) -> Reach:
    """What the change from ``base`` to ``head`` can reach (module docstring).

    ``roots``: implementation name -> the modules importing it runs (on both sides; a change that
    adds or removes an implementation changes the declaration module and reaches everything).
    ``declaration_modules`` (the registry) may import dynamically: what they load is in ``roots``.
    """
    changed = changed_files(base, head)
    prefix = package_dir.rstrip("/") + "/"
    left_out = tuple(p for p in changed if not p.startswith(prefix) and _ignored(p, ignored))
    outside = [p for p in changed if not p.startswith(prefix) and p not in left_out]
    if outside:
        more = f" (and {len(outside) - 1} more such file(s))" if len(outside) > 1 else ""
        return Reach.all_of_it(
            f"{outside[0]} changed: it is outside the guarded package {package} and may change how "
            f"every number is taken{more}",
            changed,
            left_out,
        )
    inside = [p for p in changed if p.startswith(prefix)]
    other = [p for p in inside if not p.endswith(".py")]
    if other:
        why = f"{other[0]} changed: a file of the package that is not Python"
        return Reach.all_of_it(why, changed, left_out)
    graphs = [ImportGraph.read(side, package, package_dir) for side in (base, head)]
    for graph in graphs:
        if graph.unreadable:
            path, error = next(iter(graph.unreadable.items()))
            return Reach.all_of_it(f"{path} does not parse ({error})", changed, left_out)
    modules = {m.path: m.name for g in graphs for m in g.modules.values()}
    changed_modules = {modules[p] for p in inside if p in modules}
    declaration = set(declaration_modules)
    if changed_modules & declaration:
        name = sorted(changed_modules & declaration)[0]
        return Reach.all_of_it(f"{name} changed: it declares the implementations", changed, left_out)
    reached: dict[str, tuple[str, ...]] = {}
    for impl, impl_roots in sorted(roots.items()):
        closure: set[str] = set()
        for graph in graphs:
            missing = [r for r in impl_roots if r not in graph.modules]
            if missing:  # moved or not yet there: the graph cannot say what importing it runs
                why = f"{impl}'s module {missing[0]} is not in the package on both sides"
                return Reach.all_of_it(why, changed, left_out)
            closure |= graph.closure(impl_roots)
        for graph in graphs:
            for name in sorted(closure - declaration):
                module = graph.modules.get(name)
                if module is not None and module.dynamic:
                    return Reach.all_of_it(
                        f"{module.path}:{module.dynamic[0]} imports dynamically and {impl} reaches it",
                        changed,
                        left_out,
                    )
        hit = tuple(sorted(closure & changed_modules))
        if hit:
            reached[impl] = hit
    if not changed:
        reason = "nothing changed"
    elif not reached:
        reason = "no implementation imports a changed file"
    else:
        reason = f"{len(reached)} implementation(s) import a changed module"
    return Reach(False, reason, frozenset(reached), reached, changed, left_out)


def _ignored(path: str, patterns: Sequence[str]) -> bool:
    return any(fnmatchcase(path, pattern) for pattern in patterns)
