"""A small local runner for this repository's GitHub Actions workflows, and its own tests.

GitHub cannot be reached from the development machine or from CI, so the workflow tests run the
workflows here: each job's ``run:`` steps in order with the same bash invocation as the runner
(``bash --noprofile --norc -eo pipefail``), with ``${{ }}`` expressions evaluated against a real
event payload, and with the runner's files (``GITHUB_OUTPUT``, ``GITHUB_ENV``, ``GITHUB_PATH``,
``GITHUB_STEP_SUMMARY``, ``GITHUB_EVENT_PATH``) as real files whose contents flow into later steps
exactly as on GitHub. ``uses:`` steps are not executed: the caller supplies a handler per action
that does what matters for the test (checkout = the repository is there; upload-artifact = copy
the files to a directory the test inspects). An action without a handler is an error, so a new
action in a workflow cannot slip past the tests unnoticed.

The expression evaluator implements the subset of the GitHub expression language that workflows
commonly use (contexts, ``.`` / ``[]`` / ``.*`` access, literals, ``! == != < <= > >= && ||``, the
status functions and ``contains``/``startsWith``/``endsWith``/``format``/``join``/``toJSON``/
``fromJSON``/``hashFiles``) with GitHub's rules: case-insensitive string equality, loose number
coercion, ``&&``/``||`` returning operands, and an implicit ``success() &&`` in ``if:``. Anything
else raises, so the tests fail loudly instead of evaluating a condition wrongly.
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"


def load_workflow(path: Path) -> dict[str, Any]:
    """Parse a workflow file; YAML 1.1 reads the key ``on`` as ``True``, so put it back."""
    doc = yaml.safe_load(path.read_text())
    if True in doc:
        doc["on"] = doc.pop(True)
    return doc


def all_workflows() -> dict[str, dict[str, Any]]:
    return {p.name: load_workflow(p) for p in sorted(WORKFLOWS.glob("*.yml"))}


# --------------------------------------------------------------------------------------------------
# Expressions


class ExpressionError(ValueError):
    """An expression this evaluator does not understand (the test must fail, not guess)."""


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>'(?:[^']|'')*')
      | (?P<num>-?(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?))
      | (?P<op>==|!=|<=|>=|&&|\|\||[!<>()\[\].,*])
      | (?P<ident>[A-Za-z_][A-Za-z0-9_-]*)
    )""",
    re.VERBOSE,
)


def _tokenize(expr: str) -> list[tuple[str, Any]]:
    tokens: list[tuple[str, Any]] = []
    pos = 0
    expr = expr.strip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            raise ExpressionError(f"cannot read {expr[pos:]!r} in {expr!r}")
        pos = m.end()
        if m.group("str") is not None:
            tokens.append(("lit", m.group("str")[1:-1].replace("''", "'")))
        elif m.group("num") is not None:
            text = m.group("num")
            tokens.append(("lit", int(text, 16) if "x" in text else float(text)))
        elif m.group("op") is not None:
            tokens.append(("op", m.group("op")))
        else:
            word = m.group("ident")
            literal = {"true": True, "false": False, "null": None}
            tokens.append(("lit", literal[word]) if word in literal else ("ident", word))
    return tokens


def truthy(value: Any) -> bool:
    """GitHub's truthiness: false, 0, -0, NaN, '' and null are falsy."""
    if isinstance(value, float) and math.isnan(value):
        return False
    return value not in (None, False, 0, "")


def _to_number(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip()) if value.strip() else 0.0
        except ValueError:
            return math.nan
    return math.nan


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.casefold() == b.casefold()
    if type(a) is type(b) or (a is None and b is None):
        return a == b
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return a is b
    return _to_number(a) == _to_number(b)


