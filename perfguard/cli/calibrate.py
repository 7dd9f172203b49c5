"""``perfguard calibrate``: this machine's noise, false alarms and detection rates (owner: issue 7)."""

from __future__ import annotations

import click

from perfguard.cli.options import bench_option, profile_option
from perfguard.errors import PerfguardError


@click.command()
@profile_option
@bench_option
def calibrate(profile: str, bench_regex: str | None) -> None:
    """Process-to-process CV, A/A false alarms and planted-slowdown detection on this machine."""
    raise PerfguardError("perfguard calibrate is not built yet")
