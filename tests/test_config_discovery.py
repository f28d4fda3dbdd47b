"""Configuration discovery (issue 37 item 4): ``[tool.castfind]`` is read from the nearest ``pyproject.toml`` that
has the table, walking up from the scanned root to the repository top (castfind.core.config.config_folder);
``--config FILE`` names one instead; command-line options win over both.

The repository is built in a temporary folder: a ``.git`` entry at its top and fixtures/scan/minisrv copied to
``srv/`` (findings in ``minisrv/backend.py`` and ``minisrv/pool.py``). The setting the tests follow is
``exclude``: a file it names is not indexed, so its findings disappear.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from castfind.core.config import ConfigError, config_folder, discover_config, load_config_file
from castfind.core.paths import repository_top
from tests.support import REPO, run_castfind

FIX = REPO / "fixtures" / "scan" / "minisrv"
EXCLUDE_POOL = '[tool.castfind]\nexclude = ["pool.py"]\n'
EXCLUDE_BACKEND = '[tool.castfind]\nexclude = ["backend.py"]\n'


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    top = tmp_path / "repo"
    (top / ".git").mkdir(parents=True)
    shutil.copytree(FIX, top / "srv")
    return top


def files_with_findings(cwd: Path, *args: str) -> set[str]:
    """The names of the files with findings in ``castfind scan ARGS --json`` run from ``cwd``."""
    r = run_castfind("scan", *args, "--no-cache", "-j", "1", "--json", cwd=cwd)
    assert r.returncode in (0, 1), r.stderr
    return {Path(f["path"]).name for f in json.loads(r.stdout)["findings"]}


def one_error_line(r) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    return line


def test_without_any_config_both_files_have_findings(repo: Path) -> None:
    assert files_with_findings(repo, "srv") == {"backend.py", "pool.py"}


@pytest.mark.parametrize("cwd", [".", "srv", "srv/minisrv"])
def test_the_repository_top_config_applies_to_a_subfolder_scan(repo: Path, cwd: str) -> None:
    (repo / "pyproject.toml").write_text(EXCLUDE_POOL)
    root = str(repo / "srv") if cwd != "." else "srv"
    assert files_with_findings(repo / cwd, root) == {"backend.py"}
    assert discover_config(repo / "srv").source == repo / "pyproject.toml"


def test_a_pyproject_without_the_table_is_passed_over(repo: Path) -> None:
    (repo / "pyproject.toml").write_text(EXCLUDE_POOL)
    (repo / "srv" / "pyproject.toml").write_text('[project]\nname = "srv"\n[tool.ruff]\nline-length = 100\n')
    assert files_with_findings(repo, "srv") == {"backend.py"}


def test_the_nearer_config_wins(repo: Path) -> None:
    (repo / "pyproject.toml").write_text(EXCLUDE_POOL)
    (repo / "srv" / "pyproject.toml").write_text(EXCLUDE_BACKEND)
    assert files_with_findings(repo, "srv") == {"pool.py"}
    assert discover_config(repo / "srv" / "minisrv").source == repo / "srv" / "pyproject.toml"


def test_discovery_stops_at_the_repository_top(repo: Path) -> None:
    (repo.parent / "pyproject.toml").write_text(EXCLUDE_POOL)  # above the repository: not this project's
    assert files_with_findings(repo, "srv") == {"backend.py", "pool.py"}
    assert discover_config(repo / "srv").source is None


def test_outside_a_repository_only_the_root_itself_is_read(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    shutil.copytree(FIX, plain / "srv")
    if repository_top(plain) is not None:
        pytest.skip(f"the temporary folder lies in a git repository ({repository_top(plain)})")
    (plain / "pyproject.toml").write_text(EXCLUDE_POOL)
    assert files_with_findings(plain, "srv") == {"backend.py", "pool.py"}
    (plain / "srv" / "pyproject.toml").write_text(EXCLUDE_POOL)
    assert files_with_findings(plain, "srv") == {"backend.py"}


def test_config_option_wins_over_discovery(repo: Path, tmp_path: Path) -> None:
    (repo / "pyproject.toml").write_text(EXCLUDE_POOL)
    (repo / "srv" / "pyproject.toml").write_text(EXCLUDE_POOL)
    other = tmp_path / "elsewhere" / "ci.toml"
    other.parent.mkdir()
    other.write_text(EXCLUDE_BACKEND)
    assert files_with_findings(repo, "srv", "--config", str(other)) == {"pool.py"}
    assert load_config_file(other).source == other


def test_command_line_options_win_over_config(repo: Path, tmp_path: Path) -> None:
    (repo / "pyproject.toml").write_text(EXCLUDE_POOL)
    assert files_with_findings(repo, "srv", "--exclude", "nothing.py") == {"backend.py", "pool.py"}
    other = tmp_path / "ci.toml"
    other.write_text(EXCLUDE_BACKEND)
    assert files_with_findings(repo, "srv", "--config", str(other), "--exclude", "pool.py") == {"backend.py"}


@pytest.mark.parametrize(("text", "needle"), [
    (None, "no such file"),
    ("[tool.castfind\nexclude = 3\n", "not valid TOML"),
    ('[project]\nname = "x"\n', "has no [tool.castfind] table"),
    ('[tool.castfind]\nexclud = ["x"]\n', "did you mean 'exclude'"),
    ('[tool.castfind]\nbaseline = "../../outside.json"\n', "outside the project folder"),
])
def test_a_missing_or_broken_config_file_is_one_line_exit_2(repo: Path, tmp_path: Path, text: str | None,
                                                             needle: str) -> None:
    config = tmp_path / "cfg" / "castfind.toml"
    config.parent.mkdir()
    if text is not None:
        config.write_text(text)
    line = one_error_line(run_castfind("scan", "srv", "--no-cache", "--config", str(config), cwd=repo))
    assert line.startswith("castfind: ") and str(config) in line and needle in line, line


def test_a_discovered_config_keeps_its_paths_inside_its_own_folder(repo: Path) -> None:
    (repo.parent / "shadow.json").write_text("[]")
    (repo / "pyproject.toml").write_text('[tool.castfind]\nbaseline = "../shadow.json"\n')
    line = one_error_line(run_castfind("scan", "srv", "--no-cache", cwd=repo / "srv"))
    assert "[tool.castfind] baseline" in line and "outside the project folder" in line, line
    with pytest.raises(ConfigError, match="outside the project folder"):
        discover_config(repo / "srv")


def test_config_folder_is_relative_when_the_start_is(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "pyproject.toml").write_text(EXCLUDE_POOL)
    monkeypatch.chdir(repo / "srv")
    assert config_folder(".") == Path("..")
    assert config_folder("minisrv/backend.py") == Path("..")
    assert config_folder(repo / "srv") == repo
    cfg = discover_config(".")
    assert cfg.exclude == ("pool.py",) and cfg.source == Path("..") / "pyproject.toml"
