"""Valid and invalid sources that once crashed castfind: each is a diagnostic, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import run_castfind

KV = "def forward_decode(self, q):\n    return self.token_to_kv_pool.get_key_buffer(0).to(q.dtype)\n"


def _scan(root: Path, *extra: str):
    r = run_castfind("scan", str(root), "--no-cache", "--eager", "--json", *extra)
    assert "Traceback" not in r.stderr, r.stderr
    return r, json.loads(r.stdout) if r.stdout.strip() else None


def _many(root: Path, n: int = 30) -> None:
    """Enough ordinary files that extraction runs in the worker pool."""
    for i in range(n):
        (root / f"ok{i}.py").write_text(f"x{i} = {i}\n")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_bad_encodings_are_diagnostics(tmp_path: Path, jobs: str) -> None:
    _many(tmp_path)
    (tmp_path / "latin.py").write_bytes(b'x = "\xe9t\xe9"\n' + KV.encode())
    (tmp_path / "bogus.py").write_bytes(b"# -*- coding: no-such-codec -*-\n" + KV.encode())
    (tmp_path / "declared.py").write_bytes(b"# -*- coding: latin-1 -*-\nx = '\xe9'\n" + KV.encode())
    r, doc = _scan(tmp_path, "-j", jobs)
    diags = {d["path"]: d for d in doc["diagnostics"]}
    assert "UTF-8" in diags["latin.py"]["message"] and diags["latin.py"]["kind"] == "parse-error"
    assert "no-such-codec" in diags["bogus.py"]["message"]
    assert "declared.py" not in diags  # a declared latin-1 file is read as Python reads it
    assert r.returncode == 1 and [f["path"] for f in doc["findings"]] == ["declared.py"]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_two_thousand_levels_of_nesting_is_a_diagnostic_not_a_segfault(tmp_path: Path, jobs: str) -> None:
    _many(tmp_path)
    (tmp_path / "brackets.py").write_text("x = " + "[" * 2000 + "]" * 2000 + "\n")
    (tmp_path / "ifs.py").write_text("".join(" " * i + "if x:\n" for i in range(2000)) + " " * 2000 + "pass\n")
    r, doc = _scan(tmp_path, "-j", jobs)
    assert r.returncode == 0, r.stderr
    assert {d["path"] for d in doc["diagnostics"]} == {"brackets.py", "ifs.py"}


def test_a_long_sum_is_analysed_and_a_deeper_one_exits_non_zero(tmp_path: Path) -> None:
    (tmp_path / "sum600.py").write_text(KV.replace("return ", "return " + " + ".join(["a"] * 600) + " + "))
    r, doc = _scan(tmp_path)
    assert r.returncode == 1 and [f["path"] for f in doc["findings"]] == ["sum600.py"]
    (tmp_path / "sum1500.py").write_text(KV.replace("return ", "return " + " + ".join(["a"] * 1500) + " + "))
    r, doc = _scan(tmp_path)
    assert r.returncode == 2
    (d,) = doc["diagnostics"]
    assert d["path"] == "sum1500.py" and d["kind"] == "unsupported"
    assert "could not be analysed" in r.stderr and r.stderr.count("\n") == 1


def test_a_large_generated_file_is_skipped_by_max_file_size(tmp_path: Path) -> None:
    (tmp_path / "gen.py").write_text("".join(f"v{i} = w{i}.float()\n" for i in range(300_000)))
    (tmp_path / "real.py").write_text(KV)
    r, doc = _scan(tmp_path)
    assert r.returncode == 1 and [f["path"] for f in doc["findings"]] == ["real.py"]
    (d,) = doc["diagnostics"]
    assert d["path"] == "gen.py" and d["kind"] == "too-large" and "--max-file-size" in d["message"]
    r = run_castfind("scan", str(tmp_path), "--max-file-size", "lots")
    assert r.returncode == 2 and "--max-file-size lots" in r.stderr


def test_a_symlink_loop_is_a_diagnostic(tmp_path: Path) -> None:
    (tmp_path / "a.py").symlink_to("b.py")
    (tmp_path / "b.py").symlink_to("a.py")
    (tmp_path / "real.py").write_text(KV)
    r, doc = _scan(tmp_path)
    assert r.returncode == 1
    assert sorted(d["path"] for d in doc["diagnostics"]) == ["a.py", "b.py"]


@pytest.mark.parametrize("encoding,newline", [("latin-1", "\n"), ("utf-8", "\r"), ("utf-8", "\r\n")])
def test_suppression_comments_hold_in_latin1_and_cr_only_files(tmp_path: Path, encoding: str, newline: str) -> None:
    head = "# -*- coding: latin-1 -*-\n# caf\xe9\n" if encoding == "latin-1" else "# plain\n"
    src = head + KV.replace(".to(q.dtype)", ".to(q.dtype)  # castfind: ignore[CF101]")
    (tmp_path / "m.py").write_bytes(src.replace("\n", newline).encode(encoding))
    r, doc = _scan(tmp_path)
    assert doc["findings"] == [] and doc["stats"]["suppressed"] == 1, r.stdout
    assert doc["diagnostics"] == []
    assert r.returncode == 0


@pytest.mark.parametrize("root", ["/dev/null", "README.md"])
def test_a_root_that_is_neither_a_folder_nor_a_python_file_is_a_usage_error(root: str) -> None:
    r = run_castfind("scan", root, "--no-cache")
    assert r.returncode == 2 and "not a folder or a .py file" in r.stderr and r.stderr.count("\n") == 1
