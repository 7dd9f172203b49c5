"""Text perfguard did not write itself, printed through rich exactly as it was written.

rich parses ``[...]`` in every string it prints as markup: an implementation named ``[/oops]``
crashed ``perfguard run``, ``check`` and ``history`` with ``rich.errors.MarkupError``, and
``ring[fp8]`` was printed as ``ring`` (``[fp8]`` taken for a style).  Names of implementations and
benchmarks, parameters, machine keys, commit subjects, branch names, error messages, paths: all
of it comes from the store, git or a pull request, so all of it goes through this module:

- :func:`plain` gives a ``rich.text.Text``, which rich never parses: use it for table cells,
  titles and anything printed on its own (``console.print(plain(name))``).
- :func:`escape` gives markup-escaped text for an f-string that also holds perfguard's own
  markup (``console.print(f"[bold]{escape(name)}[/bold] regressed")``).

Both also make control characters visible (``\\x1b`` printed as the four characters ``\\x1b``),
and the bidirectional overrides of "Trojan Source" (``\\u202e``), so a name cannot clear the
screen, move the cursor, recolour the rest of a CI log or reorder what a reader sees.  Everything
else (any script, emoji, symbols) is shown as written.
"""

from __future__ import annotations

import re

from rich.markup import escape as _escape_markup
from rich.text import Text

# C0 and C1 control characters, DEL, and the bidirectional embedding / override / isolate marks.
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_KEEP_LINES = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _show(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(value: object, *, keep_newlines: bool = False) -> str:
    """``str(value)`` with control and bidi-override characters spelled out (``\\x1b``, ``\\u202e``).

    ``keep_newlines``: leave ``\\n`` alone (multi-line messages); otherwise it is shown as ``\\x0a``
    too, so a one-line name stays on one line.
    """
    return (_KEEP_LINES if keep_newlines else _INVISIBLE).sub(_show, str(value))


def plain(value: object, style: str = "", *, keep_newlines: bool = False) -> Text:
    """A rich ``Text`` that shows ``value`` as written: never parsed as markup, controls made visible."""
    return Text(visible(value, keep_newlines=keep_newlines), style=style)


def escape(value: object, *, keep_newlines: bool = False) -> str:
    """``value`` escaped for rich markup (``[`` cannot open a tag), controls made visible.

    For f-strings that mix it with perfguard's own markup; prefer :func:`plain` elsewhere.
    """
    return _escape_markup(visible(value, keep_newlines=keep_newlines))
