"""What a fast path's failure means: a fallback for this call, or for the rest of the process.

Every fast path of the package has an exact, slower one beside it: compiled ``flex_attention`` →
the block-sparse gather path, cuDNN → flash → … → math (:mod:`attention._kernel_selection`), strided views
→ contiguous copies, the Triton merge → the torch merge (:mod:`attention._merge`).  When the fast
path raises, the call runs the slower one.  This module decides **how long** that lasts, for every
one of those sites, and says it in the warning.

Why it matters (issue 26): block-sparse used to switch flex off for the whole process on any
exception.  Under a ``TorchDispatchMode`` (perfguard's work counter) or ``FlopCounterMode`` (which
training loops use to report MFU) flex cannot run compiled — ``torch.compile`` does not compile
while a dispatch mode is active, and flex's higher-order op has no rule for most modes — so one
counted call sent every later call of the process down the gather path, 53x slower, with a warning
nobody saw.

The rule (:meth:`Fallback.failed`):

1. **A special calling context: this call only, nothing recorded.**  A failure while
   :func:`calling_context` names something — a dispatch mode (``FlopCounterMode``, a counting or
   fake-tensor mode), a function mode other than ``torch.device``, ``torch.compile`` or
   ``torch.jit`` tracing, a ``torch.func`` transform, CUDA graph capture, autocast, deterministic
   algorithms — may be caused by that context, and the next plain call must still run the fast
   path.  The cost of being wrong is small: a path that fails in every such call is tried (and
   fails) once per call.
2. **A plain call: for the rest of the process only after two failures in a row.**  The same key
   (kernel, device type, dtype, head_dim) failing in two plain calls with no success in between is
   switched off; a single failure falls back for that call only.  Why two in a row: a deterministic
   failure (no kernel image for this GPU, a private signature that changed, a dtype the kernel
   rejects) fails every time, so it costs one extra failed attempt and is then off; a one-off (an
   Inductor or Triton compile that failed once — a cache race, a compile worker that died — or a
   transient driver error) succeeds on the next attempt and is never switched off; and a failure
   that depends on the shape (one odd piece of a ring) alternates with successes, so it falls back
   for those calls instead of taking the kernel away from every shape.
3. **Out of memory is not a kernel failure.**  Every fallback path needs more memory, not less, so
   an ``OutOfMemoryError`` propagates and nothing is recorded.

Every warning is a ``RuntimeWarning`` (perfguard fails a measured case on any RuntimeWarning from
the package: a number of the fallback path is never stored under the fast path's name) and says
what failed, in which context, what runs instead and for how long: "for this call only" or "for
the rest of the process".
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable

import torch

STRIKES = 2  # plain-call failures in a row that switch a fast path off for the process
THIS_CALL = "for this call only"
REST_OF_PROCESS = "for the rest of the process"
CAPTURE = "during CUDA graph capture"


class ContextError(RuntimeError):
    """A fast path that cannot run in this calling context, raised before it is tried (e.g. a
    ``torch.compile``-d kernel under a dispatch mode, where it would run its eager reference)."""


def _mode_name(mode: object) -> str:
    name = type(mode).__name__
    return name.lstrip("_")  # FlopCounterMode pushes a private _FlopCounterMode


def calling_context() -> str | None:
    """The special context of the current call, in words ("under FlopCounterMode"), or None for a
    plain call (module docstring, rule 1)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    modes = _get_current_dispatch_mode_stack()  # user modes and infra modes (fake, proxy, ...)
    if modes:
        return "under " + ", ".join(_mode_name(m) for m in modes)
    if torch.compiler.is_compiling():
        return "while torch.compile traces it"
    if torch.jit.is_tracing():
        return "while torch.jit traces it"
    if torch._C._functorch.peek_interpreter_stack() is not None:
        return "inside a torch.func transform (vmap, grad, ...)"
    if torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        return CAPTURE
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext

    function_modes = [m for m in _get_current_function_mode_stack() if not isinstance(m, DeviceContext)]
    if function_modes:
        return "under " + ", ".join(_mode_name(m) for m in function_modes)
    if torch.is_autocast_enabled("cuda") or torch.is_autocast_enabled("cpu"):
        return "under autocast"
    if torch.are_deterministic_algorithms_enabled():
        return "with deterministic algorithms on"
    return None


