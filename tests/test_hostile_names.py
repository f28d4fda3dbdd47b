"""File names castfind does not choose: names that are not UTF-8, names holding newlines and other control
characters, symlinks that lead out of the root. Each is at most one diagnostic; the rest of the tree is
scanned and reported in every format, cached and not, and no output line carries a raw control character."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, run_castfind

KV = "def forward_decode(self, q):\n    return self.token_to_kv_pool.get_key_buffer(0).to(q.dtype)\n"
BAD_BYTES = b"bad\xff\xfe.py"
INJECT = "x\n::warning file=README.md::injected\n.py"
#: The file outputs a scan can write next to the document on stdout, by option.
OUTPUTS = {"--json-output": "out.json", "--sarif": "out.sarif", "--github-output": "out.github",
           "--gitlab-output": "out.gitlab", "--junit-output": "out.xml", "--markdown-output": "out.md"}


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[bytes]:
    """castfind with bytes out (a raw undecodable byte must show up, not be replaced)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "castfind", *args], cwd=cwd, env=env, capture_output=True,
                          timeout=600)


def _tree(tmp: Path) -> Path:
    proj = tmp / "proj"
    shutil.copytree(REPO / "fixtures" / "scan", proj)
    (proj / "plain.py").write_text(KV)
    return proj


def _keys(doc: dict) -> set[tuple[str, int, str]]:
    return {(f["path"], f["line"], f["rule"]) for f in doc["findings"]}


def _control_free(data: bytes, where: str) -> None:
    text = data.decode("utf-8")  # strict: an undecodable byte fails here
    for line in text.split("\n"):
        bad = [c for c in line if (not c.isprintable() and c != "\t") or c == "\ufffd"]
        assert not bad, f"{where}: raw control character {bad!r} in {line!r}"


def _scan_everything(proj: Path, out: Path, *cache: str) -> tuple[subprocess.CompletedProcess[bytes], dict]:
    """One scan writing every format: text on stdout, the others to files under ``out``."""
    out.mkdir(exist_ok=True)
    extra = [a for opt, name in OUTPUTS.items() for a in (opt, str(out / name))]
    r = _run("scan", str(proj), *cache, *extra)
    assert b"Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1, r.stderr
    _control_free(r.stdout, "text")
    _control_free(r.stderr, "stderr")
    for name in OUTPUTS.values():
        _control_free((out / name).read_bytes(), name)
    doc = json.loads((out / "out.json").read_text())
    sarif = json.loads((out / "out.sarif").read_text())
    gitlab = json.loads((out / "out.gitlab").read_text())
    assert len(sarif["runs"][0]["results"]) == len(doc["findings"]) == len(gitlab)
    return r, doc


def _modes(tmp: Path) -> list[tuple[str, ...]]:
    return [("--cache-dir", str(tmp / "cache")), ("--cache-dir", str(tmp / "cache")), ("--no-cache",)]


def test_a_file_name_that_is_not_utf8_is_one_diagnostic_and_the_rest_is_reported(tmp_path: Path) -> None:
    proj = _tree(tmp_path)
    _, clean = _scan_everything(proj, tmp_path / "clean", "--no-cache")
    with open(os.fsencode(proj) + b"/" + BAD_BYTES, "wb") as fh:
        fh.write(KV.encode())
    os.mkdir(os.fsencode(proj) + b"/dir\xff")
    with open(os.fsencode(proj) + b"/dir\xff/inner.py", "wb") as fh:
        fh.write(KV.encode())
    for i, mode in enumerate(_modes(tmp_path)):
        r, doc = _scan_everything(proj, tmp_path / f"out{i}", *mode)
        assert _keys(doc) == _keys(clean), mode
        shown = sorted(d["path"] for d in doc["diagnostics"])
        assert shown == ["bad\\xff\\xfe.py", "dir\\xff"], mode
        assert all("UTF-8" in d["message"] for d in doc["diagnostics"])
        assert b"bad\\xff\\xfe.py" in r.stdout
        w = _run("where", "forward_decode", "--root", str(proj), *mode)
        assert w.returncode == 0 and b"Traceback" not in w.stderr, w.stderr
        assert b"plain.py:1" in w.stdout and b"backend.py" in w.stdout
        _control_free(w.stdout, "where")
        _control_free(w.stderr, "where stderr")
        wj = _run("where", "forward_decode", "--json", "--root", str(proj), *mode)
        assert wj.returncode == 0 and json.loads(wj.stdout)["definitions"], wj.stderr


