"""The one path convention (castfind.core.paths): every format names a finding's file relative to the working
directory, and SARIF relative to the repository top, whatever folder castfind is run from (issue 37 item 1).

The repository is built in a temporary folder: a ``.git`` entry at its top and fixtures/scan/minisrv copied to
``srv/``, so the scanned root is a subfolder of the repository, as ``paths: python/sglang`` is in the Action.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from castfind import cli
from castfind.core.paths import display_path, repository_top
from tests.support import REPO

runner = CliRunner()
FIX = REPO / "fixtures" / "scan" / "minisrv"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    top = tmp_path_factory.mktemp("repo")
    (top / ".git").mkdir()
    shutil.copytree(FIX, top / "srv")
    (top / "docs").mkdir()
    return top


def _scan(cwd: Path, root: str, out: Path, *extra: str, code: int = 1) -> dict[str, Path]:
    """Scan ``root`` from ``cwd`` into one file per format; the text report goes to ``out/text``. ``code``: the
    exit code expected (1: minisrv has errors)."""
    out.mkdir(exist_ok=True)
    files = {name: out / name for name in ("text", "sarif", "json", "gitlab", "junit", "markdown", "github")}
    args = ["scan", root, "--no-cache", "-j", "1", "--output", str(files["text"]), "--sarif", str(files["sarif"]),
            *(a for name in ("json", "gitlab", "junit", "markdown", "github")
              for a in (f"--{name}-output", str(files[name]))), *extra]
    old = os.getcwd()
    os.chdir(cwd)
    try:
        r = runner.invoke(cli.app, args)
    finally:
        os.chdir(old)
    assert r.exit_code == code, r.output
    return files


def _sarif_files(doc: dict) -> list[tuple[Path, int, str]]:
    """Each result's file on disk (its URI read against its base), line and expression."""
    run = doc["runs"][0]
    bases = {k: Path(unquote(urlparse(v["uri"]).path)) for k, v in run["originalUriBaseIds"].items()}
    for v in run["originalUriBaseIds"].values():
        assert v["uri"].startswith("file://") and v["uri"].endswith("/")
    out = []
    for res in run["results"]:
        loc = res["locations"][0]["physicalLocation"]
        art = loc["artifactLocation"]
        assert not art["uri"].startswith(("/", "file:", "..")), art
        out.append((bases[art["uriBaseId"]] / unquote(art["uri"]), loc["region"]["startLine"],
                    res["properties"]["expr"]))
    return out


@pytest.mark.parametrize("where", ["top", "subfolder"])
def test_sarif_uris_are_relative_to_the_repository_top(repo: Path, tmp_path: Path, where: str) -> None:
    cwd, root = (repo, "srv") if where == "top" else (repo / "docs", "../srv")
    files = _scan(cwd, root, tmp_path / "out")
    doc = json.loads(files["sarif"].read_text())
    run = doc["runs"][0]
    assert run["originalUriBaseIds"] == {"SRCROOT": {"uri": repo.as_uri() + "/"}}
    found = _sarif_files(doc)
    assert len(found) == 6
    for path, line, expr in found:
        # The URI names the file on disk, under srv/ (the scanned subfolder), and its line holds the cast.
        assert path.is_file(), path
        assert path.relative_to(repo).parts[0] == "srv"
        assert expr in path.read_text().splitlines()[line - 1]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
    assert uris == {"srv/minisrv/backend.py", "srv/minisrv/pool.py"}