def compile_blocked() -> str | None:
    """Why a ``torch.compile``-d function called here would not be compiled, or None.

    Dynamo skips every frame while a non-infra dispatch mode is on the stack and runs it eagerly:
    for ``flex_attention`` that is its dense reference, which materialises every score (12 GiB at
    16K tokens and 12 heads); eager ``flex_attention`` itself runs through ``torch.compile``
    (``fullgraph=True``) and raises there — and on torch 2.13 (CPU) such a call left the next plain
    call of eager flex failing in Dynamo for the rest of the process.  So a caller raises
    :class:`ContextError` with this text instead of calling it.
    """
    if torch.compiler.is_compiling():
        return None  # inside an outer compile the call is traced, not skipped
    from torch.utils import _python_dispatch as dispatch

    on_stack = getattr(dispatch, "any_torch_dispatch_mode_on_stack", None)
    blocked = on_stack() if on_stack is not None else dispatch.is_in_torch_dispatch_mode(False)
    if not blocked:
        return None
    names = ", ".join(_mode_name(m) for m in dispatch._get_current_dispatch_mode_stack())
    return f"torch.compile does not compile under a dispatch mode ({names})"


def is_kernel_failure(exc: BaseException) -> bool:
    """Whether ``exc`` may mean the fast path cannot run (rule 3: out of memory is not)."""
    return not isinstance(exc, torch.OutOfMemoryError)


class Fallback:
    """One fallback site's memory: the keys switched off for the rest of the process (``off``, with
    the warning that did it in ``reasons``) and each key's plain-call failures in a row."""

    def __init__(self) -> None:
        self.off: set[Hashable] = set()
        self.reasons: dict[Hashable, str] = {}
        self._in_a_row: dict[tuple[Hashable, str], int] = {}

    def succeeded(self, key: Hashable, phase: str = "") -> None:
        """The fast path ran: its failures in a row start again from zero."""
        if self._in_a_row:
            self._in_a_row.pop((key, phase), None)

    def failed(
        self,
        key: Hashable,
        exc: BaseException,
        *,
        what: str,
        instead: str,
        phase: str = "",
        stacklevel: int = 2,
    ) -> bool:
        """Record a failure of the fast path ``key`` and warn; True when it is now off for the rest
        of the process.  Re-raises ``exc`` when it is not a kernel failure (out of memory).

        ``what`` names what failed ("attention kernel 'cudnn' on cuda torch.bfloat16 head_dim 64"),
        ``instead`` what runs in its place ("falling back to 'flash'"); ``phase`` counts failures
        of one direction apart (a kernel whose backward fails while its forward succeeds is still
        switched off).  Call it inside the ``except`` block: the context is read at the failure.
        """
        if not is_kernel_failure(exc):
            raise exc
        context = calling_context()
        if context is not None:
            sticky, where, lasts = False, context, THIS_CALL
            if context == CAPTURE:
                lasts += " (and every replay of the graph it is captured into)"
        else:
            count = self._in_a_row.get((key, phase), 0) + 1
            sticky = count >= STRIKES
            if sticky:
                self._in_a_row.pop((key, phase), None)
                where, lasts = f"in a plain call, {count} times in a row", REST_OF_PROCESS
            else:
                self._in_a_row[(key, phase)] = count
                where = "in a plain call"
                lasts = f"{THIS_CALL} (a second failure in a row switches it off {REST_OF_PROCESS})"
        said = " ".join(str(exc).split())[:300]  # one line: the error's own text, shortened
        message = f"{what} failed {where} ({type(exc).__name__}: {said}); {instead} {lasts}"
        if sticky:
            self.off.add(key)
            self.reasons[key] = message
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)
        return sticky
