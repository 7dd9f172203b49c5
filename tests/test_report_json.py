"""The JSON check report: the stored check's data, in the documented schema."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from report_store import XSS, CheckFacts, build_check_store
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from perfguard.report import JSON_SCHEMA, check_to_json, load_check
from perfguard.store import Store
from perfguard.store.models import CheckItem

DOC = Path(__file__).resolve().parents[1] / "docs" / "reports.md"


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> CheckFacts:
    return build_check_store(tmp_path_factory.mktemp("checks") / "history.db")


@pytest.fixture
def store(checks: CheckFacts) -> Iterator[Store]:
    with Store.open(checks.url) as opened:
        yield opened


def documented_keys(heading: str) -> list[str]:
    """The keys of the first table after ``heading`` in docs/reports.md."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    keys: list[str] = []
    started = False
    for line in section.splitlines():
        if line.startswith("| key |"):
            started = True
            continue
        if started and line.startswith("| ---"):
            continue
        if started and not line.startswith("|"):
            break
        if started:
            keys += re.findall(r"`([a-z_]+)`", line.split("|")[1])
    return keys


def test_json_has_exactly_the_documented_fields(store: Store, checks: CheckFacts) -> None:
    doc = check_to_json(load_check(store, checks.mixed_id), store=store)
    assert sorted(doc) == sorted(documented_keys("### JSON schema"))
    for item in doc["items"]:
        assert sorted(item) == sorted(documented_keys("Each element of `items`"))
    assert doc["schema"] == JSON_SCHEMA
    # Plain JSON types only: it round-trips unchanged.
    assert json.loads(json.dumps(doc)) == doc


def test_json_items_equal_the_stored_items(store: Store, checks: CheckFacts) -> None:
    doc = check_to_json(load_check(store, checks.mixed_id), store=store)
    engine = create_engine(checks.url)  # the truth, read straight from the database
    with Session(engine) as session:
        stored = session.scalars(select(CheckItem).where(CheckItem.check_id == checks.mixed_id)).all()
    engine.dispose()
    assert len(doc["items"]) == len(stored)
    by_key = {(i.benchmark, i.params_key): i for i in stored}
    for item in doc["items"]:
        row = by_key[(item["benchmark"], item["params_key"])]
        for name in (
            "impl",
            "verdict",
            "base_value",
            "head_value",
            "ratio",
            "ci_low",
            "ci_high",
            "p_value",
            "noise",
            "threshold",
            "method",
            "retried",
            "base_n",
            "head_n",
            "reason",
            "params",
        ):
            assert item[name] == getattr(row, name), name
    assert doc["counts"] == dict(
        sorted(Counter(i.verdict for i in stored).items(), key=lambda kv: list(doc["counts"]).index(kv[0]))
    )
    assert list(doc["counts"])[:2] == ["regression", "broken"]
    # Reading order: regressions first, the bigger one first.
    assert [i["verdict"] for i in doc["items"][:2]] == ["regression", "regression"]
    assert doc["items"][0]["ratio"] > doc["items"][1]["ratio"]
    # User text is data here, unescaped.
    assert any(i["benchmark"] == XSS and i["impl"] == "block|sparse" for i in doc["items"])


def test_json_environment_and_repro(store: Store, checks: CheckFacts) -> None:
    doc = check_to_json(load_check(store, checks.mixed_id), store=store)
    env = doc["environment"]
    assert env["recorded"] is True
    assert {d["key"] for d in env["differs"]} == {"driver", "torch"}
    assert env["base"]["torch"] == "2.13.0" and env["head"]["torch"] == "2.13.1"
    assert env["base"]["fingerprint.hostname"] == "baseline"  # shown, never a difference
    assert doc["repro"][0] == f"git checkout {'a' * 40}"
    assert doc["head"]["sha"] == "a" * 40 and doc["base"]["sha"] == "b" * 40
    assert doc["machine"]["key"] == "nvidia-h100-80gb-hbm3-x1"
    assert doc["verdict"] == "regression" and doc["exit_code"] == 1
    assert doc["headline"] == "perfguard: 2 regressions, 1 broken (gated)"
    assert doc["aa"] is False
    assert doc["counts_by_role"]["gated"]["regression"] == 2


def test_quiet_json(store: Store, checks: CheckFacts) -> None:
    doc = check_to_json(load_check(store, checks.quiet_id), store=store)
    assert doc["counts"] == {"unchanged": 9}
    assert doc["headline"] == "perfguard: no regressions (gated) · 9 unchanged"
    assert doc["counts_by_role"] == {"gated": {"unchanged": 9}}
    assert doc["environment"]["differs"] != []  # same two commits: the sides' software differs