def to_string(value: Any) -> str:
    """How GitHub renders a value inside ``${{ }}`` in a string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, indent=2)
    return str(value)


@dataclass
class Evaluator:
    """Evaluates one expression against ``contexts``; ``status`` drives the status functions."""

    contexts: Mapping[str, Any]
    status: str = "success"  # success | failure | cancelled
    workspace: Path | None = None

    def evaluate(self, expr: str) -> Any:
        self._tokens = _tokenize(expr)
        self._pos = 0
        value = self._or()
        if self._pos != len(self._tokens):
            raise ExpressionError(f"unexpected {self._tokens[self._pos][1]!r} in {expr!r}")
        return value

    # recursive descent, lowest precedence first
    def _peek(self) -> tuple[str, Any] | None:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else None

    def _accept(self, op: str) -> bool:
        tok = self._peek()
        if tok == ("op", op):
            self._pos += 1
            return True
        return False

    def _expect(self, op: str) -> None:
        if not self._accept(op):
            raise ExpressionError(f"expected {op!r} at token {self._pos}")

    def _or(self) -> Any:
        left = self._and()
        while self._accept("||"):
            right = self._and()
            left = left if truthy(left) else right
        return left

    def _and(self) -> Any:
        left = self._equality()
        while self._accept("&&"):
            right = self._equality()
            left = right if truthy(left) else left
        return left

    def _equality(self) -> Any:
        left = self._comparison()
        while True:
            if self._accept("=="):
                left = _equal(left, self._comparison())
            elif self._accept("!="):
                left = not _equal(left, self._comparison())
            else:
                return left

    def _comparison(self) -> Any:
        left = self._unary()
        for op in ("<=", ">=", "<", ">"):
            if self._accept(op):
                a, b = left, self._unary()
                if isinstance(a, str) and isinstance(b, str):
                    a, b = a.casefold(), b.casefold()
                else:
                    a, b = _to_number(a), _to_number(b)
                return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return left

    def _unary(self) -> Any:
        if self._accept("!"):
            return not truthy(self._unary())
        return self._postfix()

    def _postfix(self) -> Any:
        value = self._primary()
        while True:
            if self._accept("."):
                if self._accept("*"):
                    value = _star(value)
                    continue
                tok = self._peek()
                if not tok or tok[0] != "ident":
                    raise ExpressionError("expected a property name after '.'")
                self._pos += 1
                value = _prop(value, tok[1])
            elif self._accept("["):
                if self._accept("*"):
                    self._expect("]")
                    value = _star(value)
                    continue
                key = self._or()
                self._expect("]")
                value = _prop(value, key)
            else:
                return value

    def _primary(self) -> Any:
        tok = self._peek()
        if tok is None:
            raise ExpressionError("unexpected end of expression")
        self._pos += 1
        kind, val = tok
        if kind == "lit":
            return val
        if tok == ("op", "("):
            value = self._or()
            self._expect(")")
            return value
        if kind == "ident":
            if self._accept("("):
                args = []
                if not self._accept(")"):
                    args.append(self._or())
                    while self._accept(","):
                        args.append(self._or())
                    self._expect(")")
                return self._call(val, args)
            if val not in self.contexts:
                raise ExpressionError(f"unknown context {val!r}")
            return self.contexts[val]
        raise ExpressionError(f"unexpected {val!r}")

    def _call(self, name: str, args: list[Any]) -> Any:
        fn = name.lower()
        if fn == "success":
            return self.status == "success"
        if fn == "failure":
            return self.status == "failure"
        if fn == "cancelled":
            return self.status == "cancelled"
        if fn == "always":
            return True
        if fn == "contains":
            hay, needle = args
            if isinstance(hay, list):
                return any(_equal(item, needle) for item in hay)
            return to_string(needle).casefold() in to_string(hay).casefold()
        if fn == "startswith":
            return to_string(args[0]).casefold().startswith(to_string(args[1]).casefold())
        if fn == "endswith":
            return to_string(args[0]).casefold().endswith(to_string(args[1]).casefold())
        if fn == "format":
            text = to_string(args[0])
            return re.sub(r"\{(\d+)\}", lambda m: to_string(args[1 + int(m.group(1))]), text)
        if fn == "join":
            sep = to_string(args[1]) if len(args) > 1 else ","
            items = args[0] if isinstance(args[0], list) else [args[0]]
            return sep.join(to_string(i) for i in items)
        if fn == "tojson":
            return json.dumps(args[0], indent=2)
        if fn == "fromjson":
            return json.loads(to_string(args[0]))
        if fn == "hashfiles":
            if self.workspace is None:
                raise ExpressionError("hashFiles() needs a workspace")
            digest = hashlib.sha256()
            found = False
            for pattern in args:
                for match in sorted(glob.glob(str(self.workspace / to_string(pattern)), recursive=True)):
                    if os.path.isfile(match):
                        found = True
                        digest.update(Path(match).read_bytes())
            return digest.hexdigest() if found else ""
        raise ExpressionError(f"unknown function {name}()")


def _prop(value: Any, key: Any) -> Any:
    if isinstance(value, dict):
        if isinstance(key, str):
            for k, v in value.items():
                if k.casefold() == key.casefold():
                    return v
        return None
    if isinstance(value, list):
        if isinstance(key, (int, float)) and not isinstance(key, bool) and 0 <= int(key) < len(value):
            return value[int(key)]
        if isinstance(key, str):  # a property of a '.*' filtered list
            return [item for item in (_prop(v, key) for v in value) if item is not None]
    return None


def _star(value: Any) -> Any:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return value
    return []


_TEMPLATE = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
_WHOLE = re.compile(r"\$\{\{((?:(?!\}\}).)*)\}\}", re.DOTALL)  # one expression, nothing around it


def substitute(text: str, evaluator: Evaluator) -> str:
    """Replace every ``${{ expr }}`` in ``text`` with its string value."""
    return _TEMPLATE.sub(lambda m: to_string(evaluator.evaluate(m.group(1))), text)


def evaluate_value(value: Any, evaluator: Evaluator) -> Any:
    """A ``with:``/``env:``/``outputs:`` value: a whole ``${{ }}`` keeps its type, else a string."""
    if not isinstance(value, str):
        return value
    whole = _WHOLE.fullmatch(value.strip())
    if whole:
        return evaluator.evaluate(whole.group(1))
    return substitute(value, evaluator)


_STATUS_FN = re.compile(r"\b(success|failure|cancelled|always)\s*\(", re.IGNORECASE)


def evaluate_if(condition: Any, evaluator: Evaluator) -> bool:
    """An ``if:`` condition, with GitHub's implicit ``success() &&`` when no status function is used."""
    if condition is None:
        return evaluator.status == "success"
    if isinstance(condition, bool):
        return condition and evaluator.status == "success"
    text = str(condition).strip()
    whole = _WHOLE.fullmatch(text)
    if whole:
        text = whole.group(1).strip()
    if not _STATUS_FN.search(text):
        text = f"success() && ({text})"
    return truthy(evaluator.evaluate(text))


