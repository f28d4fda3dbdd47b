"""`castfind record` / `trace import` / `trace show` as a user runs them: real processes, real exit codes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_runtime_helpers import BYTES_PER_CALL, DECODE_LOOP, FIXTURES, GPU_PROFILE, SHAPE, cast_line
from typer.testing import CliRunner

from castfind.cli import app
from castfind.runtime.trace import read_trace

CASTFIND = [sys.executable, "-m", "castfind"]


def _castfind(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CASTFIND, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("rec") / "decode.jsonl"
    proc = _castfind("record", "-o", str(out), "--", str(DECODE_LOOP), "--layers", "4", "--steps", "6", "--exit-code", "3")
    return proc, out


def test_record_runs_the_script_unchanged_and_passes_output_and_exit_code(recorded):
    proc, _ = recorded
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "decode_loop: 6 steps over 4 layers\n"


def test_record_trace_holds_the_cast_line_shape_dtypes_and_count(recorded):
    _, out = recorded
    header, sites = read_trace(out)
    assert header["source"] == "castfind.record"
    (site,) = sites
    assert site.path == str(DECODE_LOOP) and site.line == cast_line()
    assert (site.src_dtype, site.dst_dtype, site.shape) == ("float8_e4m3fn", "bfloat16", SHAPE)
    assert site.calls == 4 * 6 and site.bytes_per_call == BYTES_PER_CALL


def test_record_writes_the_trace_when_the_program_raises(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "t.jsonl"
    proc = _castfind("record", "-o", str(out), "--", str(DECODE_LOOP), "--layers", "2", "--steps", "5", "--fail-at", "3")
    assert proc.returncode == 1
    assert "RuntimeError: decode_loop: failing at step 3 as asked" in proc.stderr
    (site,) = read_trace(out)[1]
    assert site.calls == 2 * 3


def test_record_dash_m_runs_a_module_with_its_argv(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "t.jsonl"
    proc = _castfind("record", "-o", str(out), "--", "-m", "decode_loop", "--layers", "1", "--steps", "2", cwd=FIXTURES)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "decode_loop: 2 steps over 1 layers\n"
    (site,) = read_trace(out)[1]
    assert site.path == str(DECODE_LOOP) and site.calls == 2


def test_record_keeps_a_string_exit_code(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "bye.py"
    script.write_text("import sys\nprint(sys.argv[1:])\nsys.exit('bye now')\n")
    proc = _castfind("record", "-o", str(tmp_path / "t.jsonl"), "--", str(script), "--flag", "x")
    assert (proc.returncode, proc.stdout) == (1, "['--flag', 'x']\n")
    assert proc.stderr.strip().splitlines()[-1] == "bye now"  # torch may warn first (e.g. no NumPy)
    assert read_trace(tmp_path / "t.jsonl")[1] == []


def test_record_without_torch_says_how_to_install_and_exits_2(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    (tmp_path / "prog.py").write_text("")
    result = CliRunner().invoke(app, ["record", "-o", str(tmp_path / "x.jsonl"), "--", str(tmp_path / "prog.py")])
    assert result.exit_code == 2
    assert result.output.strip() == "castfind record: torch is not installed; pip install 'castfind[runtime]'"


def test_trace_import_and_show_on_the_gpu_fixture(tmp_path):
    out = tmp_path / "g.jsonl"
    proc = _castfind("trace", "import", str(GPU_PROFILE), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    shown = _castfind("trace", "show", str(out), "--top", "1")
    assert shown.returncode == 0
    head, row, footer = shown.stdout.splitlines()
    assert head.split() == ["TOTAL", "CALLS", "PER", "CALL", "/STEP", "CAST", "SHAPE", "DEVICE", "SITE"]
    assert row.split() == ["27.0", "MiB", "4", "6.8", "MiB", "2.0", "float8_e4m3fn->bfloat16", "[4096,", "1,", "576]",
                           "cuda:0", "sglang/srt/layers/attention/triton_backend.py:120", "forward_decode"]  # fmt: skip
    assert footer.startswith("1 of 1 sites;")
    as_json = json.loads(_castfind("trace", "show", str(out), "--json").stdout)
    assert as_json["header"]["steps"] == 2 and as_json["sites"][0]["device_time_us"] == 150.0


@pytest.mark.parametrize(
    ("command", "content", "expected"),
    [
        (["trace", "show"], '{"castfind_trace": 1, "records": 2}\n{"path": "a.py"', "{p}:2: not valid JSON"),
        (["trace", "show"], '{"traceEvents": []}', "{p}:1: this is a torch.profiler Chrome trace"),
        (["trace", "import"], '{"traceEvents": [\n{"ph": "X", "cat": "cpu_op", "name": 3}\n]}', "{p}:2: event 'name' must be a string"),
        (["trace", "import"], '{"traceEvents": [\n{"ph": "X",', "{p}:2: not valid JSON"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, command, content, expected):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    extra = ["-o", str(tmp_path / "o.jsonl")] if command[-1] == "import" else []
    proc = _castfind(*command, str(bad), *extra)
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("castfind: " + expected.format(p=bad)) and " — " in line
    assert "Traceback" not in proc.stderr


def test_record_writes_the_trace_on_ctrl_c(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "interrupted.py"
    script.write_text("import torch\nfor _ in range(3):\n    torch.ones(2).half()\nraise KeyboardInterrupt\n")
    out = tmp_path / "t.jsonl"
    proc = _castfind("record", "-o", str(out), "--", str(script))
    assert proc.returncode == 130  # the shell convention for SIGINT, as the program alone would give
    (site,) = read_trace(out)[1]
    assert (site.line, site.calls) == (3, 3)


def test_runtime_cli_does_not_import_torch():
    code = "import sys, castfind.cli, castfind.runtime.join, castfind.runtime.profiler; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False"


# --- scan --trace: trace paths never open files outside the roots; trace strings are escaped -------

SECRET = "TOP-SECRET-LINE-31337"
SCAN_FIXTURE = FIXTURES.parent / "scan" / "minisrv"


def _site_record(path: str, line: int = 1, function: str = "f") -> dict:
    return {"path": path, "line": line, "function": function, "op": "aten::_to_copy", "src_dtype": "float8_e4m3fn",
            "dst_dtype": "bfloat16", "shape": [4], "device": "cpu", "calls": 2, "bytes_per_call": 12}  # fmt: skip


def _write_trace(path: Path, *records: dict) -> Path:
    header = {"castfind_trace": 1, "torch": "2.13.0", "devices": ["cpu"], "wall_s": 1.0, "steps": 1, "source": "t"}
    path.write_text("\n".join(json.dumps(r) for r in (header, *records)) + "\n")
    return path


@pytest.fixture()
def outside_world(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the scan fixture (the root) next to a secret file, plus a symlink from the root to the secret."""
    root = tmp_path / "work" / "minisrv"
    shutil.copytree(SCAN_FIXTURE, root)
    secret = tmp_path / "secret.py"
    secret.write_text(f'PASSWORD = "{SECRET}"\n')
    (root / "minisrv" / "leak.py").symlink_to(secret)
    return root, secret


