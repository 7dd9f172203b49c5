"""[tool.perfguard] from real pyproject.toml files: defaults, validation, override precedence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perfguard.config import Config, MiB, Override, RetryConfig, find_pyproject, load_config, parse_config
from perfguard.errors import ConfigError, PerfguardError


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "x"\n\n' + body)
    return path


def test_defaults_without_a_file_or_table(tmp_path: Path) -> None:
    config = load_config(None)
    assert config == Config()
    assert (config.threshold, config.alpha, config.max_iqr_ratio, config.max_round_cv) == (
        0.20,
        0.01,
        0.10,
        0.05,
    )
    assert config.effective_memory_threshold == 0.20
    assert config.memory_floor_bytes == 64 * MiB
    assert config.retry == RetryConfig(enabled=True, rounds=5)
    assert load_config(write(tmp_path, "")).threshold == 0.20


def test_documented_example_is_valid_and_means_what_the_docs_say(repo_root: Path, tmp_path: Path) -> None:
    """The complete example in docs/verdicts.md parses, and its overrides resolve as documented."""
    text = (repo_root / "docs" / "verdicts.md").read_text()
    section = text[text.index("## Configuration") :]
    example = re.search(r"```toml\n(.*?)```", section, re.S)
    assert example is not None
    config = load_config(write(tmp_path, example.group(1)))
    assert config.threshold == 0.20 and config.memory_floor_bytes == 64 * MiB
    assert len(config.overrides) == 4
    small = config.rule_for("dilated", "Forward.track_time", "time", {"seq_len": 256, "dtype": "float32"})
    assert small.gate is False and small.note
    big = config.rule_for("dilated", "Forward.track_time", "time", {"seq_len": 4096, "dtype": "float32"})
    assert big.gate is None and big.threshold == 0.20
    assert config.rule_for("multihead_ring", "ForwardBackward.track_time", "time").threshold == 0.30
    assert config.rule_for("block_sparse_ring", "PeakMemory.track_forward", "memory").threshold == 0.10
    assert config.rule_for("ring", "PeakMemory.track_forward", "memory").threshold == 0.20
    assert config.rule_for("hilbert_ring", "Work.track_forward_kernels", "kernels").threshold == 0.05
    assert config.rule_for("improved", "Work.track_forward_kernels", "kernels").threshold == 0.20
    assert config.effective_work_threshold == 0.20  # work_threshold = 0.20 in the example


def test_the_projects_own_pyproject_loads(repo_root: Path) -> None:
    assert load_config(repo_root / "pyproject.toml").threshold == 0.20


def test_all_keys_are_read(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[tool.perfguard]
threshold = 0.25
memory_threshold = 0.1
memory_floor_bytes = "1 GiB"
work_threshold = 0.05
alpha = 0.001
confidence = 0.99
max_iqr_ratio = 0.2
max_round_cv = 0.08
suspect_fraction = 0.5

[tool.perfguard.retry]
enabled = false
rounds = 7
max_rounds = 21
""",
    )
    c = load_config(path)
    assert (c.threshold, c.effective_memory_threshold, c.memory_floor_bytes) == (0.25, 0.1, 1024**3)
    assert (c.alpha, c.confidence, c.max_iqr_ratio, c.max_round_cv) == (0.001, 0.99, 0.2, 0.08)
    assert c.suspect_fraction == 0.5
    assert c.retry == RetryConfig(enabled=False, rounds=7, max_rounds=21)
    assert c.source == str(path)
    assert c.to_dict()["memory_threshold"] == 0.1
    assert c.effective_work_threshold == 0.05 and c.to_dict()["work_threshold"] == 0.05
    assert c.rule_for("ring", "Work.track_forward_ops", "ops").threshold == 0.05


@pytest.mark.parametrize(
    ("body", "key", "value"),
    [
        ("threshold = '20%'", "threshold", "'20%'"),
        ("threshold = 0", "threshold", "0"),
        ("threshold = 20", "threshold", "20"),  # a percentage, not a fraction
        ("threshold = true", "threshold", "True"),
        ("alpha = 1.5", "alpha", "1.5"),
        ("confidence = 1.0", "confidence", "1.0"),
        ("max_round_cv = -0.1", "max_round_cv", "-0.1"),
        ("memory_floor_bytes = '64 potatoes'", "memory_floor_bytes", "'64 potatoes'"),
        ("memory_floor_bytes = -1", "memory_floor_bytes", "-1"),
        ("[tool.perfguard.retry]\nrounds = 6\nmax_rounds = 5", "retry.max_rounds", "5"),
        ("retry = 5", "retry", "5"),
        ("[tool.perfguard.retry]\nrounds = 1", "retry.rounds", "1"),
        ("[tool.perfguard.retry]\nenabled = 'yes'", "retry.enabled", "'yes'"),
        ("[[tool.perfguard.override]]\nimpl = 'ring'\ngate = 'false'", "override #1.gate", "'false'"),
        ("[[tool.perfguard.override]]\nmetric = 'latency'\ngate = false", "override #1.metric", "'latency'"),
        ("[[tool.perfguard.override]]\nimpl = 'ring'\nthreshold = 0", "override #1.threshold", "0"),
        (
            "[[tool.perfguard.override]]\nparams = {seq_len = true}\ngate = false",
            "override #1.params.seq_len",
            "True",
        ),
    ],
)
def test_bad_values_name_the_key_and_the_value(tmp_path: Path, body: str, key: str, value: str) -> None:
    table = body if body.startswith("[") else f"[tool.perfguard]\n{body}"
    path = write(tmp_path, table)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = err.value.format_message()
    assert f"{key} = {value}" in message
    assert str(path) in message
    assert err.value.exit_code == 2


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("[tool.perfguard]\ntreshold = 0.2", "unknown key 'treshold' in [tool.perfguard]"),
        ("[tool.perfguard.retry]\nround = 3", "unknown key 'round' in [tool.perfguard.retry]"),
        ("[[tool.perfguard.override]]\nimpl = 'ring'\ngated = false", "unknown key 'gated'"),
        ("[[tool.perfguard.override]]\ngate = false", "override #1 selects nothing"),
        ("[[tool.perfguard.override]]\nimpl = 'ring'", "override #1 changes nothing"),
    ],
)
def test_structural_mistakes_are_named(tmp_path: Path, body: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_config(write(tmp_path, body))


def test_unknown_key_hint_lists_the_known_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "[tool.perfguard]\ntreshold = 0.2"))
    assert "threshold" in (err.value.hint or "")