def test_sarif_outside_a_repository_is_relative_to_the_working_directory(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    shutil.copytree(FIX, plain / "srv")
    if repository_top(plain) is not None:
        pytest.skip(f"the temporary folder lies in a git repository ({repository_top(plain)})")
    files = _scan(plain, "srv", tmp_path / "out")
    doc = json.loads(files["sarif"].read_text())
    assert doc["runs"][0]["originalUriBaseIds"] == {"SRCROOT": {"uri": plain.as_uri() + "/"}}
    for path, line, expr in _sarif_files(doc):
        assert path.is_file() and expr in path.read_text().splitlines()[line - 1]


def _named(files: dict[str, Path], statistics: Path) -> dict[str, set[str]]:
    """The file each format names for its findings."""
    text = files["text"].read_text()
    gitlab = json.loads(files["gitlab"].read_text())
    junit = ET.fromstring(files["junit"].read_text())
    github = files["github"].read_text()
    md = files["markdown"].read_text()
    stats = statistics.read_text()
    return {
        "text": set(re.findall(r"^(\S+\.py):\d+:\d+: CF", text, re.M)),
        "json": {f["file"] for f in json.loads(files["json"].read_text())["findings"]},
        "gitlab": {issue["location"]["path"] for issue in gitlab},
        "junit": {case.get("name", "").split(" ", 1)[1].rsplit(":", 1)[0] for case in junit.iter("testcase")},
        "github": set(re.findall(r"file=([^,]+),", github)),
        "markdown": set(re.findall(r"^\| CF\d+ \| \w+ \| `([^`]+\.py):\d+`", md, re.M)),  # the table's location
        "statistics": set(re.findall(r"^\s+\d+\s+(\S+\.py)$", stats, re.M)),
    }


@pytest.mark.parametrize("where", ["top, relative root", "top, absolute root", "subfolder", "outside the repository"])
def test_every_format_names_the_same_file_from_any_working_directory(repo: Path, tmp_path: Path, where: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cwd, root = {"top, relative root": (repo, "srv"), "top, absolute root": (repo, str(repo / "srv")),
                 "subfolder": (repo / "docs", "../srv"), "outside the repository": (elsewhere, str(repo / "srv"))}[where]
    files = _scan(cwd, root, tmp_path / "out")
    stats = tmp_path / "stats.txt"
    _scan(cwd, root, tmp_path / "out2", "--statistics")
    stats.write_text((tmp_path / "out2" / "text").read_text())
    named = _named(files, stats)
    # What a person at ``cwd`` types to open the file: relative to cwd, except an absolute root outside it.
    src = repo / "srv" / "minisrv"
    if where == "outside the repository":
        expected = {str(src / "backend.py"), str(src / "pool.py")}
    else:
        expected = {os.path.relpath(src / "backend.py", cwd), os.path.relpath(src / "pool.py", cwd)}
    for fmt, shown in named.items():
        assert shown == expected, fmt
        for name in shown:  # each one opens from the working directory
            assert (cwd / name).is_file(), (fmt, name)
    # The Markdown charts (the cast, the allocation, provenance steps) name files the same way as its table.
    md = re.sub(r"<wbr>|</?code>", "", files["markdown"].read_text())
    in_charts = set(re.findall(r'([^\s`(">]+\.py):\d+', md))
    assert in_charts and in_charts <= expected, in_charts


def test_display_path_is_relative_to_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path)
    assert display_path("a", "pkg/x.py") == "a/pkg/x.py"
    assert display_path(str(tmp_path / "a"), "pkg/x.py") == "a/pkg/x.py"
    assert display_path("../b", "x.py") == "../b/x.py"
    assert display_path("/elsewhere/root", "x.py") == "/elsewhere/root/x.py"
    assert display_path("", "x.py") == "x.py"


def test_repository_top_walks_up_to_a_git_entry(tmp_path: Path) -> None:
    (tmp_path / "top" / "a" / "b").mkdir(parents=True)
    (tmp_path / "top" / ".git").write_text("gitdir: /elsewhere\n")  # a worktree's .git is a file
    assert repository_top(tmp_path / "top" / "a" / "b") == str(tmp_path / "top")
    assert repository_top(tmp_path / "top") == str(tmp_path / "top")
    (tmp_path / "top" / "a" / "x.py").write_text("")
    assert repository_top(tmp_path / "top" / "a" / "x.py") == str(tmp_path / "top")


def test_a_baseline_matches_from_any_working_directory(repo: Path, tmp_path: Path) -> None:
    """Baselines key a finding by its path relative to its scanned root, not by the path shown: one written from
    the repository top hides the same findings when the scan runs from a subfolder with another root spelling."""
    baseline = tmp_path / "baseline.json"
    old = os.getcwd()
    os.chdir(repo)
    try:
        r = runner.invoke(cli.app, ["scan", "srv", "--no-cache", "-j", "1", "--write-baseline", str(baseline)])
    finally:
        os.chdir(old)
    assert r.exit_code in (0, 1), r.output
    entries = json.loads(baseline.read_text())["findings"]
    assert {e["path"] for e in entries} == {"minisrv/backend.py", "minisrv/pool.py"}
    files = _scan(repo / "docs", "../srv", tmp_path / "out", "--baseline", str(baseline), code=0)
    doc = json.loads(files["json"].read_text())
    assert doc["findings"] == [] and doc["stats"]["baseline_hidden"] == 6
