"""The carried ``where`` answer printed before typer is imported (:mod:`castfind.quick`): exactly the
stdout, stderr and exit code of the full command line, and nothing at all when it does not answer."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from typer.testing import CliRunner

from castfind import cli, quick

FIX = Path(__file__).resolve().parent.parent / "fixtures"
WHERE = [str(FIX / "where" / "kernelkit"), str(FIX / "where" / "servekit")]
SCAN = [str(FIX / "scan" / "minisrv")]

CASES = [
    ("topk_softmax", WHERE, []),
    ("kernelkit.fused.grouped_topk", WHERE, ["--json"]),
    ("MoeConfig", WHERE, ["--json", "--exclude", "*/tests/*"]),
    ("no_such_name_here", WHERE, []),
    ("no_such_name_here", WHERE, ["--json"]),
    ("forward", SCAN, ["-j", "1", "--max-file-size", "500K"]),
    ("get_key_buffer", SCAN, ["--json", "--jobs=1"]),
    ("topk_softmax", WHERE, ["--no-follow-installed", "--json"]),
    ("MoeConfig", WHERE, ["--no-follow-installed", "--follow-installed"]),
]


def _full(args: list[str]) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli.app, args)
    return r.exit_code, r.stdout, r.stderr


def _quick(args: list[str]) -> tuple[int | None, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = quick.carried_where(args)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("symbol", "roots", "extra"), CASES)
def test_the_carried_answer_prints_what_the_full_path_prints(tmp_path: Path, symbol: str, roots: list[str],
                                                             extra: list[str]) -> None:
    args = ["where", symbol, *(a for r in roots for a in ("--root", r)), "--cache-dir", str(tmp_path), *extra]
    assert _quick(args) == (None, "", "")  # nothing carried yet: not answered, nothing printed
    cold = _full(args)
    warm = _full(args)
    assert warm == cold
    assert _quick(args) == warm  # answered from the carried result, as the full path answers


@pytest.mark.parametrize("extra", [
    ["--no-cache"], ["--at", "x.py:1"], ["--help"], ["--no-follow-installed"], ["-j", "-1"], ["--jobs", "x"],
    ["--max-file-size", "0"], ["--unknown"], ["-rX"], ["second_symbol"], ["--root"], ["--parse-budget", "0"],
])
def test_what_it_cannot_read_with_certainty_goes_to_the_full_path(tmp_path: Path, extra: list[str]) -> None:
    args = ["where", "topk_softmax", "--root", WHERE[0], "--cache-dir", str(tmp_path)]
    _full(args)
    assert _quick(args)[0] == 0
    assert _quick([*args, *extra]) == (None, "", "")
    assert _quick(["scan", WHERE[0], "--cache-dir", str(tmp_path)]) == (None, "", "")


def test_a_changed_tree_is_not_answered_from_the_old_result(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "src"
    shutil.copytree(FIX / "where" / "kernelkit", root)
    args = ["where", "topk_softmax", "--root", str(root), "--cache-dir", str(tmp_path / "c"), "--json"]
    _full(args)
    assert _quick(args)[0] == 0
    gating = root / "kernelkit" / "fused" / "gating.py"
    gating.write_text(gating.read_text().replace("def topk_softmax(", "def topk_softmax_renamed("))
    assert _quick(args) == (None, "", "")
    assert _full(args)[0] == 1


def _quick_scan(args: list[str]) -> tuple[int | None, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = quick.carried_scan(args)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("extra", [[], ["--json"], ["-j", "1", "--max-file-size", "500K"], ["--exclude", "*/attn/*"]])
def test_a_carried_scan_prints_what_the_full_path_prints(tmp_path: Path, extra: list[str]) -> None:
    args = ["scan", *SCAN, "--cache-dir", str(tmp_path), *extra]
    assert _quick_scan(args) == (None, "", "")  # nothing carried yet: not answered, nothing printed
    cold = _full(args)
    assert cold[0] == 1 and cold[1]  # the fixture has findings
    warm = _full(args)
    assert warm[0] == cold[0] and '"outcome": "carried"' in warm[1] if "--json" in extra else warm == cold
    assert _quick_scan(args) == warm


@pytest.mark.parametrize("extra", [
    ["--no-cache"], ["--format", "sarif"], ["--only"], ["--stops"], ["--include-tests"], ["--trace", "x.jsonl"],
    ["--follow-installed"], ["-j", "-1"], ["--unknown"], ["--fail-on", "warning"], ["--explain", "a.py:1"],
])
def test_a_scan_it_cannot_read_with_certainty_goes_to_the_full_path(tmp_path: Path, extra: list[str]) -> None:
    args = ["scan", *SCAN, "--cache-dir", str(tmp_path)]
    _full(args)
    assert _quick_scan(args)[0] == 1
    assert _quick_scan([*args, *extra]) == (None, "", "")


def test_a_changed_tree_is_scanned_again(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "src"
    shutil.copytree(SCAN[0], root)
    args = ["scan", str(root), "--cache-dir", str(tmp_path / "c"), "--json"]
    _full(args)
    assert _quick_scan(args)[0] == 1
    victim = next(p for p in sorted(root.rglob("*.py")) if ".to(" in p.read_text())
    victim.write_text(victim.read_text() + "\n# edited\n")
    assert _quick_scan(args) == (None, "", "")


def test_a_lookup_the_command_line_runs_is_timed_from_when_the_command_began(tmp_path: Path, monkeypatch) -> None:
    """`where`'s time budget counts from the start of the command (quick.main), imports and the command line's
    parse included: a person waits from then. Outside quick.main (the library, a test's CliRunner) it counts from
    the call."""
    import sys
    import time

    from castfind import api

    seen: list[float | None] = []
    real = api.where
    monkeypatch.setattr(api, "where", lambda *a, **k: seen.append(k.get("started")) or real(*a, **k))
    args = ["castfind", "where", "topk_softmax", "--no-cache", *sum((["--root", r] for r in WHERE), [])]
    monkeypatch.setattr(sys, "argv", args)
    from castfind.core import started

    monkeypatch.setattr(started, "_first", False)
    before = time.monotonic()
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()), pytest.raises(SystemExit) as done:
        quick.main()
    assert done.value.code == 0
    assert len(seen) == 1 and seen[0] is not None and before <= seen[0] <= time.monotonic()
    # A process's first command began before castfind's imports, when quick was imported.
    monkeypatch.setattr(started, "_first", True)
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        quick.main()
    assert seen[1] == started.IMPORTED
    assert started.command_started() is None  # the command is over
    assert _full(args[1:])[0] == 0 and seen[2] is None
