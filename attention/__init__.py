"""Dilated (LongNet), ring and block-sparse attention: the implementations perfguard guards.

Importable without perfguard.  Names are resolved lazily so ``import attention`` (done by asv
at discovery, in a process that must not initialise CUDA) stays cheap: the classes exported are
those of :data:`attention.registry.IMPLEMENTATIONS` (the one table of implementations), read on
the first attribute asked for.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

#: the exported names that are not implementation classes -> the module that holds them
_FUNCTIONS_AND_MODULES = {
    "create_dilated_attention": "attention.factory",
    "create_multihead_dilated_attention": "attention.factory",
    "dilated_pattern": "attention.pattern",
    "reference_attention": "attention.reference",
    "registry": "attention.registry",
    "backends": "attention.backends",
}


@cache
def _exports() -> dict[str, str]:
    """Every exported name -> its module: each class of the table, and :data:`_FUNCTIONS_AND_MODULES`."""
    from attention.registry import IMPLEMENTATIONS

    classes = dict(reversed(s.class_path.split(":")) for s in IMPLEMENTATIONS)
    return {**classes, **_FUNCTIONS_AND_MODULES}


def __getattr__(name: str) -> Any:
    if name == "__all__":
        value: Any = sorted(_exports())
    elif name.startswith("__"):  # probes such as ``__wrapped__`` must not import the table
        raise AttributeError(f"module 'attention' has no attribute {name!r}")
    else:
        module_name = _exports().get(name)
        if module_name is None:
            raise AttributeError(f"module 'attention' has no attribute {name!r}")
        module = importlib.import_module(module_name)
        value = module if module_name.endswith("." + name) else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_exports()))
