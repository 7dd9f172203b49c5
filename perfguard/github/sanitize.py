"""Markdown that a pull request's job wrote, rebuilt from what it renders to, so nothing in it fires.

The report in the PR comment was written by a job that ran the pull request's code: it is data the
PR controls, posted under the bot's name.  Patterns on the text cannot tell what GitHub will render
(a link reference definition inside ``>`` or ``-``, an escaped ``\\]`` in a label, a label over two
lines, a backtick that opens no code span: issue 27 found 12 bypasses of 30), so the text is
*parsed* with a CommonMark parser (markdown-it-py, with GitHub's tables and strikethrough), and a
new Markdown document is written from the parsed tree, keeping only what is allowed:

- structure (paragraphs, headings, lists, quotes, tables, code, emphasis) as it parsed;
- links only to this repository's own pages (:class:`RepositoryLinks`: ``https`` on GitHub or the
  repository's Pages site, after percent-decoding and with no ``.``/``..`` segment); any other link,
  and every image, becomes its text followed by its address as plain text;
- raw HTML only as the attribute-less tags reports use (``<details>``, ``<summary>``, ``<sub>``,
  ``<b>``, ``<pre>``...) and ``<a href>`` to the repository, each written anew by us; any other
  tag, comment or declaration is shown as text;
- every piece of text escaped so that it is literal in Markdown *and* in HTML, and broken with an
  invisible :data:`WORD_JOINER` where GitHub would see a mention (``@``), an issue reference
  (``#12``, ``GH-12``) or a bare address (``https://``, ``www.``), wherever it would be live.  Code
  spans and code blocks are kept as they are: GitHub links nothing inside them.

Nothing of the input is copied but text (escaped) and code (fenced anew); reference definitions
are resolved by the parser and never written, so no later parser can find one the first one missed.
"""

from __future__ import annotations

import html
import re
import string
from collections.abc import Iterable, Sequence
from html.parser import HTMLParser
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

if TYPE_CHECKING:
    from markdown_it.tree import SyntaxTreeNode

WORD_JOINER = "\u2060"
"""Invisible, zero-width, and no letter or digit: inserted where GitHub would otherwise see a
mention (``@⁠user``), an issue reference (``#⁠12``) or an address to autolink (``https⁠://``)."""

ALLOWED_TAGS = frozenset(
    {"details", "summary", "sub", "sup", "b", "i", "strong", "em", "code", "kbd", "pre", "br"}
)
"""HTML tags a report may use, always written without attributes; ``<a href>`` is checked apart."""

_VOID_TAGS = frozenset({"br"})
_ASCII_PUNCTUATION = frozenset(string.punctuation)
_MARKDOWN_PUNCTUATION = _ASCII_PUNCTUATION - frozenset("/,;?%@'\":")
"""Escaped in Markdown text; the rest of ASCII punctuation starts no Markdown construct (``:``
ends a reference label only after ``]``, which is escaped)."""
_HTML_PUNCTUATION = _MARKDOWN_PUNCTUATION | {'"'}
"""Escaped as entities in raw HTML: literal there, and in Markdown if GitHub reads it so."""
_CONTROL = frozenset(chr(c) for c in (*range(32), 127)) - {"\n", "\t"}
_LIVE = re.compile(r"@(?!\u2060)|(?<!\u2060)://|(?i:www)(?=\.)|#(?=[0-9])|(?i:\bGH-)(?=[0-9])")
_INFO = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")
_SAFE_PATH = "/-._~!$'*+,;=:@"
_SAFE_QUERY = "/?:@!$&'*+,;=-._~%"


