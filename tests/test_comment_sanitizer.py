"""The PR comment sanitizer (perfguard.github.sanitize), judged by what a CommonMark parser renders.

Every case of ``tests/data/comment_attacks.txt`` is sanitized and rendered with markdown-it
(CommonMark with GitHub's tables and strikethrough, raw HTML passed through as GitHub receives it);
the rendered HTML is then read with the standard library's HTML parser and must hold no link
outside the repository, no image, no tag or attribute but the allowed ones, no comment, and no live
mention, issue reference or autolinkable address outside code.  The oracle below shares no code
with the sanitizer.  The reports perfguard itself writes (tables, code, ``<details>``, links to
the repository's pages) must render the same before and after.
"""

from __future__ import annotations

import os
import posixpath
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from report_readme import ReadmeFacts, build_readme_store
from report_store import CheckFacts, build_check_store

from perfguard import github as gh
from perfguard.report import load_check, render_markdown
from perfguard.store import Store

REPO = "acme/widgets"
RUN_URL = "https://github.com/acme/widgets/actions/runs/77"
SITE = "https://acme.github.io/widgets/"
CORPUS = Path(__file__).parent / "data" / "comment_attacks.txt"
WJ = "\u2060"


def load_corpus() -> list[tuple[str, str]]:
    """(name, markdown) of every case: a ``%%% NAME: why`` line, then its text."""
    cases: list[tuple[str, list[str]]] = []
    for line in CORPUS.read_text(encoding="utf-8").split("\n"):
        if line.startswith("%%% "):
            cases.append((line[4:].split(":", 1)[0], []))
        elif cases:
            cases[-1][1].append(line)
    return [(name, "\n".join(body).strip("\n") + "\n") for name, body in cases]


CASES = load_corpus()


def render(markdown: str) -> str:
    """HTML as a CommonMark parser with GitHub's table and strikethrough extensions renders it."""
    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(markdown)


# --- the oracle -----------------------------------------------------------------------------------

ALLOWED = {
    "p": set(), "a": {"href"}, "code": {"class"}, "pre": set(), "em": set(), "strong": set(), "s": set(),
    "table": set(), "thead": set(), "tbody": set(), "tr": set(), "th": {"style"}, "td": {"style"},
    "ul": set(), "ol": {"start"}, "li": set(), "blockquote": set(), "hr": set(), "br": set(),
    "h1": set(), "h2": set(), "h3": set(), "h4": set(), "h5": set(), "h6": set(), "details": set(),
    "summary": set(), "sub": set(), "sup": set(), "b": set(), "i": set(), "kbd": set(),
}  # fmt: skip
LIVE = re.compile(r"@[A-Za-z0-9]|#[0-9]|(?i:GH-[0-9])|[A-Za-z]://|(?i:www\.)")


def own_page(href: str) -> bool:
    """The oracle's own reading of "a page of acme/widgets": decoded, resolved, then compared."""
    url = href
    for _ in range(6):
        url = unquote(url)
    if re.search(r"[\x00-\x1f\x7f\\]", url):
        return False
    resolved = urljoin("https://github.com/acme/widgets/pull/1", url)
    parts = urlsplit(resolved)
    if parts.scheme != "https" or parts.netloc.lower() not in ("github.com", "acme.github.io"):
        return False
    path = parts.path
    if posixpath.normpath(path) != path.rstrip("/") or "/./" in path + "/" or "/../" in path + "/":
        return False
    owner_repo = ("/acme/widgets" if parts.netloc.lower() == "github.com" else "/widgets").lower()
    return path.lower() == owner_repo or path.lower().startswith(owner_repo + "/")


