"""The one Jinja2 environment every report renders through.

Autoescaping is on for every template, Markdown included: benchmark names, parameters, commit
subjects and environment strings are user-controlled.  Data handed to JavaScript goes through
Jinja's ``tojson`` filter (which escapes ``<``, ``>``, ``&`` and ``'``) into a
``<script type="application/json">`` block that is parsed, never executed.  In Markdown, the
``md`` filter also neutralises Markdown syntax (``|`` would split a table cell, ``*`` or ``_``
would change emphasis, ``$`` would start maths on GitHub).  Pages carry a Content-Security-Policy
that allows no network source at all: scripts and styles come from the site's own files, or, for
the single-file check report, only the inline blocks whose SHA-256 is in the policy.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Iterable
from functools import cache
from importlib import resources

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from perfguard import __version__, units
from perfguard.report import formatting

#: Static assets shipped with the package (copied into the site; inlined into the check report).
STATIC_FILES = ("perfguard.css", "perfguard.js")

SITE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'"
)

_MD_ESCAPES = str.maketrans(
    {
        "\\": "\\\\",
        "`": "\\`",
        "*": "\\*",
        "_": "\\_",
        "[": "\\[",
        "]": "\\]",
        "|": "\\|",
        "~": "\\~",
        "#": "\\#",
        "!": "\\!",
        "$": "\\$",
        "\n": " ",
        "\r": " ",
    }
)


def text(value: object) -> Markup:
    """Text for Markdown outside attributes: ``&``, ``<``, ``>`` escaped, quotes left as they are.

    Autoescaping writes ``'`` and ``"`` as ``&#39;`` / ``&#34;``, which GitHub shows literally in
    code and in a raw job summary (issue 13, D5); outside an attribute they need no escaping.
    """
    return Markup(html.escape(str(value), quote=False))


def md(value: object) -> Markup:
    """Inline Markdown text: HTML-escaped (GitHub renders ``&lt;`` as ``<``), syntax escaped."""
    return Markup(str(text(value)).translate(_MD_ESCAPES))


def code(value: object, limit: int = 80) -> Markup:
    """A Markdown code span: GitHub shows its content literally (``<`` included), so nothing inside
    is escaped; a backtick (replaced by ``ˋ``) or a line break cannot end it, long names are cut."""
    raw = " ".join(str(value).split()).replace("`", "\u02cb")
    if len(raw) > limit:
        raw = raw[: limit - 1] + "…"
    return Markup(f"`{raw}`")


def verbatim_row(cells: Iterable[object]) -> Markup:
    """A Markdown table row ``| a | b |`` whose cells are written as they are, but for what would break
    the table (``|`` escaped, line breaks as spaces).

    For documents a maintainer writes and commits from this machine's own repository (the
    calibration report, docs/perf/); never for anything a job that ran pull-request code wrote.
    """
    return Markup("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |")


def static_text(name: str) -> str:
    """The text of a packaged static file (``perfguard/static/<name>``)."""
    return _static_text(name)


@cache
def _static_text(name: str) -> str:
    return resources.files("perfguard").joinpath("static", name).read_text(encoding="utf-8")


def csp_hash(text: str) -> str:
    """A CSP source expression allowing exactly this inline block."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def inline_csp(css: str, js: str) -> str:
    """Policy for a single-file page: only its own inline style and script, nothing from anywhere."""
    return (
        f"default-src 'none'; script-src {csp_hash(js)}; style-src {csp_hash(css)}; img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )


@cache
def environment() -> Environment:
    """The shared environment (cached: building it parses nothing, but filters are set once)."""
    env = Environment(
        loader=PackageLoader("perfguard", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        value=units.format_value,
        amount=units.format_amount,
        count=formatting.count,
        ratio=formatting.format_ratio,
        change=formatting.format_change,
        interval=formatting.format_interval,
        pvalue=formatting.format_p,
        percent=formatting.format_percent,
        threshold=formatting.format_threshold,
        sha=formatting.short_sha,
        date=formatting.format_date,
        params=formatting.params_label,
        bench=formatting.benchmark_label,
        label=formatting.metric_label,
        md=md,
        text=text,
        code=code,
        verbatim_row=verbatim_row,
    )
    env.globals.update(version=__version__)
    return env