def test_scan_trace_never_prints_source_from_outside_the_roots(outside_world, tmp_path):
    root, secret = outside_world
    depth = len(root.parts)
    trace = _write_trace(
        tmp_path / "t.jsonl",
        _site_record("../" * depth + str(secret).lstrip("/")),  # relative to the cwd, climbing out
        _site_record("../../secret.py"),  # relative to the root
        _site_record(str(secret)),  # absolute
        _site_record(str(root / "minisrv" / "leak.py")),  # a scanned name whose real path is outside
        _site_record("/etc/passwd"),
    )
    for fmt in ([], ["--json"], ["--sarif", "-"]):
        proc = _castfind("scan", str(root), "--no-cache", "--trace", str(trace), "--fail-on", "error", *fmt, cwd=root)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr  # the fixture's CF101 errors
        assert SECRET not in proc.stdout + proc.stderr, fmt
        assert "root:" not in proc.stdout, fmt  # nothing of /etc/passwd either
    text = _castfind("scan", str(root), "--no-cache", "--trace", str(trace), "--fail-on", "error", cwd=root).stdout
    assert text.count("CF900") == 5  # still reported: they were measured
    assert f"{secret}:1:1: CF900 info measured" in text


def test_scan_trace_shows_source_of_a_cf900_inside_the_root(tmp_path):
    root = tmp_path / "minisrv"
    shutil.copytree(SCAN_FIXTURE, root)
    pool = root / "minisrv" / "pool.py"
    trace = _write_trace(tmp_path / "t.jsonl", _site_record(str(pool), line=9))
    proc = _castfind("scan", str(root), "--no-cache", "--trace", str(trace), "--fail-on", "error")
    block = proc.stdout.split("minisrv/pool.py:9:1: CF900")[1].split("\n\n")[0]
    assert "self.kv_buffer = [torch.zeros(tokens, 1, dim, dtype=dtype)" in block


