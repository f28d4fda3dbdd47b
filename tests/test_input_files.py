"""Input files are regular files of bounded size: a FIFO, a device or a gzip bomb fails in one line (exit 2),
never a hang or a MemoryError (castfind.core.inputs)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest

from castfind.core.inputs import InputError, gunzip, read_input
from tests.support import run_castfind

KV = "def forward_decode(self, q):\n    return self.token_to_kv_pool.get_key_buffer(0).to(q.dtype)\n"


def _last_error(r: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("castfind: "), line
    for needle in needles:
        assert needle in line, line
    return line


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    p = tmp_path / "proj"
    p.mkdir()
    (p / "kv.py").write_text(KV)
    return p


def test_read_input_refuses_fifos_devices_and_oversized_files(tmp_path: Path, monkeypatch) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        read_input(fifo, "trace")  # returns at once: opened without blocking
    with pytest.raises(InputError, match="not a regular file"):
        read_input("/dev/zero", "baseline")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 3000)
    monkeypatch.setenv("CASTFIND_MAX_MODEL_CONFIG_SIZE", "2K")
    with pytest.raises(InputError, match="CASTFIND_MAX_MODEL_CONFIG_SIZE"):
        read_input(big, "model-config")
    monkeypatch.setenv("CASTFIND_MAX_MODEL_CONFIG_SIZE", "3K")
    assert read_input(big, "model-config") == b" " * 3000


def test_gunzip_stops_at_the_limit(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CASTFIND_MAX_TRACE_SIZE", "1M")
    bomb = gzip.compress(b"\0" * (8 << 20))
    with pytest.raises(InputError, match="decompressed"):
        gunzip(bomb, "t.gz", "trace")
    two = gzip.compress(b"ab") + gzip.compress(b"cd")  # several members, as gzip.decompress reads them
    assert gunzip(two, "t.gz", "trace") == b"abcd"


def test_a_gzip_bomb_trace_is_refused_at_the_limit(proj: Path, tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"\n" * (4 << 20)))
    env = {"CASTFIND_MAX_TRACE_SIZE": "1M"}
    for args in (["trace", "show", str(bomb)], ["scan", str(proj), "--no-cache", "--trace", str(bomb)]):
        r = _run(args, env)
        _last_error(r, str(bomb), "limit", "CASTFIND_MAX_TRACE_SIZE")


def _run(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    old = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        return run_castfind(*args, timeout=15, **({"cwd": cwd} if cwd else {}))
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.parametrize("option", ["--trace", "--baseline", "--model-config"])
def test_a_fifo_or_device_as_an_input_fails_in_one_line(proj: Path, tmp_path: Path, option: str) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        r = _run(["scan", str(proj), "--no-cache", option, path])
        _last_error(r, path, "not a regular file")


def test_a_fifo_as_init_pyproject_fails_in_one_line(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pyproject.toml")
    r = _run(["init", str(tmp_path)])
    _last_error(r, "pyproject.toml", "not a regular file")
    assert not (tmp_path / ".pre-commit-config.yaml").exists()


def test_a_fifo_as_a_scanned_pyproject_or_rule_file_fails_in_one_line(proj: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "rules.yaml"
    os.mkfifo(fifo)
    _last_error(_run(["scan", str(proj), "--no-cache", "--rules", str(fifo)]), "not a regular file")
    os.mkfifo(proj / "pyproject.toml")
    _last_error(_run(["scan", str(proj), "--no-cache"]), "pyproject.toml", "not a regular file")


def test_regular_inputs_still_read(proj: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 2}))
    r = _run(["scan", str(proj), "--no-cache", "--model-config", str(cfg), "--json"])
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["findings"]
