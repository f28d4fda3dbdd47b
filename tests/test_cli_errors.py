"""Bad input and internal failures on the command line: one line on stderr, exit 2, never a traceback.

The one-line form is ``castfind: PATH: what is wrong — what to do``; exit 1 is reserved for findings.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from castfind import api, cli
from tests.support import REPO, run_castfind

FIX = REPO / "fixtures" / "scan"
BACKEND = FIX / "minisrv" / "minisrv" / "backend.py"
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def one_line_error(r: subprocess.CompletedProcess[str] | Result, *needles: str) -> str:
    """The single stderr line of a run that must have exited 2, checked for ``needles``."""
    code = r.returncode if isinstance(r, subprocess.CompletedProcess) else r.exit_code
    out, err = r.stdout, r.stderr
    assert code == 2, f"exit {code}\nstdout:\n{out}\nstderr:\n{err}"
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    (line,) = lines
    assert line.startswith("castfind: "), line
    for needle in needles:
        assert needle in line, line
    return line


@pytest.fixture
def umask() -> Iterator[None]:
    """Restore the process umask after a test that sets it (children inherit it)."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def no_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the scan itself blow up, so a test shows its check ran before the (long) scan."""
    import castfind.analysis.scan

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the scan ran before the output paths were checked")

    monkeypatch.setattr(castfind.analysis.scan, "scan", boom)


runner = CliRunner()


# --------------------------------------------------------------------------- 1. unwritable outputs


def test_sarif_to_a_folder_fails_before_the_scan(tmp_path: Path, no_scan: None) -> None:
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "--sarif", str(tmp_path)])
    line = one_line_error(r, str(tmp_path), "folder", " — ")
    assert "internal error" not in line
    assert list(tmp_path.iterdir()) == []


def test_sarif_to_a_folder_in_a_subprocess_is_one_line(tmp_path: Path) -> None:
    one_line_error(run_castfind("scan", str(FIX), "--no-cache", "--sarif", str(tmp_path)), str(tmp_path), "folder")


def _unwritable_targets(tmp_path: Path) -> list[Path]:
    a_file = tmp_path / "plain-file"
    a_file.write_text("")
    targets = [Path("/proc/castfind-baseline.json"), a_file / "baseline.json"]
    if not AS_ROOT:  # root writes through permission bits
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        targets.append(locked / "baseline.json")
    return targets


def test_write_baseline_to_an_unwritable_place_fails_before_the_scan(tmp_path: Path, no_scan: None) -> None:
    for target in _unwritable_targets(tmp_path):
        r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "--write-baseline", str(target)])
        line = one_line_error(r, str(target), " — ")
        assert "internal error" not in line
        assert not target.exists()


def test_write_baseline_into_proc_in_a_subprocess_is_one_line() -> None:
    one_line_error(run_castfind("scan", str(FIX), "--no-cache", "--write-baseline", "/proc/x/baseline.json"),
                   "/proc/x/baseline.json")


def test_sarif_into_an_unwritable_place_is_one_line(tmp_path: Path, no_scan: None) -> None:
    for target in _unwritable_targets(tmp_path):
        r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "--sarif", str(target)])
        one_line_error(r, str(target))


def test_write_baseline_refuses_to_overwrite_a_file_that_is_not_a_baseline(tmp_path: Path) -> None:
    precious = tmp_path / "notes.json"
    precious.write_text('{"mine": true}\n')
    one_line_error(run_castfind("scan", str(FIX), "--no-cache", "--write-baseline", str(precious)),
                   str(precious), "not a castfind baseline")
    assert precious.read_text() == '{"mine": true}\n'
    source = tmp_path / "x.py"
    source.write_text("print('hi')\n")
    one_line_error(run_castfind("scan", str(FIX), "--no-cache", "--write-baseline", str(source)),
                   "not a castfind baseline")
    assert source.read_text() == "print('hi')\n"


def test_write_baseline_overwrites_its_own_baseline_and_an_empty_file(tmp_path: Path) -> None:
    base = tmp_path / "baseline.json"
    base.write_text("")  # e.g. made by mktemp: nothing to lose
    for _ in range(2):
        r = run_castfind("scan", str(FIX), "--no-cache", "--write-baseline", str(base))
        assert r.returncode == 0, r.stderr  # recorded: exit 0
        assert json.loads(base.read_text())["castfind_baseline"] == 1


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_written_files_follow_the_umask(tmp_path: Path, umask: None, mask: int, mode: int) -> None:
    os.umask(mask)
    sarif, base = tmp_path / "out.sarif", tmp_path / "baseline.json"
    r = run_castfind("scan", str(FIX), "--no-cache", "--sarif", str(sarif), "--write-baseline", str(base))
    assert r.returncode == 0, r.stderr  # --write-baseline: exit 0
    assert stat.S_IMODE(sarif.stat().st_mode) == mode
    assert stat.S_IMODE(base.stat().st_mode) == mode


