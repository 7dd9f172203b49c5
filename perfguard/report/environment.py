"""The environment of both sides of a check, and what differs between them.

A 30% slowdown after a driver or torch upgrade is not the pull request's fault, so the report
puts the software of both sides side by side and names every difference (peers.md §14 item 14).
Sources, in order: ``Check.environment["base"/"head"]`` when ``perfguard check`` recorded them,
else the ``software`` / ``settings`` / ``fingerprint`` JSON of the runs that measured each side.
Host names and UUIDs are metadata: two runners of one machine class always differ there, so they
are shown but never called a difference.  So is how a run was launched (``settings.bench``, the
``--bench`` selection a round measured; ``settings.processes`` and ``settings.cost``, what the
round took): the same software measured with another selection, or faster, is the same software.

A difference needs both sides to have recorded what is compared.  ``perfguard check`` records a
freshly measured side with its software only when it cannot find the runs it just stored, and a
side with no ``settings`` against one with settings is not "different software": issue 14 saw a
banner ``settings.device cpu → –`` on every check of one virtualenv.  A section (software,
``settings``, ``fingerprint``) that one side did not record is filled from that side's run when the
store has it, and else shown as not recorded, never as a difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfguard.store import StoredRun

#: Keys (last dotted component) that identify a host rather than describe it.
METADATA_KEYS = frozenset({"uuid", "uuids", "hostname", "host", "serial", "pci_bus_id", "node"})
#: Keys that say how a run was launched or what it cost, not what it ran: shown, never a difference.
RUN_KEYS = frozenset({"settings.bench", "settings.calibrate", "settings.processes", "settings.trust"})
#: Prefixes of such keys (``settings.cost.*``: where a round's time went).
RUN_PREFIXES = ("settings.cost.",)
#: Sub-objects of a side, each recorded (or not) as a whole; the rest of a side is its software.
SECTIONS = ("settings", "fingerprint")
#: How a value that one side did not record is shown.
NOT_RECORDED = "not recorded"

#: Keys shown first, in this order: what most often explains a performance change.
PRIMARY_KEYS = (
    "driver",
    "cuda",
    "torch",
    "cudnn",
    "triton",
    "flash_attn",
    "python",
    "asv",
    "perfguard",
)


@dataclass(frozen=True)
class EnvRow:
    key: str
    base: str
    head: str
    differs: bool
    metadata: bool  # a host's identity or how the run was launched: never a difference
    recorded: bool = True  # both sides recorded this key's section


@dataclass(frozen=True)
class Environment:
    """Both sides flattened to dotted keys; ``rows`` ordered for reading."""

    rows: list[EnvRow] = field(default_factory=list)
    recorded: bool = False  # False: neither side's environment is in the store

    @property
    def differences(self) -> list[EnvRow]:
        return [r for r in self.rows if r.differs]


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """Nested JSON to dotted keys.

    ``{"gpu": {"name": "H100"}, "gpus": [{"uuid": "x"}]}`` -> ``{"gpu.name": "H100", "gpus.0.uuid": "x"}``.
    """
    out: dict[str, str] = {}
    if isinstance(data, Mapping):
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
    elif (
        isinstance(data, (list, tuple)) and data and all(isinstance(v, (Mapping, list, tuple)) for v in data)
    ):
        for i, value in enumerate(data):
            out.update(flatten(value, f"{prefix}{i}."))
    elif prefix:
        if isinstance(data, (list, tuple)):
            text = ", ".join(str(v) for v in data)
        else:
            text = "" if data is None else str(data)
        out[prefix[:-1]] = text
    return out


def side_from_run(run: StoredRun | None) -> dict[str, str]:
    """One side's environment: software first (undotted keys), then settings and fingerprint."""
    if run is None:
        return {}
    sections = {"settings": run.settings or {}, "fingerprint": run.fingerprint or {}}
    return flatten({**(run.software or {}), **sections})


def section_of(key: str) -> str:
    """``settings.timer.tf32`` -> ``settings``; a software key (``torch``) -> ``""``."""
    head = key.split(".", 1)[0]
    return head if head in SECTIONS and "." in key else ""


def sections_of(side: Mapping[str, str]) -> set[str]:
    """The sections a flattened side recorded (``""``: its software)."""
    return {section_of(k) for k in side}


def _filled(recorded: Mapping[str, Any], run: StoredRun | None) -> dict[str, str]:
    """A recorded side, with the sections it lacks taken from its run (when there is one)."""
    side = flatten(recorded)
    if run is not None:
        from_run = side_from_run(run)
        missing = sections_of(from_run) - sections_of(side)
        side.update({k: v for k, v in from_run.items() if section_of(k) in missing})
    return side


def _order(key: str) -> tuple[int, int, str]:
    if key in PRIMARY_KEYS:
        return (0, PRIMARY_KEYS.index(key), key)
    if "." not in key:
        return (1, 0, key)
    if key.startswith("settings."):
        return (2, 0, key)
    return (3, 0, key)


def compare_sides(base: Mapping[str, str], head: Mapping[str, str]) -> Environment:
    """Rows for every key on either side.

    ``differs`` only where both sides recorded the key's section, the values differ, and the key
    describes the software or the machine (not a host's identity, not how the run was launched).
    A key missing from a section that a side did record is a difference (a package removed).
    """
    have_base, have_head = sections_of(base), sections_of(head)
    rows = []
    for key in sorted(set(base) | set(head), key=_order):
        section = section_of(key)
        recorded = section in have_base and section in have_head
        b = base.get(key, "–" if section in have_base else NOT_RECORDED)
        h = head.get(key, "–" if section in have_head else NOT_RECORDED)
        metadata = (
            key.rsplit(".", 1)[-1].lower() in METADATA_KEYS or key in RUN_KEYS or key.startswith(RUN_PREFIXES)
        )
        rows.append(
            EnvRow(
                key=key,
                base=b,
                head=h,
                differs=recorded and b != h and not metadata,
                metadata=metadata,
                recorded=recorded,
            )
        )
    return Environment(rows=rows, recorded=bool(base or head))


def check_environment(
    recorded: Mapping[str, Any] | None, base_run: StoredRun | None, head_run: StoredRun | None
) -> Environment:
    """The environment of a check: what ``perfguard check`` recorded (sections it lacks from the
    runs), else its runs'."""
    recorded = recorded or {}
    base = recorded.get("base")
    head = recorded.get("head")
    if isinstance(base, Mapping) and isinstance(head, Mapping):
        return compare_sides(_filled(base, base_run), _filled(head, head_run))
    return compare_sides(side_from_run(base_run), side_from_run(head_run))