class RepositoryLinks:
    """Where a link in the comment may point: this repository's pages, on GitHub or its Pages site.

    ``server`` is where the repository lives (``https://github.com``, or a GitHub Enterprise
    server: the workflow's run URL says which).  A URL counts only in its canonical form:
    ``https``, the host exactly (no user, no port), the path percent-decoded until it no longer
    changes, with no ``.`` or ``..`` segment, no empty one, no backslash and no control character,
    and starting with ``/OWNER/NAME`` (or ``/NAME`` on ``OWNER.github.io``).  A browser cannot
    resolve such a path anywhere else.
    """

    def __init__(self, repo: str, server: str = "https://github.com") -> None:
        owner, _, name = repo.partition("/")
        if not owner or not name or "/" in name:
            raise ValueError(f"repository {repo!r} is not OWNER/NAME")
        host = urlsplit(server).netloc.lower() or "github.com"
        self._prefixes = {host: (owner.lower(), name.lower()), f"{owner.lower()}.github.io": (name.lower(),)}

    def canonical(self, url: str) -> str | None:
        """``url`` as it will be written, if it is one of this repository's pages; else None."""
        if any(ch <= " " or ch in "\\\x7f" for ch in url):
            return None
        parts = urlsplit(url)
        host = parts.netloc.lower()
        if parts.scheme.lower() != "https" or host not in self._prefixes:
            return None
        path = _fully_decoded(parts.path)
        if path is None or any(ch < " " or ch in "\\\x7f" for ch in path):
            return None
        segments = path.split("/")[1:] if path.startswith("/") else None
        if not segments or any(s in (".", "..") for s in segments) or "" in segments[:-1]:
            return None
        prefix = self._prefixes[host]
        if tuple(s.lower() for s in segments[: len(prefix)]) != prefix:
            return None
        canonical = f"https://{host}{quote(path, safe=_SAFE_PATH)}"
        if parts.query:
            canonical += "?" + quote(parts.query, safe=_SAFE_QUERY)
        if parts.fragment:
            canonical += "#" + quote(parts.fragment, safe=_SAFE_QUERY)
        return canonical


def _fully_decoded(path: str) -> str | None:
    """``path`` percent-decoded until it stops changing (``%252e`` -> ``%2e`` -> ``.``); None if
    it keeps changing, which no honest link does, or is not UTF-8."""
    for _ in range(4):
        try:
            decoded = unquote(path, errors="strict") if "%" in path else path
        except UnicodeDecodeError:
            return None
        if decoded == path:
            return path
        path = decoded
    return None


def sanitize_markdown(markdown: str, links: RepositoryLinks) -> str:
    """``markdown`` rebuilt from its CommonMark parse with only what the module docstring allows."""
    try:
        from markdown_it import MarkdownIt
        from markdown_it.tree import SyntaxTreeNode
    except ImportError as exc:  # the comment job installs it (perfguard/github/requirements.txt)
        raise RuntimeError(
            "markdown-it-py is not installed: the PR comment is sanitized by parsing it "
            "(pip install --require-hashes -r perfguard/github/requirements.txt)"
        ) from exc
    parser = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    tree = SyntaxTreeNode(parser.parse(markdown))
    lines = _Writer(links).blocks(tree.children, tight=False)
    return "\n".join(lines).rstrip("\n") + "\n"


# --------------------------------------------------------------------------------------------------
# text


def live_free(text: str) -> str:
    """``text`` with a :data:`WORD_JOINER` wherever GitHub would see a mention, issue reference or
    bare address (idempotent: a joiner already there is not doubled)."""
    return _LIVE.sub(_break, text)


def _break(match: re.Match[str]) -> str:
    token = match.group(0)
    if token == "://":
        return WORD_JOINER + token
    if token.lower() == "www":
        return token + WORD_JOINER
    return token + WORD_JOINER


def markdown_text(text: str) -> str:
    """Inline Markdown that renders as ``text`` and nothing else: ``& < >`` as entities (literal in
    HTML too), every other ASCII punctuation character backslash-escaped, live references broken."""
    out = []
    for ch in live_free(text):
        if ch in "&<>":
            out.append(html.escape(ch))
        elif ch in _MARKDOWN_PUNCTUATION:
            out.append("\\" + ch)
        else:
            out.append(" " if ch < " " or ch == "\x7f" else ch)
    return "".join(out)