def test_rewriting_a_file_keeps_its_mode_and_writes_through_a_symlink(tmp_path: Path, umask: None) -> None:
    real = tmp_path / "shared" / "baseline.json"
    real.parent.mkdir()
    real.write_text('{"castfind_baseline": 1, "findings": []}\n')
    real.chmod(0o600)
    link = tmp_path / "baseline.json"
    link.symlink_to(real)
    r = run_castfind("scan", str(FIX), "--no-cache", "--write-baseline", str(link))
    assert r.returncode == 0, r.stderr  # --write-baseline: exit 0
    assert link.is_symlink()
    assert json.loads(real.read_text())["findings"]
    assert stat.S_IMODE(real.stat().st_mode) == 0o600


def test_cache_dir_naming_a_file_is_a_usage_error(tmp_path: Path) -> None:
    a_file = tmp_path / "cache"
    a_file.write_text("keep me")
    for command in (["scan", str(FIX)], ["where", "x", "--root", str(FIX)]):
        one_line_error(run_castfind(*command, "--cache-dir", str(a_file)), str(a_file), "--cache-dir", " — ")
    assert a_file.read_text() == "keep me"


@pytest.mark.parametrize("xdg", ["/proc/castfind-no-such-folder", "{tmp}/a-file"])
def test_unusable_xdg_cache_home_warns_once_and_scans_without_a_cache(tmp_path: Path, xdg: str) -> None:
    (tmp_path / "a-file").write_text("")
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_CACHE_HOME=xdg.format(tmp=tmp_path))
    r = subprocess.run([sys.executable, "-m", "castfind", "scan", str(FIX), "--json"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr  # the findings, as with a cache
    assert "Traceback" not in r.stderr
    data = json.loads(r.stdout)
    assert len(data["findings"]) == 6
    notes = [d for d in data["diagnostics"] if d["kind"] == "cache"]
    assert len(notes) == 1 and "continuing without a cache" in notes[0]["message"], data["diagnostics"]


# --------------------------------------------------------------------------- 3. small CLI defects


def test_explain_on_a_missing_file_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope.py"
    one_line_error(run_castfind("scan", str(FIX), "--no-cache", "--explain", f"{missing}:3"), str(missing), " — ")
    # A root-relative path that exists under the root is not "missing".
    r = run_castfind("scan", str(FIX), "--no-cache", "--explain", "minisrv/minisrv/backend.py:14")
    assert r.returncode == 0, r.stderr
    assert "minisrv/minisrv/backend.py:14:" in r.stdout


@pytest.mark.parametrize("command", [["scan", str(FIX)], ["where", "x", "--root", str(FIX)]])
def test_negative_jobs_is_a_usage_error(command: list[str]) -> None:
    one_line_error(run_castfind(*command, "--no-cache", "--jobs", "-1"), "--jobs")


def test_jobs_zero_still_means_the_default() -> None:
    r = run_castfind("scan", str(FIX), "--no-cache", "--jobs", "0")
    assert r.returncode == 1, r.stderr


def test_sarif_to_stdout_with_json_is_a_usage_error() -> None:
    r = run_castfind("scan", str(FIX), "--no-cache", "--sarif", "-", "--json")
    one_line_error(r, "--sarif -", "--json")
    assert r.stdout == ""


def test_only_with_a_file_outside_every_root_names_the_file_and_roots(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.py"
    outside.write_text("x = 1\n")
    r = run_castfind("scan", "--only", str(outside), "--root", str(FIX), "--no-cache")
    one_line_error(r, str(outside), str(FIX))
    # A file inside the root is still fine.
    r = run_castfind("scan", "--only", str(BACKEND), "--root", str(FIX), "--no-cache")
    assert r.returncode == 1, r.stderr


@pytest.mark.parametrize("symbol", ["где_ядро", "café", "Ωmega.f"])
def test_where_accepts_unicode_identifiers(tmp_path: Path, symbol: str) -> None:
    r = run_castfind("where", symbol, "--root", str(tmp_path), "--no-cache")
    assert r.returncode == 1, r.stderr  # well-formed, just not defined here
    assert "is not a Python name" not in r.stderr


def test_where_finds_a_unicode_definition(tmp_path: Path) -> None:
    (tmp_path / "ядро.py").write_text("def где_ядро(x):\n    return x\n\n\nwhere = где_ядро\n", encoding="utf-8")
    r = run_castfind("where", "где_ядро", "--root", str(tmp_path), "--no-cache", "--json")
    assert r.returncode == 0, r.stderr
    (d,) = json.loads(r.stdout)["definitions"]
    assert (d["path"], d["line"]) == ("ядро.py", 1)


@pytest.mark.parametrize("symbol", ["1abc", "a..b", "a-b", ".a", "a."])
def test_where_still_refuses_malformed_symbols(tmp_path: Path, symbol: str) -> None:
    one_line_error(run_castfind("where", symbol, "--root", str(tmp_path), "--no-cache"), "is not a Python name")


# --------------------------------------------------------------------------- 4. exit codes


def _raise(*args: object, **kwargs: object) -> None:
    raise RuntimeError("boom\nsecond line")


@pytest.mark.parametrize(
    ("command", "target", "name"),
    [
        (["scan", str(FIX), "--no-cache"], "scan", "scan"),
        (["where", "x", "--root", str(FIX), "--no-cache"], "where", "where"),
        (["rules", "list"], "load_rules", "rules list"),
    ],
)
def test_an_internal_error_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch, command: list[str], target: str,
                                              name: str) -> None:
    monkeypatch.delenv("CASTFIND_DEBUG", raising=False)
    if target == "load_rules":
        import castfind.core.rules

        monkeypatch.setattr(castfind.core.rules, "load_rules", _raise)
    else:
        monkeypatch.setattr(api, target, _raise)
    r = runner.invoke(cli.app, command)
    line = one_line_error(r)
    assert line == (f"castfind: internal error in {name}: RuntimeError: boom second line "
                    "(set CASTFIND_DEBUG=1 for the traceback)")


def test_castfind_debug_prints_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASTFIND_DEBUG", "1")
    monkeypatch.setattr(api, "scan", _raise)
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache"])
    assert r.exit_code == 2
    assert "Traceback (most recent call last)" in r.stderr and "RuntimeError: boom" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("castfind: internal error in scan: RuntimeError: boom")


def test_ctrl_c_is_not_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "scan", interrupt)
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache"])
    assert r.exit_code == 130
    assert r.stderr.strip() == "castfind: interrupted"


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("CASTFIND_DEBUG", None)
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)


