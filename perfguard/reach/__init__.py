"""What a change can reach: the implementations whose code a diff may alter (issue 32).

A pull request that touches one implementation's module, or only the docs, need not measure the
others.  :func:`perfguard.reach.selection.reach` reads the guarded package's import graph at both
commits (static, from the sources: :mod:`perfguard.reach.import_graph`) and the changed files
(:mod:`perfguard.reach.trees`), and answers with a :class:`~perfguard.reach.selection.Reach`:
either *everything* (with the reason: a file it cannot see through, a dynamic import, the suite,
the configuration, perfguard itself) or the implementations reached and, for each, the changed
modules that reach it.  The analysis is conservative by construction: anything it cannot prove
unreachable counts as reached.
"""

from perfguard.reach.selection import Reach, reach

__all__ = ["Reach", "reach"]