# --------------------------------------------------------------------------------------------------
# Jobs


def parse_output_file(path: Path) -> dict[str, str]:
    """``GITHUB_OUTPUT`` / ``GITHUB_ENV`` syntax: ``name=value`` lines and ``name<<DELIM`` blocks."""
    result: dict[str, str] = {}
    if not path.exists():
        return result
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip():
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            block = []
            while i < len(lines) and lines[i] != delim:
                block.append(lines[i])
                i += 1
            i += 1  # the delimiter
            result[name] = "\n".join(block)
        else:
            name, _, value = line.partition("=")
            result[name] = value
    return result


@dataclass
class StepResult:
    name: str
    id: str | None
    outcome: str  # success | failure | skipped
    returncode: int | None
    output: str
    outputs: dict[str, str]


@dataclass
class JobResult:
    job_id: str
    outcome: str  # success | failure | skipped
    steps: list[StepResult] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""

    def step(self, name_or_id: str) -> StepResult:
        for step in self.steps:
            if name_or_id in (step.id, step.name):
                return step
        raise KeyError(name_or_id)

    @property
    def log(self) -> str:
        return "\n".join(f"--- {s.name} [{s.outcome}]\n{s.output}" for s in self.steps)


UsesHandler = Callable[[dict[str, Any], dict[str, str]], None]
"""Does what a ``uses:`` action would do: (evaluated ``with:`` inputs, step environment) -> None."""