def test_a_file_name_with_a_newline_cannot_inject_a_line(tmp_path: Path) -> None:
    proj = _tree(tmp_path)
    (proj / INJECT).write_text(KV)
    (proj / "tab\tesc\x1b[31m.py").write_text(KV)
    for i, mode in enumerate(_modes(tmp_path)):
        r, doc = _scan_everything(proj, tmp_path / f"out{i}", *mode)
        paths = {f["path"] for f in doc["findings"]}
        assert {INJECT, "tab\tesc\x1b[31m.py", "plain.py"} <= paths  # JSON holds the real name
        text = r.stdout.decode()
        assert not any(line.startswith("::") for line in text.splitlines())
        assert "x\\n::warning file=README.md::injected\\n.py:2:12: CF101" in text
        gh = (tmp_path / f"out{i}" / "out.github").read_text()
        assert all(line.startswith("::") for line in gh.splitlines())
        sarif = json.loads((tmp_path / f"out{i}" / "out.sarif").read_text())
        uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
                for res in sarif["runs"][0]["results"] for loc in res["locations"]}
        assert "x%0A%3A%3Awarning%20file%3DREADME.md%3A%3Ainjected%0A.py" in uris
        w = _run("where", "forward_decode", "--root", str(proj), *mode)
        assert w.returncode == 0, w.stderr
        _control_free(w.stdout, "where")
        assert b"x\\n::warning" in w.stdout


def test_a_root_whose_path_is_not_utf8_is_one_usage_error(tmp_path: Path) -> None:
    root = os.fsencode(tmp_path) + b"/r\xff"
    os.mkdir(root)
    with open(root + b"/m.py", "wb") as fh:
        fh.write(KV.encode())
    for args in (["scan", os.fsdecode(root), "--no-cache"], ["scan", os.fsdecode(root), "--cache-dir", str(tmp_path / "c")],
                 ["where", "forward_decode", "--root", os.fsdecode(root), "--no-cache"]):
        r = _run(*args)
        assert r.returncode == 2 and r.stderr.count(b"\n") == 1, r.stderr
        assert b"r\\xff: path is not valid UTF-8" in r.stderr


def test_a_symlink_out_of_the_root_is_skipped_with_a_diagnostic(tmp_path: Path) -> None:
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "s.py").write_text(KV)
    proj = _tree(tmp_path)
    (proj / "leak.py").symlink_to(outside / "s.py")
    (proj / "inside.py").symlink_to(proj / "plain.py")  # a link that stays inside is a file as before
    for mode in _modes(tmp_path):
        r = run_castfind("scan", str(proj), "--json", *mode)
        doc = json.loads(r.stdout)
        paths = {f["path"] for f in doc["findings"]}
        assert "leak.py" not in paths and {"plain.py", "inside.py"} <= paths
        (d,) = [d for d in doc["diagnostics"] if d["path"] == "leak.py"]
        assert d["kind"] == "read-error" and "outside the root" in d["message"]


@pytest.mark.parametrize("args", [["scan", "--no-such-option"], ["nosuch"], ["scan", "--jobs", "many"],
                                  ["where"], ["rules", "list", "--bogus"], ["record"]])
def test_every_usage_error_is_one_line(args: list[str]) -> None:
    r = run_castfind(*args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("castfind: ") and r.stderr.count("\n") == 1, r.stderr
    assert not any(c in r.stderr for c in "╭╰│"), r.stderr
