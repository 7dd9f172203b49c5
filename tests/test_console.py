"""perfguard.console: names printed through rich exactly as written (D2 of issue 13)."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.table import Table

from perfguard.console import escape, plain, visible

NAMES = (
    "[/oops]",
    "ring[fp8]",
    "[bold red]not bold[/]",
    "a\\[b]",
    "<script>alert(1)</script>",
    '=HYPERLINK("http://x")',
    "注意力 😀 👩‍👩‍👧",
    "../../etc/passwd",
    "@maintainer [link](http://evil)",
)


def rendered(*objects: object) -> str:
    console = Console(width=400, record=True, color_system=None, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(*objects)
    return console.export_text().rstrip("\n")


@pytest.mark.parametrize("name", NAMES)
def test_names_render_as_written(name: str) -> None:
    assert rendered(plain(name)) == name
    assert rendered(f"[bold]{escape(name)}[/bold] regressed") == f"{name} regressed"
    table = Table("impl")
    table.add_row(plain(name))
    assert name in rendered(table)


def test_unescaped_names_are_what_broke() -> None:
    """What D2 was: rich parses the name (crash, or text eaten)."""
    from rich.errors import MarkupError

    with pytest.raises(MarkupError):
        rendered("[/oops]")
    assert rendered("ring[fp8]") == "ring"


def test_control_characters_and_bidi_overrides_are_spelled_out() -> None:
    assert visible("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert visible("x\u202eexe.txt") == "x\\u202eexe.txt"
    assert visible("one\ntwo") == "one\\x0atwo"
    assert visible("one\ntwo", keep_newlines=True) == "one\ntwo"
    assert visible("tab\there\x7f\x85") == "tab\\x09here\\x7f\\x85"
    assert "\x1b" not in rendered(plain("a\x1b[31mred"))
    assert visible(42) == "42"
    # Joiners inside emoji and every script are left alone.
    assert visible("👩‍👩‍👧 ∑ ℵ") == "👩‍👩‍👧 ∑ ℵ"