@dataclass
class Runner:
    """One machine that runs jobs: a workspace (the checkout), temp dirs, and the action handlers."""

    workspace: Path
    home: Path
    event_name: str
    event: dict[str, Any]
    repository: str
    sha: str
    ref: str
    base_ref: str = ""
    head_ref: str = ""
    vars: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    handlers: dict[str, UsesHandler] = field(default_factory=dict)
    base_env: dict[str, str] = field(default_factory=dict)
    run_id: str = "4242"
    api_url: str = "https://api.github.com"  # a test points it at a local stand-in for GitHub's API

    def github_context(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "event_name": self.event_name,
            "repository": self.repository,
            "repository_owner": self.repository.split("/")[0],
            "sha": self.sha,
            "ref": self.ref,
            "ref_name": self.ref.rsplit("/", 1)[-1],
            "base_ref": self.base_ref,
            "head_ref": self.head_ref,
            "server_url": "https://github.com",
            "api_url": self.api_url,
            "run_id": self.run_id,
            "run_attempt": "1",
            "token": "***",
            "workspace": str(self.workspace),
            "action": "__run",
            "actor": "octocat",
            "job": "",
        }

    def run_job(
        self,
        workflow: dict[str, Any],
        job_id: str,
        needs: dict[str, dict[str, Any]] | None = None,
    ) -> JobResult:
        job = workflow["jobs"][job_id]
        github = self.github_context()
        github["job"] = job_id
        contexts: dict[str, Any] = {
            "github": github,
            "vars": self.vars,
            "secrets": self.secrets,
            "needs": needs or {},
            "inputs": {},
            "matrix": {},
            "strategy": {},
            "env": {},
        }
        # success() at job level: every job in `needs` succeeded (GitHub's implicit condition).
        needs_ok = all(n.get("result") == "success" for n in (needs or {}).values())
        if not evaluate_if(job.get("if"), Evaluator(contexts, status="success" if needs_ok else "failure")):
            return JobResult(job_id, "skipped")

        self.workspace.mkdir(parents=True, exist_ok=True)  # GitHub creates it, empty, before step 1
        temp = self.home / f"_temp-{job_id}-{uuid.uuid4().hex[:6]}"
        tool_cache = self.home / "_tool"
        temp.mkdir(parents=True)
        tool_cache.mkdir(parents=True, exist_ok=True)
        event_path = temp / "_github_workflow" / "event.json"
        event_path.parent.mkdir(parents=True)
        event_path.write_text(json.dumps(self.event))
        runner_ctx = {"temp": str(temp), "tool_cache": str(tool_cache), "os": "Linux", "arch": "X64"}
        contexts["runner"] = runner_ctx

        env: dict[str, str] = {}
        for scope in (workflow.get("env") or {}, job.get("env") or {}):
            contexts["env"] = dict(env)
            for key, value in scope.items():
                env[key] = to_string(evaluate_value(value, Evaluator(contexts)))
        shell_default = ((workflow.get("defaults") or {}).get("run") or {}).get("shell")
        shell_default = ((job.get("defaults") or {}).get("run") or {}).get("shell", shell_default)

        extra_path: list[str] = []
        steps_ctx: dict[str, Any] = {}
        result = JobResult(job_id, "success")
        summaries: list[str] = []
        for index, step in enumerate(job["steps"]):
            name = step.get("name") or step.get("uses") or step.get("run", "").splitlines()[0]
            contexts["env"] = dict(env)
            contexts["steps"] = steps_ctx
            status = "success" if result.outcome == "success" else "failure"
            evaluator = Evaluator(contexts, status=status, workspace=self.workspace)
            if not evaluate_if(step.get("if"), evaluator):
                record = StepResult(name, step.get("id"), "skipped", None, "", {})
                result.steps.append(record)
                if step.get("id"):
                    steps_ctx[step["id"]] = {"outcome": "skipped", "conclusion": "skipped", "outputs": {}}
                continue

            step_env = dict(env)
            for key, value in (step.get("env") or {}).items():
                step_env[key] = to_string(evaluate_value(value, evaluator))
            files = {
                name: temp / f"_runner_file_commands/{name.lower()}_{index}"
                for name in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY")
            }
            for path in files.values():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("")
            process_env = {
                # the machine's device-lock directory: this test worker's (tests/conftest.py), not the
                # host's shared default, where another perfguard on the host would queue the job's
                # measurement (a workflow test waited 8 minutes there behind someone else's check)
                **{k: os.environ[k] for k in ("PERFGUARD_LOCK_DIR",) if k in os.environ},
                **self.base_env,
                **step_env,
                **{k: str(v) for k, v in files.items()},
                "CI": "true",
                "GITHUB_ACTIONS": "true",
                "GITHUB_WORKSPACE": str(self.workspace),
                "GITHUB_REPOSITORY": self.repository,
                "GITHUB_SHA": self.sha,
                "GITHUB_REF": self.ref,
                "GITHUB_BASE_REF": self.base_ref,
                "GITHUB_HEAD_REF": self.head_ref,
                "GITHUB_EVENT_NAME": self.event_name,
                "GITHUB_EVENT_PATH": str(event_path),
                "GITHUB_RUN_ID": self.run_id,
                "GITHUB_SERVER_URL": "https://github.com",
                "GITHUB_API_URL": self.api_url,
                "RUNNER_TEMP": str(temp),
                "RUNNER_TOOL_CACHE": str(tool_cache),
                "RUNNER_OS": "Linux",
            }
            process_env["PATH"] = os.pathsep.join([*reversed(extra_path), self.base_env.get("PATH", "")])

            if "uses" in step:
                action = step["uses"].split("@", 1)[0]
                handler = self.handlers.get(action)
                if handler is None:
                    raise AssertionError(f"no emulation for action {action!r} (step {name!r})")
                inputs = {k: evaluate_value(v, evaluator) for k, v in (step.get("with") or {}).items()}
                try:
                    handler(inputs, process_env)
                    outcome, code, output = "success", 0, f"[emulated {action}]"
                except Exception as exc:
                    outcome, code, output = "failure", 1, f"[emulated {action} failed: {exc}]"
            else:
                script = substitute(step["run"], evaluator)
                shell = step.get("shell", shell_default) or "bash"
                if shell != "bash":
                    raise AssertionError(f"step {name!r}: only shell: bash is emulated, not {shell!r}")
                script_path = temp / f"step_{index}.sh"
                script_path.write_text(script)
                cwd = self.workspace / step.get("working-directory", ".")
                proc = subprocess.run(
                    ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script_path)],
                    cwd=cwd,
                    env=process_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    check=False,
                )
                code, output = proc.returncode, proc.stdout
                outcome = "success" if code == 0 else "failure"

            outputs = parse_output_file(files["GITHUB_OUTPUT"])
            env.update(parse_output_file(files["GITHUB_ENV"]))
            extra_path += [p for p in files["GITHUB_PATH"].read_text().splitlines() if p.strip()]
            summaries.append(files["GITHUB_STEP_SUMMARY"].read_text())
            result.steps.append(StepResult(name, step.get("id"), outcome, code, output, outputs))
            if step.get("id"):
                steps_ctx[step["id"]] = {"outcome": outcome, "conclusion": outcome, "outputs": outputs}
            if outcome == "failure" and not step.get("continue-on-error"):
                result.outcome = "failure"

        contexts["steps"] = steps_ctx
        contexts["env"] = dict(env)
        final = Evaluator(contexts, status=result.outcome)
        result.outputs = {
            key: to_string(evaluate_value(value, final)) for key, value in (job.get("outputs") or {}).items()
        }
        result.summary = "".join(summaries)
        return result


