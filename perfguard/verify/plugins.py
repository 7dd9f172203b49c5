"""Implementations from outside ``attention.registry``: ``PERFGUARD_EXTRA_IMPLS``.

``perfguard verify`` checks the nine registered implementations.  To verify your own kernel with
the same checks (or, in perfguard's tests, deliberately broken ones), point the environment
variable ``PERFGUARD_EXTRA_IMPLS`` at one or more ``module:attribute`` references, separated by
commas.  The module must be importable (it is imported with the current ``sys.path``; add its
directory to ``PYTHONPATH``).  The attribute is a mapping ``name -> ImplSpec``, an iterable of
``ImplSpec``, or a callable returning either::

    # my_kernels.py
    from perfguard.verify.plugins import external_spec

    IMPLS = [external_spec("my_flash_dilated", "my_kernels:FlashDilated", same_function_as="dilated")]

    $ PYTHONPATH=. PERFGUARD_EXTRA_IMPLS=my_kernels:IMPLS perfguard verify --impl my_flash_dilated

The extra names join the registry for that run (``--impl`` selects them, the default runs them
too).  A name that is already registered is an error: an extension adds implementations, it never
silently replaces one under guard.

Registered implementations are built by ``ImplSpec.create``, the construction the factory
(``attention.factory``) performs for their names, so verifying them verifies what the factory
builds.  :func:`external_spec` returns a :class:`ClassImplSpec`, which builds an outside class with
the same configuration and keyword contract except that a core module gets no ``num_heads``
default (an outside core need not take one; docs/design.md, "attention").
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from attention.registry import REGISTRY, ImplSpec, Target
from perfguard.errors import UsageError

ENV_VAR = "PERFGUARD_EXTRA_IMPLS"


@dataclass(frozen=True)
class ClassImplSpec(ImplSpec):
    """An :class:`ImplSpec` for an outside class: a core module is built without a ``num_heads`` default."""

    def build(
        self,
        target: Target = "cpu",
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **overrides: Any,
    ) -> torch.nn.Module:
        cfg = self.config(target)
        kwargs = {**cfg.kwargs, **overrides}
        if self.multihead:
            kwargs.setdefault("embed_dim", cfg.shape.embed_dim)
            kwargs.setdefault("num_heads", cfg.shape.num_heads)
        return self.create(device=device, dtype=dtype, **kwargs).eval()


def external_spec(
    name: str,
    class_path: str,
    *,
    multihead: bool = False,
    like: str | None = None,
    **fields: Any,
) -> ClassImplSpec:
    """A spec for an outside class, with the configurations of a registered implementation.

    ``like`` names the registered implementation whose CPU / GPU / bench configurations and
    capabilities are copied (default ``dilated``, or ``multihead_dilated`` for a multihead class);
    ``fields`` override any :class:`ImplSpec` field (``same_function_as``, ``modes``, ``cpu``, ...).
    """
    base = REGISTRY[like or ("multihead_dilated" if multihead else "dilated")]
    spec = ClassImplSpec(**{f: getattr(base, f) for f in base.__dataclass_fields__})
    changes = {
        "name": name,
        "class_path": class_path,
        "multihead": multihead,
        "same_function_as": None,
        "core": None,
    }
    return replace(spec, **{**changes, **fields})


def load_extra_impls(value: str | None = None) -> dict[str, ImplSpec]:
    """The implementations named by ``PERFGUARD_EXTRA_IMPLS`` (or ``value``); empty when unset."""
    value = os.environ.get(ENV_VAR, "") if value is None else value
    extras: dict[str, ImplSpec] = {}
    for ref in filter(None, (part.strip() for part in value.split(","))):
        for spec in _resolve(ref):
            if spec.name in extras:
                raise UsageError(
                    f"{ENV_VAR}: implementation {spec.name!r} is defined twice",
                    hint="give every extra implementation its own name",
                )
            extras[spec.name] = spec
    return extras


def merged_registry(
    base: Mapping[str, ImplSpec] = REGISTRY, extras: Mapping[str, ImplSpec] | None = None
) -> dict[str, ImplSpec]:
    """The registry plus the extra implementations, refusing to shadow a registered name."""
    extras = load_extra_impls() if extras is None else extras
    clash = sorted(set(base) & set(extras))
    if clash:
        raise UsageError(
            f"{ENV_VAR} redefines registered implementation(s) {', '.join(clash)}",
            hint="extra implementations must use new names; the registered ones stay under guard",
        )
    return {**base, **extras}


def _resolve(ref: str) -> list[ImplSpec]:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(
            f"{ENV_VAR}: {ref!r} is not of the form module:attribute",
            hint="e.g. PERFGUARD_EXTRA_IMPLS=my_kernels:IMPLS",
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"{ENV_VAR}: cannot import {module_name!r}: {exc}",
            hint="add the module's directory to PYTHONPATH",
        ) from exc
    except Exception as exc:
        raise UsageError(
            f"{ENV_VAR}: importing {module_name!r} raised {type(exc).__name__}: {exc}",
            hint="fix the module that defines the extra implementations",
        ) from exc
    try:
        obj: Any = getattr(module, attr)
    except AttributeError:
        raise UsageError(f"{ENV_VAR}: module {module_name!r} has no attribute {attr!r}") from None
    try:
        if callable(obj) and not isinstance(obj, (Mapping, ImplSpec)):
            obj = obj()
        items: Iterable[Any] = obj.values() if isinstance(obj, Mapping) else obj
        specs = [obj] if isinstance(obj, ImplSpec) else list(items)
    except Exception as exc:
        raise UsageError(
            f"{ENV_VAR}: {ref} must be a mapping or iterable of ImplSpec (or a callable returning one); "
            f"using it raised {type(exc).__name__}: {exc}",
            hint="build them with perfguard.verify.plugins.external_spec(...)",
        ) from exc
    bad = [s for s in specs if not isinstance(s, ImplSpec)]
    if bad:
        raise UsageError(
            f"{ENV_VAR}: {ref} must give ImplSpec objects, got {type(bad[0]).__name__}",
            hint="build them with perfguard.verify.plugins.external_spec(...)",
        )
    return specs
