"""The README's *Choosing rules* examples run as written: each ``$ castfind ...`` line's exit code (its
``# exit N`` comment) and the summary line shown under it. A ``toml`` block in between becomes the
``pyproject.toml`` of a copy of ``fixtures/scan`` that the following examples scan."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

from tests.support import REPO, run_castfind

BLOCK = re.compile(r"^```(console|toml)\n(.*?)^```", re.M | re.S)


def _section(title: str) -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index(f"\n### {title}\n")
    return readme[start:readme.index("\n### ", start + 1)]


def _examples() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(_section("Choosing rules"))]


def test_the_section_has_console_and_toml_examples() -> None:
    kinds = [k for k, _ in _examples()]
    assert kinds == ["console", "toml", "console"]
    text = _section("Choosing rules")
    for flag in ("--select", "--ignore", "--extend-select", "--exit-zero", "per-file-ignores"):
        assert flag in text


def test_choosing_rules_examples_run_as_written(tmp_path: Path) -> None:
    work = tmp_path / "work"
    shutil.copytree(REPO / "fixtures/scan", work / "fixtures/scan")
    cache = str(tmp_path / "cache")
    ran = 0
    for kind, body in _examples():
        if kind == "toml":
            (work / "fixtures/scan/pyproject.toml").write_text(body, encoding="utf-8")
            continue
        lines = body.splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("$ "):
                continue
            command, _, comment = line[2:].partition("#")
            expected_exit = int(re.fullmatch(r"\s*exit (\d)\s*", comment).group(1))  # type: ignore[union-attr]
            args = shlex.split(command)
            assert args[0] == "castfind"
            proc = run_castfind(*args[1:], "--cache-dir", cache, cwd=work)
            assert proc.returncode == expected_exit, (line, proc.stderr)
            assert proc.stdout.splitlines()[-1] == lines[i + 1], line
            ran += 1
    assert ran == 6


def test_the_options_table_names_each_json_finding_key_once() -> None:
    """The scan options table has one ``--json`` row, and it lists exactly the keys a finding's JSON record has
    (a merge once left three rows, each naming a different subset)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith('| `--json` | `{"findings": [{')]
    assert len(rows) == 1
    listed = re.findall(r'"(\w+)"(?!\?)', rows[0][:rows[0].index("}]")])  # "key"? : only on some scans
    r = run_castfind("scan", str(REPO / "fixtures/scan"), "--no-cache", "--json")
    record = json.loads(r.stdout)["findings"][0]
    assert listed[1:] == list(record)  # listed[0] is "findings"