def test_main_turns_an_internal_error_into_exit_2() -> None:
    code = ("import sys, castfind.api as a\n"
            "def f(*x, **k): raise KeyError('k')\n"
            "a.scan = f\n"
            "from castfind.cli import main\n"
            "sys.argv = ['castfind', *sys.argv[1:]]\n"
            "main()\n")
    r = _python(code, "scan", str(FIX), "--no-cache")
    assert one_line_error(r) == ("castfind: internal error in scan: KeyError: 'k' "
                                 "(set CASTFIND_DEBUG=1 for the traceback)")


_BROKEN_RUNTIME = ("import sys\n"
                   "sys.modules['castfind.runtime.cli'] = None  # as if the module failed to import\n"
                   "from castfind.cli import main\n"
                   "sys.argv = ['castfind', *sys.argv[1:]]\n"
                   "main()\n")


@pytest.mark.parametrize("args", [["record", "-o", "t.jsonl", "--", "x.py"], ["trace", "show", "t.jsonl"]])
def test_runtime_commands_that_fail_to_import_say_so(args: list[str]) -> None:
    line = one_line_error(_python(_BROKEN_RUNTIME, *args), f"castfind: {args[0]}: ",
                          "(ModuleNotFoundError: import of castfind.runtime.cli halted; None in sys.modules)")
    assert "internal error" not in line


def test_runtime_commands_that_fail_to_import_are_still_listed() -> None:
    r = _python(_BROKEN_RUNTIME, "--help")
    assert r.returncode == 0, r.stderr
    assert "record" in r.stdout and "trace" in r.stdout
    r = _python(_BROKEN_RUNTIME, "scan", str(FIX), "--no-cache")
    assert r.returncode == 1, r.stderr  # the static commands still work


def test_runtime_cli_imports_without_torch() -> None:
    r = _python("import sys\nsys.modules['torch'] = None\nimport castfind.runtime.cli\n"
                "from castfind.cli import app\n"
                "names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}\n"
                "assert {'record', 'trace'} <= names, names\n")
    assert r.returncode == 0, r.stderr


def test_sarif_to_a_fifo_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    # A FIFO stands for /dev/null and /dev/stdout, which an atomic replace would clobber (as root).
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text(encoding="utf-8")), daemon=True)
    reader.start()
    r = run_castfind("scan", str(FIX), "--no-cache", "--sarif", str(fifo))
    reader.join(timeout=30)
    assert r.returncode == 1, r.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert got and json.loads(got[0])["version"] == "2.1.0"


def test_server_without_pygls_says_how_to_install_it() -> None:
    """The static tool installs without the ``lsp`` extra; ``castfind server`` then says what to install."""
    hide = ("import sys; sys.modules['pygls'] = None; sys.modules['lsprotocol'] = None; "
            "sys.argv = ['castfind', 'server']; from castfind.quick import main; main()")
    r = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, cwd=REPO, timeout=120,
                       stdin=subprocess.DEVNULL)
    line = one_line_error(r, "server: needs pygls and lsprotocol", "pip install 'castfind[lsp]'")
    assert r.stdout == "", line