def html_text(text: str) -> str:
    """Text inside raw HTML: ``"`` and the punctuation Markdown would read as numeric entities, so it is
    literal whether GitHub reads the block as HTML or as Markdown, live references broken."""
    return "".join(
        f"&#{ord(ch)};" if ch in _HTML_PUNCTUATION else " " if ch in _CONTROL else ch
        for ch in live_free(text)
    )


# --------------------------------------------------------------------------------------------------
# raw HTML


class _HtmlRewriter(HTMLParser):
    """Raw HTML -> the allowed tags written anew, everything else as escaped text."""

    def __init__(self, links: RepositoryLinks) -> None:
        super().__init__(convert_charrefs=True)
        self.links = links
        self.out: list[str] = []
        self.open_pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.out.append(self._start(tag, attrs) or html_text(self.get_starttag_text() or ""))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def _start(self, tag: str, attrs: list[tuple[str, str | None]]) -> str | None:
        if tag == "a":
            href = dict(attrs).get("href") if len(attrs) == 1 else None
            canonical = self.links.canonical(href) if href else None
            return f'<a href="{html.escape(canonical)}">' if canonical else None
        if tag not in ALLOWED_TAGS or attrs:
            return None
        self.open_pre += tag == "pre"
        return f"<{tag}>"

    def handle_endtag(self, tag: str) -> None:
        if (tag in ALLOWED_TAGS or tag == "a") and tag not in _VOID_TAGS:
            self.open_pre -= tag == "pre" and self.open_pre > 0
            self.out.append(f"</{tag}>")
        else:
            self.out.append(html_text(f"</{tag}>"))

    def handle_data(self, data: str) -> None:
        self.out.append(html_text(data))

    def handle_comment(self, data: str) -> None:
        self.out.append(html_text(f"<!--{data}-->"))

    def handle_decl(self, decl: str) -> None:
        self.out.append(html_text(f"<!{decl}>"))

    def handle_pi(self, data: str) -> None:
        self.out.append(html_text(f"<?{data}>"))

    def unknown_decl(self, data: str) -> None:
        self.out.append(html_text(f"<![{data}]>"))


def rewrite_html(raw: str, links: RepositoryLinks, *, block: bool) -> str:
    """Raw HTML with only the allowed tags (written anew) and the rest as text.

    In a block, an open ``<pre>`` is closed at its end: an HTML block opened by ``<pre>`` lasts
    until ``</pre>``, and would take the Markdown after it (code spans included) as raw HTML.
    """
    rewriter = _HtmlRewriter(links)
    rewriter.feed(raw)
    rewriter.close()
    out = "".join(rewriter.out)
    if block and rewriter.open_pre:
        out = out.rstrip("\n") + "</pre>" * rewriter.open_pre + "\n"
    return out


# --------------------------------------------------------------------------------------------------
# the tree, written back as Markdown


