"""The environment of both sides of a check, and what differs between them.

A 30% slowdown after a driver or torch upgrade is not the pull request's fault, so the report
puts the software of both sides side by side and names every difference (peers.md §14 item 14).
Sources, in order: ``Check.environment["base"/"head"]`` when ``perfguard check`` recorded them,
else the ``software`` / ``settings`` / ``fingerprint`` JSON of the runs that measured each side.
Host names and UUIDs are metadata: two runners of one machine class always differ there, so they
are shown but never called a difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfguard.store import StoredRun

#: Keys (last dotted component) that identify a host rather than describe it.
METADATA_KEYS = frozenset({"uuid", "uuids", "hostname", "host", "serial", "pci_bus_id", "node"})

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
    metadata: bool


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
    out = flatten(run.software or {})
    out.update(flatten(run.settings or {}, "settings."))
    out.update(flatten(run.fingerprint or {}, "fingerprint."))
    return out


def _order(key: str) -> tuple[int, int, str]:
    if key in PRIMARY_KEYS:
        return (0, PRIMARY_KEYS.index(key), key)
    if "." not in key:
        return (1, 0, key)
    if key.startswith("settings."):
        return (2, 0, key)
    return (3, 0, key)


def compare_sides(base: Mapping[str, str], head: Mapping[str, str]) -> Environment:
    """Rows for every key on either side; ``differs`` only for non-metadata keys."""
    rows = []
    for key in sorted(set(base) | set(head), key=_order):
        b, h = base.get(key, "–"), head.get(key, "–")
        metadata = key.rsplit(".", 1)[-1].lower() in METADATA_KEYS
        rows.append(EnvRow(key=key, base=b, head=h, differs=(b != h and not metadata), metadata=metadata))
    return Environment(rows=rows, recorded=bool(base or head))


def check_environment(
    recorded: Mapping[str, Any] | None, base_run: StoredRun | None, head_run: StoredRun | None
) -> Environment:
    """The environment of a check: what ``perfguard check`` recorded, else its runs'."""
    recorded = recorded or {}
    base = recorded.get("base")
    head = recorded.get("head")
    if isinstance(base, Mapping) and isinstance(head, Mapping):
        return compare_sides(flatten(base), flatten(head))
    return compare_sides(side_from_run(base_run), side_from_run(head_run))
