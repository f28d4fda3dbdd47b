"""castfind init: starter config and pre-commit hook, idempotent, never overwriting (castfind.init)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from castfind.core.config import Config, load_config
from castfind.init import PRECOMMIT_SNIPPET, STARTER_SECTION, init
from tests.support import run_castfind


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def test_fresh_folder_gets_both_files_and_second_run_changes_nothing(tmp_path: Path) -> None:
    assert init(tmp_path) == [
        "created pyproject.toml with a [tool.castfind] section",
        "created .pre-commit-config.yaml with the castfind hook",
    ]
    assert (tmp_path / "pyproject.toml").read_text() == STARTER_SECTION
    hooks = yaml.safe_load((tmp_path / ".pre-commit-config.yaml").read_text())
    assert hooks == {"repos": [{"repo": "local", "hooks": [
        {"id": "castfind", "name": "castfind (whole-buffer dtype casts on hot paths)", "entry": "castfind scan --only",
         "language": "system", "types": ["python"]}]}]}
    # The starter section is valid config with the defaults spelt out.
    assert load_config(tmp_path) == Config(roots=(tmp_path / ".",), source=tmp_path / "pyproject.toml")

    before = snapshot(tmp_path)
    assert init(tmp_path) == [
        "pyproject.toml already has [tool.castfind]; left it unchanged",
        ".pre-commit-config.yaml already runs the castfind hook; left it unchanged",
    ]
    assert snapshot(tmp_path) == before
    assert sorted(before) == [".pre-commit-config.yaml", "pyproject.toml"]  # no temp files left


@pytest.mark.parametrize("existing", ['[project]\nname = "x"\n', '[project]\nname = "x"', ""])
def test_appends_to_existing_pyproject(tmp_path: Path, existing: str) -> None:
    (tmp_path / "pyproject.toml").write_text(existing)
    assert init(tmp_path)[0] == "added a [tool.castfind] section to pyproject.toml"
    text = (tmp_path / "pyproject.toml").read_text()
    assert text.startswith(existing)
    assert text.endswith(STARTER_SECTION)
    assert load_config(tmp_path).fail_on == "error"
    before = snapshot(tmp_path)
    init(tmp_path)
    assert snapshot(tmp_path) == before


def test_never_overwrites_an_existing_section(tmp_path: Path) -> None:
    mine = '[tool.castfind]\nfail-on = "info"\n# my comment\n'
    (tmp_path / "pyproject.toml").write_text(mine)
    assert init(tmp_path)[0] == "pyproject.toml already has [tool.castfind]; left it unchanged"
    assert (tmp_path / "pyproject.toml").read_text() == mine


def test_inline_tool_table_and_broken_toml_are_left_alone(tmp_path: Path) -> None:
    inline = 'tool = {black = {line-length = 100}}\n'
    (tmp_path / "pyproject.toml").write_text(inline)
    lines = init(tmp_path)
    assert lines[0] == "skipped pyproject.toml: a [tool.castfind] header cannot be appended to its [tool] table; add:"
    assert lines[1] == "[tool.castfind]"
    assert (tmp_path / "pyproject.toml").read_text() == inline

    broken = "[project\nname = 1\n"
    (tmp_path / "pyproject.toml").write_text(broken)
    assert init(tmp_path)[0].startswith("skipped pyproject.toml: it is not valid TOML (")
    assert (tmp_path / "pyproject.toml").read_text() == broken


def test_existing_precommit_without_hook_is_not_rewritten(tmp_path: Path) -> None:
    theirs = (
        "# my hooks\nrepos:\n  - repo: https://github.com/psf/black\n    rev: 24.1.0\n"
        "    hooks:\n      - id: black\n"
    )
    (tmp_path / ".pre-commit-config.yaml").write_text(theirs)
    lines = init(tmp_path)
    assert lines[1:] == [
        "left .pre-commit-config.yaml unchanged (castfind never rewrites it); add this entry under repos:",
        *PRECOMMIT_SNIPPET.splitlines()[1:],
    ]
    assert lines[2] == "  - repo: local"
    assert (tmp_path / ".pre-commit-config.yaml").read_text() == theirs
    # Same answer the second time, same bytes on disk.
    assert init(tmp_path)[1:] == lines[1:]
    assert (tmp_path / ".pre-commit-config.yaml").read_text() == theirs


def test_existing_precommit_with_castfind_from_a_fork_counts(tmp_path: Path) -> None:
    theirs = "repos:\n  - repo: local\n    hooks:\n      - id: castfind\n        entry: castfind scan\n"
    (tmp_path / ".pre-commit-config.yaml").write_text(theirs)
    assert init(tmp_path)[1] == ".pre-commit-config.yaml already runs the castfind hook; left it unchanged"


@pytest.mark.parametrize("content", ["repos: [unclosed\n", "- just\n- a list\n", ""])
def test_unreadable_or_odd_precommit_is_left_alone(tmp_path: Path, content: str) -> None:
    (tmp_path / ".pre-commit-config.yaml").write_text(content)
    lines = init(tmp_path)
    assert lines[1].startswith("left .pre-commit-config.yaml unchanged")
    assert "  - repo: local" in lines
    assert (tmp_path / ".pre-commit-config.yaml").read_text() == content


def test_root_must_be_a_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        init(tmp_path / "absent")
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        init(tmp_path / "file")


def test_created_precommit_config_passes_pre_commit_own_validation(tmp_path: Path) -> None:
    clientlib = pytest.importorskip("pre_commit.clientlib")  # in the [test] extra; skipped elsewhere
    init(tmp_path)
    config = clientlib.load_config(str(tmp_path / ".pre-commit-config.yaml"))
    assert config["repos"][0]["hooks"][0]["id"] == "castfind"


def test_crlf_pyproject_keeps_crlf_line_endings(tmp_path: Path) -> None:
    original = b'[project]\r\nname = "x"\r\n'
    (tmp_path / "pyproject.toml").write_bytes(original)
    assert init(tmp_path)[0] == "added a [tool.castfind] section to pyproject.toml"
    data = (tmp_path / "pyproject.toml").read_bytes()
    assert data.startswith(original)
    assert data.endswith(STARTER_SECTION.replace("\n", "\r\n").encode())
    assert b"\n" not in data.replace(b"\r\n", b"")  # no bare LF anywhere
    assert load_config(tmp_path).fail_on == "error"
    before = snapshot(tmp_path)
    init(tmp_path)
    assert snapshot(tmp_path) == before


def test_crlf_pyproject_without_a_final_newline(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_bytes(b'[project]\r\nname = "x"')
    init(tmp_path)
    data = (tmp_path / "pyproject.toml").read_bytes()
    assert data.startswith(b'[project]\r\nname = "x"\r\n\r\n[tool.castfind]\r\n')
    assert b"\n" not in data.replace(b"\r\n", b"")


def test_symlinked_pyproject_is_edited_in_place(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "pyproject.toml").write_text('[project]\nname = "x"\n')
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").symlink_to(Path("..") / "shared" / "pyproject.toml")
    assert init(project)[0] == "added a [tool.castfind] section to pyproject.toml"
    assert (project / "pyproject.toml").is_symlink()
    assert (shared / "pyproject.toml").read_text().endswith(STARTER_SECTION)
    assert sorted(p.name for p in shared.iterdir()) == ["pyproject.toml"]  # no temp file left by the target


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_file_modes_follow_the_umask_and_an_edited_file_keeps_its_mode(tmp_path: Path, umask_022: None) -> None:
    init(tmp_path)
    assert stat.S_IMODE((tmp_path / "pyproject.toml").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / ".pre-commit-config.yaml").stat().st_mode) == 0o644
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (other / "pyproject.toml").chmod(0o664)
    init(other)
    assert stat.S_IMODE((other / "pyproject.toml").stat().st_mode) == 0o664


def test_cli_init_creates_both_files_and_is_idempotent(tmp_path: Path) -> None:
    r = run_castfind("init", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "created pyproject.toml with a [tool.castfind] section",
        "created .pre-commit-config.yaml with the castfind hook",
    ]
    before = snapshot(tmp_path)
    r = run_castfind("init", cwd=tmp_path)  # the folder defaults to the current one
    assert r.returncode == 0, r.stderr
    assert "already has [tool.castfind]" in r.stdout
    assert snapshot(tmp_path) == before


def test_cli_init_help_explains_what_it_does() -> None:
    r = run_castfind("init", "--help")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    for words in ("pyproject.toml", "[tool.castfind]", ".pre-commit-config.yaml", "never"):
        assert words in text, r.stdout
    assert "init" in run_castfind("--help").stdout


def test_cli_init_bad_folder_or_unwritable_file_is_one_line_exit_2(tmp_path: Path) -> None:
    for bad in (tmp_path / "absent", tmp_path / "afile"):
        if bad.name == "afile":
            bad.write_text("")
        r = run_castfind("init", str(bad))
        assert r.returncode == 2, r.stdout + r.stderr
        (line,) = r.stderr.strip().splitlines()
        assert line.startswith(f"castfind: {bad}: ") and " — " in line
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").mkdir()  # a folder where the file should be
    r = run_castfind("init", str(tmp_path / "proj"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"castfind: {tmp_path / 'proj' / 'pyproject.toml'}: ")
