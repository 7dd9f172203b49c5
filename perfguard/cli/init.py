"""``perfguard init``: write what a repository needs to be guarded (options and output only).

The work is :func:`perfguard.api.init` (:mod:`perfguard.scaffold`).
"""

from __future__ import annotations

import click

from perfguard.scaffold import declaration_table


@click.command()
@click.option("--package", default=None, metavar="NAME", help="Import name of the package to guard "
              "(default: the one package at the top of the repository or under src/).")  # fmt: skip
@click.option("--source", default=None, metavar="DIR", help="Directory holding the package, relative to "
              "the repository (default: where it was found, else '.').")  # fmt: skip
def init(package: str | None, source: str | None) -> None:
    """Write asv.conf.json, the asv suite, [tool.perfguard], a registry stub and the workflows.

    \b
    Never overwrites a file: one that exists is skipped and named (a pyproject.toml without a
    [tool.perfguard] table gets the table appended).  Then: edit <package>/perfguard_registry.py,
    run `perfguard verify`, commit, and `perfguard check --baseline main` on a branch.
    """
    from perfguard import api

    outcome = api.init(package=package, source=source)
    for path in outcome.written:
        click.echo(f"wrote   {path.relative_to(outcome.root)}")
    for path, why in outcome.skipped:
        click.echo(f"skipped {path.relative_to(outcome.root)} ({why})")
    if any(p.name == "pyproject.toml" for p, _ in outcome.skipped):
        click.echo("\nthe declaration perfguard needs in [tool.perfguard]:\n")
        click.echo(declaration_table(outcome.package, outcome.source))
    click.echo(
        f"\nnext: put your implementations into {outcome.package}/perfguard_registry.py, run "
        "`perfguard verify`, commit, then `perfguard check --baseline main` on a branch "
        "(perfguard's docs/guarding-your-package.md)"
    )
