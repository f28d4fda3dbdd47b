"""``castfind.options`` is the one declaration of ``scan``'s and ``where``'s options: the command line's
parameters are generated from it, ``--help`` shows each with its help and default, and the quick path
reads exactly the options marked ``quick``, with the same spellings and defaults."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from castfind import cli, options, quick
from castfind.store.discover import DEFAULT_MAX_FILE_SIZE, parse_size
from castfind.where.answer import DEFAULT_PARSE_BUDGET, DEFAULT_TIME_BUDGET, TIME_BUDGET_ENV

COMMANDS = {"scan": options.SCAN, "where": options.WHERE}


def _click_params(name: str) -> dict[str, object]:
    group = typer.main.get_command(cli.app)
    command = group.commands[name]  # type: ignore[attr-defined]
    return {p.name: p for p in command.params}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_commands_parameters_are_the_declaration(name: str) -> None:
    declared = COMMANDS[name]
    params = _click_params(name)
    assert list(params) == [o.name for o in declared]  # same names, same order (--help's order)
    for o in declared:
        p = params[o.name]
        assert p.help == o.help, o.name  # type: ignore[attr-defined]
        if o.argument:
            assert p.required == (o.default is ...), o.name  # type: ignore[attr-defined]
            continue
        spelled = [s for flag in o.flags for s in flag.split("/")]
        assert sorted([*p.opts, *p.secondary_opts]) == sorted(spelled), o.name  # type: ignore[attr-defined]
        assert p.default == o.default, o.name  # type: ignore[attr-defined]
        assert p.metavar == o.metavar, o.name  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_lists_every_declared_option(name: str) -> None:
    r = CliRunner().invoke(cli.app, [name, "--help"], env={"COLUMNS": "400"})
    assert r.exit_code == 0
    text = re.sub(r"\s+", " ", r.stdout)
    for o in COMMANDS[name]:
        for flag in o.flags:
            assert flag.split("/")[0] in text, flag
        words = " ".join(o.help.replace("[tool.castfind] ", "").split()[:6])  # rich reads [x] as markup
        assert words in text, o.name


def test_one_default_for_each_size() -> None:
    assert parse_size(options.MAX_FILE_SIZE.default) == DEFAULT_MAX_FILE_SIZE
    where_budget = next(o for o in options.WHERE if o.name == "parse_budget")
    assert parse_size(where_budget.default) == DEFAULT_PARSE_BUDGET
    seconds = next(o for o in options.WHERE if o.name == "time_budget")
    assert f"(default {DEFAULT_TIME_BUDGET:g}, or ${TIME_BUDGET_ENV};" in seconds.help
    parsed = quick._parse(["scan", "x"])
    assert parsed is not None and parsed.max_file_size == DEFAULT_MAX_FILE_SIZE and parsed.jobs == 0


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_quick_path_reads_exactly_the_quick_options(name: str) -> None:
    operand = ["sym"] if name == "where" else []
    for o in COMMANDS[name]:
        if o.argument:
            continue
        for spelling, sets in options.flag_spellings(o).items():
            args = [name, *operand, spelling] + ([] if sets is not None else ["v1" if o.name != "jobs" else "3"])
            parsed = quick._parse(args)
            if not o.quick:
                assert parsed is None, spelling
                continue
            if o.name == "max_file_size":
                assert parsed is None  # not a size: the full path says so
                continue
            assert parsed is not None, spelling
            got = getattr(parsed, o.name)
            assert got == (sets if sets is not None else 3 if o.name == "jobs" else ("v1",) if o.repeatable else "v1")


def test_the_quick_path_takes_the_declared_defaults() -> None:
    parsed = quick._parse(["where", "sym"])
    assert parsed is not None
    for o in options.quick_options(options.WHERE):
        if not o.argument and o.name not in ("max_file_size", "jobs"):
            assert getattr(parsed, o.name) == (() if o.repeatable else o.default), o.name
