"""perfguard: keep the attention implementations in ``attention/`` correct and fast.

Data flows one way: ``machine`` -> ``timing`` / ``work`` -> (the asv suite, run by ``round_worker``)
-> ``rounds`` -> ``store`` -> ``compare``/``stats`` -> ``report``.  ``measuring`` (a bench: what
run, check, calibrate and bisect measure with) and ``gate`` (the PR check) wire them together;
``api`` is every command as a function; ``cli`` only parses options, calls ``api`` and prints
(docs/design.md, "Module map").

From Python (imported on first use, so ``import perfguard`` stays instant)::

    import perfguard

    outcome = perfguard.check("main")       # perfguard check --baseline main
    perfguard.run("HEAD"), perfguard.history(impl="ring"), perfguard.changes("HEAD")
    perfguard.api.verify(), perfguard.api.report(out_dir=...), perfguard.api.calibrate(), ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Commands callable as ``perfguard.<name>(...)``; the others share their name with a module
#: (``perfguard.verify``, ``perfguard.report``, ...) and are ``perfguard.api.<name>(...)``.
_COMMANDS = ("check", "run", "history", "changes")

if TYPE_CHECKING:
    from perfguard.api import changes as changes
    from perfguard.api import check as check
    from perfguard.api import history as history
    from perfguard.api import run as run


def __getattr__(name: str) -> Any:
    if name in _COMMANDS:
        from perfguard import api

        return getattr(api, name)
    raise AttributeError(f"module 'perfguard' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_COMMANDS])
