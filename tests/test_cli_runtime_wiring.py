"""record and trace never vanish silently: when castfind.runtime.cli cannot be imported or cannot
register its commands, stand-ins say why and exit 2, and the static commands keep working."""

from __future__ import annotations

import sys

import pytest
import typer
from typer.testing import CliRunner

import castfind.runtime.cli as runtime_cli
from castfind import cli

runner = CliRunner()


def fresh_app() -> typer.Typer:
    app = typer.Typer(cls=cli._Group, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

    @app.command("static")
    def static() -> None:
        """A command that has nothing to do with the runtime side."""
        typer.echo("static ok")

    cli._register_runtime(app)
    return app


def names(app: typer.Typer) -> list[str]:
    return [c.name or "" for c in app.registered_commands] + [g.name or "" for g in app.registered_groups]


def test_the_runtime_commands_are_registered() -> None:
    app = fresh_app()
    assert sorted(names(app)) == ["record", "static", "trace"]
    r = runner.invoke(app, ["trace", "--help"])
    assert r.exit_code == 0 and "import" in r.stdout and "show" in r.stdout


def _assert_stand_ins(app: typer.Typer, reason: str) -> None:
    assert sorted(names(app)) == ["record", "static", "trace"]  # listed once each, nothing half-registered
    for args in (["record", "-o", "t.jsonl", "--", "x.py"], ["trace", "show", "t.jsonl"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, r.output
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"castfind: {args[0]}: unavailable, castfind.runtime.cli failed to "), line
        assert reason in line and "Traceback" not in r.stderr
    r = runner.invoke(app, ["static"])
    assert (r.exit_code, r.stdout) == (0, "static ok\n")


def test_an_import_failure_leaves_stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "castfind.runtime.cli", None)
    _assert_stand_ins(fresh_app(), "failed to import (ModuleNotFoundError: ")


def test_a_register_that_fails_halfway_leaves_stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    def half(app: typer.Typer) -> None:
        app.command("record")(lambda: None)
        raise RuntimeError("boom")

    monkeypatch.setattr(runtime_cli, "register", half)
    _assert_stand_ins(fresh_app(), "failed to register its commands (RuntimeError: boom)")


def test_debug_shows_the_import_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "castfind.runtime.cli", None)
    monkeypatch.setenv("CASTFIND_DEBUG", "1")
    r = runner.invoke(fresh_app(), ["trace", "show", "t.jsonl"])
    assert r.exit_code == 2
    assert "Traceback" in r.stderr and r.stderr.rstrip().splitlines()[-1].startswith("castfind: trace: unavailable")