def needs_context(*results: JobResult) -> dict[str, dict[str, Any]]:
    """The ``needs`` context that jobs depending on ``results`` see."""
    return {r.job_id: {"result": r.outcome, "outputs": r.outputs} for r in results}


def copy_tree_handler(destination: Path) -> UsesHandler:
    """Emulate an upload action: copy ``with.path`` (file or directory) into ``destination/name``."""

    def handle(inputs: dict[str, Any], env: dict[str, str]) -> None:
        source = Path(str(inputs["path"]))
        if not source.is_absolute():
            source = Path(env["GITHUB_WORKSPACE"]) / source
        target = destination / str(inputs.get("name", "github-pages"))
        if not source.exists():
            if inputs.get("if-no-files-found", "warn") == "error":
                raise FileNotFoundError(source)
            return
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / source.name)

    return handle


# --------------------------------------------------------------------------------------------------
# Tests of the emulator itself: the workflow tests are only as good as these rules.


def _eval(expr: str, **contexts: Any) -> Any:
    base = {"github": {}, "vars": {}, "env": {}, "steps": {}, "needs": {}}
    base.update(contexts)
    return Evaluator(base).evaluate(expr)


def test_operators_follow_github_rules() -> None:
    assert _eval("'Main' == 'main'") is True  # GitHub compares strings case-insensitively
    assert _eval("vars.X || 'auto'") == "auto"
    assert _eval("vars.X || 'auto'", vars={"X": "quick"}) == "quick"
    assert _eval("'' && 'x'") == ""
    assert _eval("!github.event.pull_request.draft", github={"event": {"pull_request": {}}}) is True
    assert _eval("1 == '1'") is True
    assert _eval("null == 0") is True
    assert _eval("(1 < 2) && 'b' >= 'A'") is True


