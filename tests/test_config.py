"""[tool.castfind] loading, validation and command-line merging (castfind.core.config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from castfind.core.config import Config, ConfigError, config_problems, load_config, merge


def write(root: Path, text: str) -> Path:
    path = root / "pyproject.toml"
    path.write_text(text)
    return path


def test_missing_pyproject_or_section_gives_defaults(tmp_path: Path) -> None:
    assert load_config(tmp_path) == Config()
    write(tmp_path, '[project]\nname = "x"\n\n[tool.black]\nline-length = 100\n')
    assert load_config(tmp_path) == Config()
    assert config_problems(tmp_path) == []


def test_all_keys(tmp_path: Path) -> None:
    path = write(tmp_path, """
[tool.castfind]
roots = ["python", "vendor/flashinfer"]
rules = ["castfind_rules"]
exclude = ["**/tests/**", "benchmarks/*"]
entry-points = ["*.run_batch"]
fail-on = "warning"
baseline = "castfind-baseline.json"
""")
    assert load_config(tmp_path) == Config(
        roots=(tmp_path / "python", tmp_path / "vendor/flashinfer"),
        rules=(tmp_path / "castfind_rules",),
        exclude=("**/tests/**", "benchmarks/*"),
        entry_points=("*.run_batch",),
        fail_on="warning",
        baseline=tmp_path / "castfind-baseline.json",
        source=path,
    )


def test_unknown_key_names_it_and_the_closest_valid_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[tool.castfind]\nentry_points = ["*.forward"]\n')
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    err = info.value
    assert (err.path, err.key) == (str(path), "entry_points")
    assert err.reason == "unknown key; did you mean 'entry-points'?"
    assert str(err) == f"{path}: [tool.castfind] entry_points: unknown key; did you mean 'entry-points'?"


def test_unknown_key_without_a_close_match_lists_valid_keys(tmp_path: Path) -> None:
    write(tmp_path, "[tool.castfind]\nzzz = 1\n")
    valid = "roots, rules, exclude, entry-points, fail-on, baseline"
    with pytest.raises(ConfigError, match=f"unknown key; valid keys: {valid}"):
        load_config(tmp_path)


@pytest.mark.parametrize(
    ("line", "key", "reason"),
    [
        ('roots = "python"', "roots", "must be a list of strings, got str"),
        ("rules = [1]", "rules", "must be a list of strings, got an item of type int: 1"),
        ("exclude = {a = 1}", "exclude", "must be a list of strings, got dict"),
        ('fail-on = "fatal"', "fail-on", "must be one of error, warning, info, got 'fatal'"),
        ("fail-on = 1", "fail-on", "must be one of error, warning, info, got int"),
        ("baseline = true", "baseline", "must be a path string, got bool: True"),
    ],
)
def test_wrong_types(tmp_path: Path, line: str, key: str, reason: str) -> None:
    write(tmp_path, f"[tool.castfind]\n{line}\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert (info.value.key, info.value.reason) == (key, reason)


def test_config_problems_lists_every_problem(tmp_path: Path) -> None:
    write(tmp_path, '[tool.castfind]\nroot = ["a"]\nfail-on = "loud"\nexclude = ["ok"]\n')
    assert [(p.key, p.reason) for p in config_problems(tmp_path)] == [
        ("root", "unknown key; did you mean 'roots'?"),
        ("fail-on", "must be one of error, warning, info, got 'loud'"),
    ]


def test_bad_toml_and_non_table_section(tmp_path: Path) -> None:
    path = write(tmp_path, "[tool.castfind\nroots = [")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert info.value.key is None
    assert info.value.reason.startswith("not valid TOML: ")
    assert str(info.value).startswith(f"{path}: [tool.castfind]: not valid TOML")
    write(tmp_path, '[tool]\ncastfind = "on"\n')
    with pytest.raises(ConfigError, match="must be a table, got str"):
        load_config(tmp_path)
    assert [p.reason for p in config_problems(tmp_path)] == ["must be a table, got str"]


def test_unreadable_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_bytes(b"\xff\xfe[tool]")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path)


def test_merge_cli_values_win_and_none_or_empty_do_not(tmp_path: Path) -> None:
    configured = Config(roots=(tmp_path / "python",), exclude=("a/*",), fail_on="warning",
                        baseline=tmp_path / "b.json", source=tmp_path / "pyproject.toml")
    merged = merge(configured, roots=["src", "/opt/x"], exclude=[], fail_on="info", baseline=None,
                   entry_points=("*.step",), rules=None)
    assert merged == Config(roots=(Path("src"), Path("/opt/x")), exclude=("a/*",), entry_points=("*.step",),
                            fail_on="info", baseline=tmp_path / "b.json", source=tmp_path / "pyproject.toml")
    assert merge(configured) == configured
    assert merge(configured, baseline="other.json").baseline == Path("other.json")


def test_merge_rejects_unknown_names_and_levels() -> None:
    with pytest.raises(TypeError, match="unknown setting"):
        merge(Config(), fail_level="error")
    with pytest.raises(ValueError, match="fail_on must be one of"):
        merge(Config(), fail_on="fatal")