class Findings(HTMLParser):
    """What in a rendered page could act: foreign links, other tags and attributes, live text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.links: list[str] = []
        self.open: list[str] = []
        self.text: list[str] = []
        self.events: list[tuple[str, ...]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.events.append(("start", tag, *sorted(f"{k}={v}" for k, v in attrs)))
        if tag not in ALLOWED:
            self.problems.append(f"tag <{tag}>")
        for name, value in attrs:
            if name not in ALLOWED.get(tag, set()):
                self.problems.append(f"attribute {name}={value!r} on <{tag}>")
            elif name == "href":
                self.links.append(value or "")
                if not own_page(value or ""):
                    self.problems.append(f"link to {value!r}")
            elif name == "style" and not re.fullmatch(r"text-align:(left|right|center)", value or ""):
                self.problems.append(f"style {value!r}")
            elif name == "class" and not re.fullmatch(r"language-[\w+#.-]+", value or ""):
                self.problems.append(f"class {value!r}")
        if tag not in ("br", "hr"):
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        self.events.append(("end", tag))
        if tag in self.open:
            del self.open[len(self.open) - 1 - self.open[::-1].index(tag) :]

    def handle_data(self, data: str) -> None:
        self.events.append(("text", data))
        self.text.append(data)
        if "code" not in self.open:
            for match in LIVE.finditer(data):
                self.problems.append(f"live {match.group(0)!r} in {data.strip()[:60]!r}")

    def handle_comment(self, data: str) -> None:
        self.problems.append(f"comment <!--{data}-->")

    def handle_decl(self, decl: str) -> None:
        self.problems.append(f"declaration <!{decl}>")

    def handle_pi(self, data: str) -> None:
        self.problems.append(f"processing instruction <?{data}>")


def findings(markdown: str) -> Findings:
    found = Findings()
    found.feed(render(markdown))
    found.close()
    return found


def sanitize(markdown: str) -> str:
    return gh.sanitize_markdown(markdown, gh.RepositoryLinks(REPO))


# --- the attack corpus ----------------------------------------------------------------------------


def test_the_corpus_holds_the_attacks_of_issue_27() -> None:
    names = [name for name, _ in CASES]
    assert len(CASES) >= 30 and len(set(names)) == len(names)
    assert sum(name.startswith("[27]") for name in names) >= 12
    # Each case really attacks: rendered as it is, the oracle finds something in it (but those
    # that attack the rewriting, harmless as written).
    harmless = [n for n, text in CASES if not n.startswith("rewrite-") and not findings(text).problems]
    assert harmless == [], f"cases the oracle finds nothing in before sanitizing: {harmless}"


@pytest.mark.parametrize(("name", "markdown"), CASES, ids=[name for name, _ in CASES])
def test_no_attack_survives_the_sanitizer(name: str, markdown: str) -> None:
    out = sanitize(markdown)
    found = findings(out)
    assert found.problems == [], f"{name}:\n{out}"
    # Sanitizing the result again changes nothing a reader sees (what GitHub would parse is what
    # markdown-it parsed: no construct of ours reads differently the second time).
    again = sanitize(out)
    assert findings(again).problems == [] and _seen(again) == _seen(out), name


def test_what_the_attacks_said_is_still_readable() -> None:
    """Rejected links and images are shown as their text and address; mentions read as written."""
    by_name = dict(CASES)
    shown = "".join(findings(sanitize(by_name["inline-link"])).text).replace(WJ, "")
    assert "click to approve (https://evil.example/phish)" in shown
    shown = "".join(findings(sanitize(by_name["mentions"])).text).replace(WJ, "")
    assert shown.strip() == "approved by @maintainer and @acme/security-team"
    shown = "".join(findings(sanitize(by_name["[27] mention-after-backtick"])).text).replace(WJ, "")
    assert shown.strip() == "`@acme/security please look"
    code = findings(sanitize(by_name["rewrite-code-fence-info"]))
    assert "@inside-code is fine\n" in code.text  # code is left as it is: nothing links inside it


def test_the_repositorys_own_links_stay_links_in_canonical_form() -> None:
    markdown = (
        "[run](https://github.com/acme/widgets/actions/runs/77) "
        "[site](https://acme.github.io/widgets/bench/x.html#top) "
        "[case](HTTPS://GitHub.com/Acme/Widgets/pull/1?diff=split) "
        "[encoded](https://github.com/acme/widgets/blob/main/a%20b.md) "
        '<a href="https://github.com/acme/widgets/issues">issues</a> '
        "<https://github.com/acme/widgets/tree/main>"
    )
    found = findings(sanitize(markdown))
    assert found.problems == []
    assert found.links == [
        "https://github.com/acme/widgets/actions/runs/77",
        "https://acme.github.io/widgets/bench/x.html#top",
        "https://github.com/Acme/Widgets/pull/1?diff=split",
        "https://github.com/acme/widgets/blob/main/a%20b.md",
        "https://github.com/acme/widgets/issues",
        "https://github.com/acme/widgets/tree/main",
    ]


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/acme/widgets/../../attacker/phish",
        "https://github.com/acme/widgets/%2e%2e/%2E%2E/attacker/phish",
        "https://github.com/acme/widgets/%252e%252e/x",
        "https://github.com/acme/widgets/./x",
        "https://github.com/acme/widgets//x",
        "https://github.com:443/acme/widgets/",
        "https://user@github.com/acme/widgets/",
        "https://github.com/acme/widgets\\..\\x",
        "https://github.com/acme/widgetsx/",
        "http://github.com/acme/widgets/",
        "//github.com/acme/widgets/",
        "/acme/widgets/",
        "https://acme.github.io/other/",
        "https://github.com/acme/widgets/%0a",
        "https://github.com/acme/widgets/%ff%fe",
    ],
)
def test_links_that_could_leave_the_repository_are_refused(url: str) -> None:
    assert gh.RepositoryLinks(REPO).canonical(url) is None


def test_a_github_enterprise_server_comes_from_the_run_url(tmp_path: Path) -> None:
    (tmp_path / "comment.md").write_text(
        "[run](https://ghe.example/acme/widgets/actions/runs/1) [gh](https://github.com/acme/widgets/x)\n"
    )
    body = gh.prepare_comment_body(
        tmp_path, repo=REPO, run_url="https://ghe.example/acme/widgets/actions/runs/1"
    )
    found = findings(body.split("\n", 1)[1])
    assert found.links == ["https://ghe.example/acme/widgets/actions/runs/1"], body


def test_the_posted_comment_keeps_its_marker_and_our_line(tmp_path: Path) -> None:
    by_name = dict(CASES)
    (tmp_path / "comment.md").write_text("\n<!-- perfguard-report h100 -->\n" + "\n\n".join(by_name.values()))
    body = gh.prepare_comment_body(tmp_path, repo=REPO, run_url=RUN_URL, conclusion="failure")
    marker, ours, blank, report = body.split("\n", 3)
    assert marker == "<!-- perfguard-report h100 -->" and blank == ""
    assert ours.startswith("<sub>GitHub reports the benchmark job as **failure** ([workflow run](")
    assert findings(report).problems == []


# --- what our own reports contain survives --------------------------------------------------------


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> CheckFacts:
    return build_check_store(tmp_path_factory.mktemp("checks") / "history.db")


@pytest.fixture(scope="module")
def readme(tmp_path_factory: pytest.TempPathFactory) -> ReadmeFacts:
    return build_readme_store(tmp_path_factory.mktemp("readme") / "history.db")


def _reports(checks: CheckFacts, readme: ReadmeFacts) -> list[str]:
    reports = []
    with Store.open(checks.url) as store:
        for check_id in (checks.mixed_id, checks.quiet_id):
            reports.append(render_markdown(load_check(store, check_id), store=store))
    with Store.open(readme.url) as store:
        for check_id in (readme.planted_id, readme.aa_id, *readme.accepted.values()):
            reports.append(
                render_markdown(
                    load_check(store, check_id), store=store, report_url=f"{SITE}pr/12.html", site_url=SITE
                )
            )
    return reports


def _seen(markdown: str) -> list[tuple[str, ...]]:
    """What a reader gets: the rendered tags and text, word joiners and whitespace runs aside."""
    found = findings(markdown)
    events: list[tuple[str, ...]] = []
    for event in found.events:
        if event[0] == "text":
            text = re.sub(r"\s+", " ", event[1].replace(WJ, ""))
            if events and events[-1][0] == "text":
                events[-1] = ("text", events[-1][1] + text)
            else:
                events.append(("text", text))
        else:
            events.append(event)
    stripped = [("text", e[1].strip()) if e[0] == "text" else e for e in events]
    return [e for e in stripped if e != ("text", "")]


def test_our_own_reports_render_the_same_after_sanitizing(
    checks: CheckFacts, readme: ReadmeFacts, tmp_path: Path
) -> None:
    for report in _reports(checks, readme):
        (tmp_path / "report.md").write_text(report)
        gh.write_summary(tmp_path, head_sha="a" * 40, base_ref="main", run_url=RUN_URL, step_summary=None)
        original = (tmp_path / "comment.md").read_text()
        body = gh.prepare_comment_body(tmp_path, repo=REPO, run_url=RUN_URL)
        assert _seen(body) == _seen(original)
        assert "<table>" in render(body) and "<details>" in render(body)
        assert f'href="{RUN_URL}"' in render(body)
        (tmp_path / "report.md").unlink()
    assert any(f'href="{SITE}pr/12.html"' in render(r) for r in _reports(checks, readme))


def test_a_summary_without_a_report_renders_the_same(tmp_path: Path) -> None:
    (tmp_path / "check.exit").write_text("2\n")
    (tmp_path / "check.log").write_text(
        "measuring\nError: the baseline ```main``` is gone\n  hint: fetch it\n"
    )
    gh.write_summary(tmp_path, head_sha="b" * 40, base_ref="main", run_url=RUN_URL, step_summary=None)
    original = (tmp_path / "comment.md").read_text()
    body = gh.prepare_comment_body(tmp_path, repo=REPO, run_url=RUN_URL)
    assert _seen(body) == _seen(original) and "<pre><code" in render(body)


def test_only_the_comment_needs_the_parser_and_says_how_to_install_it(tmp_path: Path) -> None:
    """The approval and changes jobs run the bare runner's python3: the package imports without
    markdown-it-py, and the comment job, which installs it from requirements.txt, says so if not."""
    (tmp_path / "comment.md").write_text("hello\n")
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1]), "PATH": os.environ["PATH"]}
    argv = [sys.executable, "-S", "-m", "perfguard.github"]  # -S: no site-packages, no markdown_it
    proc = subprocess.run([*argv, "approval", "--help"], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run(
        [*argv, "comment", "--artifact-dir", str(tmp_path), "--repo", REPO, "--pr-number", "1",
         "--head-sha", "a" * 40, "--dry-run", str(tmp_path / "plan.json")],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "markdown-it-py is not installed" in proc.stdout
    assert "perfguard/github/requirements.txt" in proc.stdout
    pinned = (Path(gh.__file__).parent / "requirements.txt").read_text()
    assert re.search(r"^markdown-it-py==\S+ --hash=sha256:[0-9a-f]{64}$", pinned, re.MULTILINE)
    assert re.search(r"^mdurl==\S+ --hash=sha256:[0-9a-f]{64}$", pinned, re.MULTILINE)


PIECES = [
    "[", "]", "(", ")", "<", ">", "`", "``", "@", "a", "x1", "\n", "\n\n", " ", "> ", "- ", "1. ", "!",
    "https://evil.example", "//evil.example", "https://github.com/acme/widgets/", "../", "%2e", ":",
    "\\", "#1", '<a href="https://evil.example">', "</a>", "<details>", "<pre>", "</pre>", "&#64;",
    "*", "_", "|", "| --- |", "---", "    ", "www.", "\t", '"', "[r]: ", "<!--", "-->", "<img src=x>",
]  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_no_combination_of_the_attacks_pieces_survives(markdown: str) -> None:
    out = sanitize(markdown)
    assert findings(out).problems == [], out