class _Writer:
    """Writes parsed blocks and inlines back as Markdown, keeping only what is allowed."""

    def __init__(self, links: RepositoryLinks) -> None:
        self.links = links

    # blocks: each returns its lines, without the prefixes of the containers around it

    def blocks(self, nodes: Sequence[SyntaxTreeNode], *, tight: bool) -> list[str]:
        lines: list[str] = []
        for node in nodes:
            written = self.block(node)
            if not written:
                continue
            if lines and not tight:
                lines.append("")
            lines += written
        return lines

    def block(self, node: SyntaxTreeNode) -> list[str]:
        kind = node.type
        if kind == "paragraph":
            return _no_html_line_start(self.inline(node.children[0].children))
        if kind == "heading":
            text = self.inline(node.children[0].children, one_line=True)
            return ["#" * int(node.tag[1]) + " " + text]
        if kind == "hr":
            return ["***"]
        if kind in ("fence", "code_block"):
            return _fenced(node.content, node.info if kind == "fence" else "")
        if kind == "html_block":
            return rewrite_html(node.content, self.links, block=True).rstrip("\n").split("\n")
        if kind == "blockquote":
            return [f"> {line}" if line else ">" for line in self.blocks(node.children, tight=False)]
        if kind in ("bullet_list", "ordered_list"):
            return self.list(node)
        if kind == "table":
            return self.table(node)
        return [markdown_text(node.content)] if node.content else []  # nothing else parses today

    def list(self, node: SyntaxTreeNode) -> list[str]:
        tight = all(p.hidden for item in node.children for p in item.children if p.type == "paragraph")
        start = int(node.attrs.get("start", 1)) if node.type == "ordered_list" else 0
        lines: list[str] = []
        for i, item in enumerate(node.children):
            marker = node.markup if node.type == "bullet_list" else f"{start + i}{node.markup}"
            body = self.blocks(item.children, tight=tight)
            if lines and not tight:
                lines.append("")
            indent = " " * (len(marker) + 1)
            lines.append(f"{marker} {body[0]}" if body else marker)
            lines += [indent + line if line else "" for line in body[1:]]
        return lines

    def table(self, node: SyntaxTreeNode) -> list[str]:
        rows = [tr for section in node.children for tr in section.children]
        if not rows:
            return []
        lines = []
        for k, tr in enumerate(rows):
            cells = [self.inline(cell.children[0].children, one_line=True, in_table=True) if cell.children
                     else "" for cell in tr.children]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
            if k == 0:
                lines.append(
                    "| " + " | ".join(_alignment(cell.attrs.get("style")) for cell in tr.children) + " |"
                )
        return lines

    # inlines

    def inline(
        self, nodes: Iterable[SyntaxTreeNode], *, one_line: bool = False, in_table: bool = False
    ) -> str:
        return "".join(self.piece(n, one_line=one_line, in_table=in_table) for n in nodes)

    def piece(self, node: SyntaxTreeNode, *, one_line: bool, in_table: bool) -> str:
        kind = node.type
        inner = lambda: self.inline(node.children, one_line=one_line, in_table=in_table)  # noqa: E731
        if kind == "text":
            return markdown_text(node.content)
        if kind == "code_inline":
            return _code_span(node.content, in_table=in_table)
        if kind == "softbreak":
            return " " if one_line else "\n"
        if kind == "hardbreak":
            return " " if one_line else "\\\n"
        if kind in ("em", "strong", "s"):
            mark = {"em": "*", "strong": "**", "s": "~~"}[kind]
            return mark + inner() + mark
        if kind == "html_inline":
            return rewrite_html(node.content, self.links, block=False)
        if kind in ("link", "image"):
            address = str(node.attrs.get("href" if kind == "link" else "src") or "")
            canonical = self.links.canonical(address) if kind == "link" else None
            label = inner()
            if canonical is not None:
                return f"[{label or markdown_text(canonical)}]({canonical})"
            if node.markup == "autolink" or not address:
                return label
            return f"{label} ({markdown_text(address)})" if label else markdown_text(address)
        return markdown_text(node.content)


def _no_html_line_start(text: str) -> list[str]:
    """Lines of a paragraph; one that would start with a tag gets a word joiner first, so that the
    tag stays inline and cannot open an HTML block that would swallow the lines after it raw."""
    return [WORD_JOINER + line if line.startswith("<") else line for line in text.split("\n")]


def _code_span(content: str, *, in_table: bool) -> str:
    longest = max((len(m) for m in re.findall(r"`+", content)), default=0)
    fence = "`" * (longest + 1)
    if in_table:
        content = content.replace("|", "\\|")
    pad = " " if content.strip(" ") and (content[0] in " `" or content[-1] in " `") else ""
    return f"{fence}{pad}{content}{pad}{fence}"


def _fenced(content: str, info: str) -> list[str]:
    longest = max((len(m) for m in re.findall(r"`+", content)), default=0)
    fence = "`" * max(3, longest + 1)
    language = info.split()[0] if info.split() else ""
    body = content[:-1] if content.endswith("\n") else content
    return [
        fence + (language if _INFO.fullmatch(language) else ""),
        *(body.split("\n") if body else []),
        fence,
    ]


def _alignment(style: object) -> str:
    align = str(style or "").removeprefix("text-align:")
    return {"left": ":---", "right": "---:", "center": ":---:"}.get(align, "---")