def test_invalid_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[tool.perfguard\nthreshold = "))
    with pytest.raises(PerfguardError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_memory_floor_accepts_units() -> None:
    for text, expected in (
        ("64 MiB", 64 * MiB),
        ("64MiB", 64 * MiB),
        ("1GB", 10**9),
        ("512", 512),
        ("2 kib", 2048),
    ):
        assert parse_config({"memory_floor_bytes": text}).memory_floor_bytes == expected


# --- precedence ------------------------------------------------------------------------------


def test_last_matching_override_wins_key_by_key() -> None:
    config = parse_config(
        {
            "override": [
                {"impl": "multihead_*", "threshold": 0.3},
                {"impl": "multihead_ring", "gate": False},
                {"benchmark": "Forward.*", "threshold": 0.5},
                {"impl": "other", "threshold": 0.9},
            ]
        }
    )
    rule = config.rule_for("multihead_ring", "ForwardBackward.track_time", "time")
    assert (rule.threshold, rule.gate) == (0.3, False)  # #2 kept #1's threshold
    assert "override #1" in rule.source and "override #2" in rule.source
    rule = config.rule_for("multihead_ring", "Forward.track_time", "time")
    assert (rule.threshold, rule.gate) == (0.5, False)  # #3 came later than #1
    rule = config.rule_for("dilated", "ForwardBackward.track_time", "time")
    assert (rule.threshold, rule.gate, rule.source) == (0.2, None, "default")


def test_override_selectors_combine_with_and() -> None:
    ov = Override(impl="ring", metric="time", params={"seq_len": 256, "dtype": "*16"}, gate=False)
    assert ov.matches("ring", "Forward.track_time", "time", {"seq_len": 256, "dtype": "bfloat16"})
    assert not ov.matches("ring", "Forward.track_time", "time", {"seq_len": 256, "dtype": "float32"})
    assert not ov.matches("ring", "Forward.track_time", "time", {"seq_len": 512, "dtype": "float16"})
    assert not ov.matches("ring", "Forward.track_time", "memory", {"seq_len": 256, "dtype": "float16"})
    assert not ov.matches("ring", "Forward.track_time", "time", {"dtype": "float16"})  # param absent
    assert ov.matches("ring", "X", "time", {"seq_len": "256", "dtype": "float16"})  # text match


def test_cli_threshold_replaces_the_global_threshold_only() -> None:
    config = parse_config({"threshold": 0.25, "override": [{"impl": "ring", "threshold": 0.4}]})
    cli = config.with_threshold(0.1)
    assert cli.threshold == 0.1 and cli.threshold_source == "--threshold"
    assert cli.rule_for("dilated", "Forward.track_time", "time").threshold == 0.1
    assert cli.rule_for("ring", "Forward.track_time", "time").threshold == 0.4
    assert cli.effective_memory_threshold == 0.1  # follows the threshold when not set
    assert config.with_threshold(None) is config
    with pytest.raises(ConfigError, match="--threshold = -1"):
        config.with_threshold(-1)


def test_explicit_memory_threshold_is_kept_under_cli_threshold() -> None:
    config = parse_config({"memory_threshold": 0.05}).with_threshold(0.5)
    assert config.rule_for("ring", "PeakMemory.track_forward", "memory").threshold == 0.05
    assert config.rule_for("ring", "Forward.track_time", "time").threshold == 0.5


def test_load_config_applies_threshold_argument(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "[tool.perfguard]\nthreshold = 0.3"), threshold=0.15).threshold == 0.15


def test_find_pyproject_walks_up(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert find_pyproject(deep) == path.resolve()
    assert find_pyproject(Path("/")) is None or find_pyproject(Path("/")) == Path("/pyproject.toml")


def test_to_dict_is_json_able() -> None:
    import json

    config = parse_config({"override": [{"impl": "ring", "params": {"seq_len": 256}, "gate": False}]})
    data = json.loads(json.dumps(config.to_dict()))
    assert data["overrides"] == [{"impl": "ring", "params": {"seq_len": 256}, "gate": False}]


@pytest.mark.parametrize("key", ["bootstrap_resamples", "seed"])
def test_a_removed_key_says_why(tmp_path: Path, key: str) -> None:
    """Issue 30: the interval is over rounds; the bootstrap's settings are gone, and saying so beats
    "unknown key"."""
    path = write(tmp_path, f"[tool.perfguard]\n{key} = 7\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{key!r} in [tool.perfguard] is no longer a setting" in err.value.format_message()


def test_retry_max_rounds_defaults_to_three_looks(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "[tool.perfguard]\n")).retry == RetryConfig(True, 5, 15)
    path = write(tmp_path, "[tool.perfguard.retry]\nrounds = 2\n")
    assert load_config(path).retry == RetryConfig(True, 2, 6)
    path = write(tmp_path, "[tool.perfguard.retry]\nrounds = 400\n")
    assert load_config(path).retry == RetryConfig(True, 400, 1000)