def test_scan_trace_and_trace_show_escape_control_characters(tmp_path):
    root = tmp_path / "minisrv"
    shutil.copytree(SCAN_FIXTURE, root)
    nasty = "\x1b]0;pwned\x07\x1b[2K\rOK\x9b"
    record = {**_site_record(f"/x/{nasty}.py", function=f"g{nasty}"), "src_dtype": f"fp8{nasty}", "device": nasty}
    trace = _write_trace(tmp_path / "t.jsonl", record)
    outputs = [
        _castfind("scan", str(root), "--no-cache", "--trace", str(trace), "--fail-on", "error"),
        _castfind("scan", str(root), "--no-cache", "--trace", str(trace), "--fail-on", "error", "--json"),
        _castfind("trace", "show", str(trace)),
        _castfind("trace", "show", str(trace), "--json"),
    ]
    for proc in outputs:
        assert proc.returncode == (1 if "scan" in proc.args else 0), proc.stderr
        assert not any(ord(c) < 0x20 and c != "\n" or 0x7F <= ord(c) <= 0x9F for c in proc.stdout), proc.stdout
    assert "/x/\\x1b]0;pwned\\x07\\x1b[2K\\x0dOK\\x9b.py" in outputs[0].stdout


# --- record: the interpreter habit, checks before running, SIGTERM, forked children ---------------

CAST_SCRIPT = "import sys, torch\nfor _ in range(3):\n    torch.ones(2).half()\nprint(sys.argv[1:])\n"


@pytest.mark.parametrize("interpreter", ["python", "python3", "python3.11", sys.executable])
def test_record_strips_a_leading_python_interpreter(tmp_path, interpreter):
    pytest.importorskip("torch")
    script = tmp_path / "s.py"
    script.write_text(CAST_SCRIPT)
    out = tmp_path / "t.jsonl"
    proc = _castfind("record", "-o", str(out), "--", interpreter, str(script), "--flag", "x")
    assert (proc.returncode, proc.stdout) == (0, "['--flag', 'x']\n"), proc.stderr
    (site,) = read_trace(out)[1]
    assert (site.path, site.line, site.calls) == (str(script), 3, 3)


