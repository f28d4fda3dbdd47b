"""The cache and carried results: root-relative, data-only (a forged row never runs code)."""

from __future__ import annotations

import json
import pickle
import shutil
import sqlite3
import zlib
from pathlib import Path

import pytest

from castfind.read import codec
from castfind.read.extract import extract_source
from castfind.store.cache import Cache, decode_facts, encode_facts
from tests.support import REPO, run_castfind

FIX = REPO / "fixtures" / "scan"


def _proj(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    shutil.copytree(FIX, proj)
    backend = proj / "minisrv" / "minisrv" / "backend.py"
    lines = backend.read_text().splitlines(keepends=True)
    lines[13] = lines[13].rstrip("\n") + "  # castfind: ignore[CF101]\n"
    backend.write_text("".join(lines))
    return proj


def _run(cwd: Path, root: str, cache: Path, *extra: str) -> tuple[dict, str]:
    r = run_castfind("scan", root, "--cache-dir", str(cache), "--json", "-j", "1", *extra, cwd=cwd)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout), r.stderr


def test_a_warm_result_does_not_depend_on_the_working_directory(tmp_path: Path) -> None:
    proj = _proj(tmp_path)
    cache = tmp_path / "cache"
    first, _ = _run(tmp_path, "proj", cache)
    assert first["stats"]["suppressed"] == 1
    inside, err = _run(proj, ".", cache)
    assert inside["stats"]["outcome"] == "carried"  # the same carried results, read from inside
    assert inside["stats"]["suppressed"] == 1 and "cannot read" not in err
    assert [(f["path"], f["line"]) for f in inside["findings"]] == [(f["path"], f["line"]) for f in first["findings"]]
    assert inside["diagnostics"] == []
    only, err = _run(proj, "minisrv/minisrv/backend.py", cache, "--only", "--root", ".")
    assert only["stats"]["suppressed"] == 1 and "cannot read" not in err


def test_a_copied_tree_replays_the_results_of_the_original(tmp_path: Path) -> None:
    proj = _proj(tmp_path)
    cache = tmp_path / "cache"
    first, _ = _run(tmp_path, "proj", cache)
    other = tmp_path / "elsewhere" / "proj"
    shutil.copytree(proj, other)
    again, _ = _run(other.parent, "proj", cache)
    assert again["stats"]["outcome"] == "carried" and again["stats"]["parsed"] == 0
    assert [f["path"] for f in again["findings"]] == [f["path"] for f in first["findings"]]


class _Boom:
    def __reduce__(self):  # what a forged pickle row would do when loaded
        return (Path.touch, (Path("/tmp/castfind-pwned"),))


def test_forged_cache_rows_never_run_code_and_are_rebuilt(tmp_path: Path) -> None:
    marker = Path("/tmp/castfind-pwned")
    marker.unlink(missing_ok=True)
    _proj(tmp_path)
    cache = tmp_path / "cache"
    first, _ = _run(tmp_path, "proj", cache)
    conn = sqlite3.connect(cache / "facts.sqlite3")
    evil = zlib.compress(pickle.dumps(_Boom()), 1)
    conn.execute("UPDATE facts SET data = ?", (evil,))
    conn.execute("UPDATE memo SET data = ?", (evil,))
    conn.commit()
    conn.close()
    again, _ = _run(tmp_path, "proj", cache)
    assert not marker.exists()
    assert [f["line"] for f in again["findings"]] == [f["line"] for f in first["findings"]]
    assert again["stats"]["parsed"] > 0  # the forged rows were ignored and the files parsed again


def test_codec_round_trips_facts_and_rejects_unknown_records() -> None:
    src = (FIX / "minisrv" / "minisrv" / "backend.py").read_bytes()
    facts = extract_source(src, "minisrv.backend", "minisrv/backend.py", False)
    assert decode_facts(encode_facts(facts)) == facts
    value = {("check", "0:a.py", (("f", "kv"),)): ([1.5, None, True], frozenset({"q:x"}), {1, 2}, b"\x00")}
    assert codec.loads(codec.dumps(value)) == value
    for forged in (["os.system", "echo"], ["Name"], ["Name", "a", "b"], {"a": 1}, ["x", "1e999"], []):
        with pytest.raises(codec.CodecError):
            codec.loads(zlib.compress(json.dumps(forged).encode()))
    with pytest.raises(codec.CodecError):
        codec.loads(zlib.compress(pickle.dumps(facts)))
    with pytest.raises(TypeError):
        codec.dumps(_Boom())


def test_a_cache_row_that_is_not_the_encoding_counts_as_missing(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    cache.put_blobs({"k1": b"garbage", "k2": encode_facts(extract_source(b"x = 1\n", "m", "m.py", False))})
    assert list(cache.get_many(["k1", "k2"])) == ["k2"]


def test_a_row_of_another_sqlite_type_is_a_damaged_row(tmp_path: Path) -> None:
    """Every table's rows set to a TEXT, INTEGER or REAL value (SQLite keeps any type in a BLOB column): the
    run recomputes them, answers as without a cache, and replaces them."""
    _proj(tmp_path)
    cache = tmp_path / "cache"
    want, _ = _run(tmp_path, "proj", cache)
    conn = sqlite3.connect(cache / "facts.sqlite3")
    values = {"facts": "'garbled'", "idents": "7", "memo": "1.5", "stats": "'1:2:3:4:x'", "trees": "7"}
    for table, value in values.items():
        conn.execute(f"UPDATE {table} SET data = {value}")
    conn.commit()
    conn.close()
    for _ in range(2):
        got, err = _run(tmp_path, "proj", cache)
        assert "internal error" not in err
        assert [(f["path"], f["line"], f["rule"]) for f in got["findings"]] == \
               [(f["path"], f["line"], f["rule"]) for f in want["findings"]]
    assert got["stats"]["outcome"] == "carried"  # the rows were replaced
