"""What `castfind record` accepts after `--`, and what it refuses before running anything (no torch needed)."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from castfind.runtime.program import (
    Program,
    ProgramError,
    check_output,
    check_program,
    is_interpreter,
    parse_program,
    sigterm_as_exit,
)


@pytest.mark.parametrize(
    "arg", ["python", "python3", "python3.11", "python3.13t", "python.exe", "/usr/bin/python3", sys.executable]
)
def test_interpreters_are_recognised(arg):
    assert is_interpreter(arg)


@pytest.mark.parametrize("arg", ["python.py", "my_python", "pythonista", "script.py", "./serve", "-m"])
def test_scripts_are_not_interpreters(arg):
    assert not is_interpreter(arg)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["s.py", "--x", "1"], Program("s.py", False, ("--x", "1"))),
        (["python3", "s.py", "--x"], Program("s.py", False, ("--x",))),
        (["-m", "pkg.mod", "a"], Program("pkg.mod", True, ("a",))),
        ([sys.executable, "-m", "pkg", "-m", "x"], Program("pkg", True, ("-m", "x"))),
        (["python", "python.py"], Program("python.py", False, ())),
    ],
)
def test_parse_program(argv, expected):
    assert parse_program(argv) == expected


def test_check_output_refuses_an_unwritable_folder_before_anything_runs(tmp_path, monkeypatch):
    check_output(tmp_path / "t.jsonl")  # fine
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(ProgramError) as info:
        check_output(tmp_path / "t.jsonl")
    reason = "cannot write the trace: folder is not writable — pick another -o"
    assert str(info.value) == f"{tmp_path / 't.jsonl'}: {reason}"


def test_check_program_finds_modules_from_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "local_castfind_mod.py").write_text("")
    monkeypatch.chdir(tmp_path)
    check_program(Program("local_castfind_mod", True, ()))
    check_program(Program("json.whatever", True, ()))  # only the top-level package is looked up
    for bad in ("no_such_castfind_mod", "1bad", "a..b", ""):
        with pytest.raises(ProgramError):
            check_program(Program(bad, True, ()))
    assert "local_castfind_mod" not in sys.modules and str(tmp_path) not in sys.path[:1]


def test_sigterm_becomes_system_exit_143_inside_the_block_only():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as info, sigterm_as_exit():
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs as soon as kill returns
        pytest.fail("SIGTERM did not raise")
    assert info.value.code == 143
    assert signal.getsignal(signal.SIGTERM) == before