def test_record_python_dash_m_runs_the_module(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "t.jsonl"
    proc = _castfind("record", "-o", str(out), "--", "python3", "-m", "decode_loop", "--layers", "1", "--steps", "2",
                     cwd=FIXTURES)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "decode_loop: 2 steps over 1 layers\n"
    assert read_trace(out)[1][0].calls == 2


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        (["nope.py"], "castfind: nope.py: no such script — check the path"),
        (["python", "nope.py"], "castfind: nope.py: no such script — check the path"),
        (["-m", "no_such_module_castfind"], "castfind: no_such_module_castfind: no such module — check the name"),
        (["python3", "-m", "no_such_module_castfind.sub"],
         "castfind: no_such_module_castfind.sub: no such module — check the name"),
        (["python"], "castfind: record: no script after the interpreter — pass SCRIPT.py or -m MODULE"),
        (["-m"], "castfind: record: -m needs a module name — pass -m MODULE"),
        (["python", "-u", "s.py"],
         "castfind: record: interpreter option -u is not supported — pass SCRIPT.py or -m MODULE"),
    ],
)
def test_record_without_a_program_to_run_is_one_line_and_exit_2(tmp_path, program, expected):
    proc = _castfind("record", "-o", str(tmp_path / "t.jsonl"), "--", *program, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.strip().splitlines() == [expected]
    assert not (tmp_path / "t.jsonl").exists()


def test_record_checks_the_output_before_running_the_program(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    cases = {
        tmp_path / "no" / "such" / "t.jsonl": "folder does not exist",
        tmp_path: "is a folder",
        script / "t.jsonl": "folder does not exist",
    }
    for output, reason in cases.items():
        proc = _castfind("record", "-o", str(output), "--", str(script))
        assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"castfind: {output}: cannot write the trace: {reason} — "), line
    assert not (tmp_path / "ran").exists()


def test_record_refuses_a_read_only_output_folder(tmp_path, monkeypatch):
    """The CLI refuses before running anything. The folder's permission is what ``os.access`` says:
    faked here, so the test means the same under root (which writes through a read-only mode)."""
    script = tmp_path / "s.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    folder = tmp_path / "ro"
    folder.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == folder else real_access(p, mode, **kw))
    r = CliRunner().invoke(app, ["record", "-o", str(folder / "t.jsonl"), "--", str(script)])
    assert r.exit_code == 2
    assert "cannot write the trace: folder is not writable" in r.output
    assert not (tmp_path / "ran").exists()