def test_property_access_and_filters() -> None:
    event = {"pull_request": {"labels": [{"name": "safe-to-bench"}, {"name": "docs"}], "number": 7}}
    github = {"event": event}
    assert _eval("github.event.pull_request.labels.*.name", github=github) == ["safe-to-bench", "docs"]
    assert _eval("contains(github.event.pull_request.labels.*.name, 'SAFE-to-bench')", github=github)
    assert _eval("github.event['pull_request'].number", github=github) == 7
    assert _eval("github.event.missing.deeper", github=github) is None
    assert _eval("format('{0}-{1}', 'a', 3)") == "a-3"


def test_values_keep_their_type_only_when_they_are_one_expression() -> None:
    evaluator = Evaluator({"github": {"run_id": 42, "server_url": "https://x"}, "vars": {}})
    assert evaluate_value("${{ github.run_id }}", evaluator) == 42
    assert (
        evaluate_value("${{ github.server_url }}/runs/${{ github.run_id }}", evaluator) == "https://x/runs/42"
    )
    assert evaluate_value("${{ vars.NOPE }}", evaluator) is None


def test_if_gets_an_implicit_success() -> None:
    contexts = {"github": {}, "needs": {"gate": {"outputs": {"run": "true"}}}}
    failed = Evaluator(contexts, status="failure")
    assert evaluate_if("needs.gate.outputs.run == 'true'", Evaluator(contexts)) is True
    assert evaluate_if("needs.gate.outputs.run == 'true'", failed) is False
    assert evaluate_if("${{ always() && true }}", failed) is True
    assert evaluate_if("${{ !cancelled() }}", failed) is True
    assert evaluate_if(None, failed) is False


def test_unknown_syntax_is_an_error_not_a_guess() -> None:
    with pytest.raises(ExpressionError):
        _eval("github.event.x =~ 'y'")
    with pytest.raises(ExpressionError):
        _eval("someFunction()")
    with pytest.raises(ExpressionError):
        _eval("unknowncontext.x")


def test_output_file_syntax(tmp_path: Path) -> None:
    path = tmp_path / "out"
    path.write_text("run=true\nbody<<EOF\nline 1\nline=2\nEOF\nsha=abc\n")
    assert parse_output_file(path) == {"run": "true", "body": "line 1\nline=2", "sha": "abc"}


def test_runner_flows_outputs_env_and_path_between_steps(tmp_path: Path) -> None:
    workflow = {
        "defaults": {"run": {"shell": "bash"}},
        "jobs": {
            "j": {
                "outputs": {"answer": "${{ steps.second.outputs.answer }}"},
                "env": {"GREETING": "${{ vars.GREETING || 'hello' }}"},
                "steps": [
                    {
                        "run": 'mkdir -p "$RUNNER_TEMP/bin"; printf "#!/bin/sh\\necho tool\\n" > '
                        '"$RUNNER_TEMP/bin/mytool"; chmod +x "$RUNNER_TEMP/bin/mytool"; '
                        'echo "$RUNNER_TEMP/bin" >> "$GITHUB_PATH"; echo "LATER=$GREETING" >> "$GITHUB_ENV"'
                    },
                    {"id": "second", "run": 'echo "answer=$(mytool)-$LATER" >> "$GITHUB_OUTPUT"; false'},
                    {"name": "skipped on failure", "run": "echo never"},
                    {"name": "always", "if": "always()", "run": 'echo "# done" >> "$GITHUB_STEP_SUMMARY"'},
                ],
            }
        },
    }
    runner = Runner(
        workspace=tmp_path,
        home=tmp_path / "home",
        event_name="push",
        event={},
        repository="o/r",
        sha="0" * 40,
        ref="refs/heads/main",
        base_env={"PATH": os.environ["PATH"]},
    )
    result = runner.run_job(workflow, "j")
    assert result.outcome == "failure"
    assert result.outputs == {"answer": "tool-hello"}
    assert [s.outcome for s in result.steps] == ["success", "failure", "skipped", "success"]
    assert result.summary == "# done\n"