def test_record_writes_the_trace_on_sigterm(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "served.py"
    script.write_text("import time, torch\nfor _ in range(4):\n    torch.ones(3).half()\nprint('ready', flush=True)\n"
                      "time.sleep(120)\n")  # fmt: skip
    out = tmp_path / "t.jsonl"
    proc = subprocess.Popen([*CASTFIND, "record", "-o", str(out), "--", str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    (site,) = read_trace(out)[1]
    assert (site.line, site.calls) == (3, 4)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_writes_the_trace(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "forks.py"
    script.write_text(
        "import os, torch\n"
        "torch.ones(2).half()\n"
        "r, w = os.pipe()\n"
        "if os.fork() == 0:\n"
        "    os.close(w)\n"
        "    os.read(r, 1)  # returns when the parent has exited (and written its trace)\n"
        "    for _ in range(7):\n"
        "        torch.ones(5).double()\n"
        "    raise SystemExit(0)\n"
        "os.close(r)\n"
        "for _ in range(3):\n"
        "    torch.ones(4).bfloat16()\n"
    )
    out = tmp_path / "t.jsonl"
    proc = _castfind("record", "-o", str(out), "--", str(script))  # waits for the child too (it holds the pipes)
    assert proc.returncode == 0, proc.stderr
    sites = read_trace(out)[1]
    assert sorted((s.line, s.dst_dtype, s.calls) for s in sites) == [(2, "float16", 1), (12, "bfloat16", 3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forks.py", "t.jsonl"]


def test_record_dash_m_of_a_missing_submodule_is_one_line_and_exit_2(tmp_path):
    pytest.importorskip("torch")
    proc = _castfind("record", "-o", str(tmp_path / "t.jsonl"), "--", "-m", "json.no_such_castfind_sub")
    assert (proc.returncode, proc.stdout) == (2, "")
    last = proc.stderr.strip().splitlines()[-1]
    assert last == "castfind: json.no_such_castfind_sub: no such module — check the name"
    assert "Traceback" not in proc.stderr
    (tmp_path / "pkg_no_main").mkdir()
    (tmp_path / "pkg_no_main" / "__init__.py").write_text("")
    proc = _castfind("record", "-o", str(tmp_path / "t.jsonl"), "--", "-m", "pkg_no_main", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last == "castfind: pkg_no_main: is a package without __main__ — name a module in it"


# --- trace show --json is valid JSON; gzip; unexpected errors are exit 2 with one line ---------------


def _strict_json(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in JSON output")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "1e400"])
def test_trace_show_json_never_emits_nan_or_infinity(tmp_path, number):
    header = f'{{"castfind_trace": 1, "wall_s": {number}, "records": 1}}'
    record = json.dumps({**_site_record("a.py"), "device_time_us": 1.0, "extra_field": 2.5})
    in_extra = f'{{"castfind_trace": 1}}\n{record[:-1]}, "x": [{number}]}}\n'
    for text, line in ((f"{header}\n{record}\n", 1), (in_extra, 2)):
        bad = tmp_path / "t.jsonl"
        bad.write_text(text)
        proc = _castfind("trace", "show", "--json", str(bad))
        assert (proc.returncode, proc.stdout) == (2, ""), proc.stdout
        (message,) = proc.stderr.strip().splitlines()
        assert message.startswith(f"castfind: {bad}:{line}: ") and " — " in message
    good = _write_trace(tmp_path / "g.jsonl", _site_record("a.py"))
    assert _strict_json(_castfind("trace", "show", "--json", str(good)).stdout)["sites"][0]["calls"] == 2


def test_trace_show_and_scan_read_a_gzipped_trace(tmp_path):
    import gzip

    plain = _write_trace(tmp_path / "t.jsonl", _site_record("a.py", line=7))
    packed = tmp_path / "t.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    shown = _castfind("trace", "show", "--json", str(packed))
    assert shown.returncode == 0, shown.stderr
    assert _strict_json(shown.stdout)["sites"][0]["line"] == 7
    root = tmp_path / "minisrv"
    shutil.copytree(SCAN_FIXTURE, root)
    scanned = _castfind("scan", str(root), "--no-cache", "--json", "--trace", str(packed))
    assert scanned.returncode == 1, scanned.stderr
    assert [f["line"] for f in json.loads(scanned.stdout)["findings"] if f["rule"] == "CF900"] == [7]
    packed.write_bytes(packed.read_bytes()[:20])
    for command in (["trace", "show", str(packed)], ["scan", str(root), "--no-cache", "--trace", str(packed)]):
        proc = _castfind(*command)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith(f"castfind: {packed}: cannot decompress")


def _boom(*args, **kwargs):
    raise RuntimeError("boom \x1b[31mred")


@pytest.mark.parametrize(
    ("target", "argv"),
    [
        ("castfind.runtime.cli.read_trace", ["trace", "show", "{t}"]),
        ("castfind.runtime.cli.format_table", ["trace", "show", "{t}"]),
        ("castfind.runtime.profiler.import_profile", ["trace", "import", str(GPU_PROFILE), "-o", "{o}"]),
        ("castfind.runtime.cli.write_trace", ["trace", "import", str(GPU_PROFILE), "-o", "{o}"]),
        ("castfind.runtime.cli.check_output", ["record", "-o", "{o}", "--", str(DECODE_LOOP)]),
    ],
)
def test_an_unexpected_error_is_exit_2_and_one_line(tmp_path, monkeypatch, target, argv):
    trace = _write_trace(tmp_path / "t.jsonl", _site_record("a.py"))
    args = [a.format(t=trace, o=tmp_path / "o.jsonl") for a in argv]
    monkeypatch.setattr(target, _boom)
    monkeypatch.delenv("CASTFIND_DEBUG", raising=False)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    command = " ".join(argv[:2]) if argv[0] == "trace" else "record"
    assert line == (f"castfind: internal error in {command}: RuntimeError: boom \\x1b[31mred "
                    "(set CASTFIND_DEBUG=1 for the traceback)")  # fmt: skip
    monkeypatch.setenv("CASTFIND_DEBUG", "1")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "Traceback (most recent call last)" in result.output
    assert result.output.strip().splitlines()[-1] == line.removesuffix(" (set CASTFIND_DEBUG=1 for the traceback)")


def test_an_unexpected_error_in_a_real_process_is_exit_2(tmp_path):
    """Through the console entry point, as a shell sees it: exit 2 and one line, not click's traceback and 1."""
    trace = _write_trace(tmp_path / "t.jsonl", _site_record("a.py"))
    code = (
        "import sys, castfind.runtime.cli as rc\n"
        "def boom(*a, **k): raise KeyError('no')\n"
        "rc.read_trace = boom\n"
        "sys.argv = ['castfind', 'trace', 'show', sys.argv[1]]\n"
        "from castfind.cli import main\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(trace)], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.strip().splitlines() == [
        "castfind: internal error in trace show: KeyError: 'no' (set CASTFIND_DEBUG=1 for the traceback)"
    ]
