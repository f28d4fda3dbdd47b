"""The one declaration of ``castfind scan``'s and ``castfind where``'s command-line options.

Each option's parameter name, flags, type, default and help are written here and nowhere else:
:mod:`castfind.cli` generates the typer parameters of ``scan`` and ``where`` from :data:`SCAN` and
:data:`WHERE` (:func:`castfind.cli.command`), and :mod:`castfind.quick` reads the options marked
``quick`` with the same flags and defaults, without importing typer (the reason this module imports
nothing heavier than :mod:`castfind.store.discover`). Anchored on LibCST's ``CodemodCommand.add_args``: a
command declares its arguments once, and the parser is built from that declaration.

The options are what a person types; :class:`castfind.pipeline.ScanRequest` is what the library is
asked (``--no-cache`` is ``use_cache=False``, ``--max-file-size 2M`` a byte count), built by the CLI
from the parsed options.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from castfind.store.discover import DEFAULT_MAX_FILE_SIZE, size_text

__all__ = ["SCAN", "WHERE", "Option", "flag_spellings", "quick_options"]


@dataclass(frozen=True, slots=True)
class Option:
    """One command-line parameter.

    ``flags`` are typer's spellings (``"--root", "-r"``; a boolean pair as ``"--x/--no-x"``); none for
    a positional argument. ``type`` is the parameter's annotation (what typer converts to, and what
    ``--help`` shows); ``default`` is typer's (``...``: required). ``quick``: :mod:`castfind.quick` reads
    this option (a run with any other option goes to the full command line).
    """

    name: str
    flags: tuple[str, ...]
    type: Any
    default: Any
    help: str
    metavar: str | None = None
    min: int | None = None
    quick: bool = False

    @property
    def argument(self) -> bool:
        return not self.flags

    @property
    def repeatable(self) -> bool:
        return str(self.type).startswith("list[")


def flag_spellings(option: Option) -> dict[str, bool | None]:
    """Each spelling of ``option`` → the value a boolean flag sets (None: it takes a value)."""
    out: dict[str, bool | None] = {}
    for flag in option.flags:
        on, _, off = flag.partition("/")
        out[on] = True if option.type is bool else None
        if off:
            out[off] = False
    return out


def quick_options(options: tuple[Option, ...]) -> tuple[Option, ...]:
    return tuple(o for o in options if o.quick)


# --------------------------------------------------------------------------- shared by scan and where

ROOT = Option("root", ("--root", "-r"), list[str] | None, None,
              "A source root (repeatable). Default: the current folder.", quick=True)
CACHE_DIR = Option("cache_dir", ("--cache-dir",), str | None, None,
                   "Facts cache folder. Default: $XDG_CACHE_HOME/castfind.", quick=True)
NO_CACHE = Option("no_cache", ("--no-cache",), bool, False, "Neither read nor write the facts cache.")
JOBS = Option("jobs", ("--jobs", "-j"), int, 0, "Parallel parser processes. Default: the number of cores.",
              quick=True)
EXCLUDE = Option("exclude", ("--exclude",), list[str] | None, None,
                 "Glob of paths to skip (repeatable), e.g. 'test/*'.", quick=True)
MAX_FILE_SIZE = Option("max_file_size", ("--max-file-size",), str, size_text(DEFAULT_MAX_FILE_SIZE),
                       "Skip (with a diagnostic) .py files larger than this: bytes, or with K or M, e.g. 500K.",
                       metavar="SIZE", quick=True)
#: What every command that indexes sources takes, in ``--help``'s order.
INDEX = (CACHE_DIR, NO_CACHE, JOBS, EXCLUDE, MAX_FILE_SIZE)

# --------------------------------------------------------------------------- where


WHERE: tuple[Option, ...] = (
    Option("symbol", (), str, ...,
           "A name (flashinfer_cutlass_fused_moe), dotted path (pkg.mod.func) or Class.method.", quick=True),
    ROOT,
    Option("at", ("--at",), str | None, None, "PATH:LINE — resolve the name as Python sees it at that line."),
    Option("json_out", ("--json",), bool, False,
           "Print JSON: symbol, definitions (with chains), call_sites, unresolved.", quick=True),
    Option("follow_installed", ("--follow-installed/--no-follow-installed",), bool, True,
           "Follow imports into installed packages outside the roots (found without importing them).", quick=True),
    *INDEX,
    # castfind.where.answer.DEFAULT_PARSE_BUDGET, as text (a test holds them equal; importing it here
    # would cost the quick path the index and the memo).
    Option("parse_budget", ("--parse-budget",), str, "512K",
           "Parse at most this much uncached source to find aliases and call sites "
           "(0: no limit); files left unsearched are listed under unresolved.", metavar="SIZE"),
    # castfind.where.answer.DEFAULT_TIME_BUDGET and TIME_BUDGET_ENV, in words (a test holds them equal).
    Option("time_budget", ("--time-budget",), float | None, None,
           "Stop parsing and resolving after this many seconds (default 6, or $CASTFIND_WHERE_TIME_BUDGET; "
           "0: no limit); what is left is listed under unresolved; an answer cut twice in a row is cached for "
           "lookups given no more time.", metavar="SECONDS", quick=True),
)

# --------------------------------------------------------------------------- scan

SCAN: tuple[Option, ...] = (
    Option("paths", (), list[str] | None, None,
           "Roots to scan (default: the current folder); with --only, the files to report on.", quick=True),
    ROOT,
    Option("only", ("--only",), bool, False,
           "Report only on the PATHS given (pre-commit's staged files); index the whole root."),
    Option("rules", ("--rules",), list[str] | None, None,
           "Extra rule folder or file (repeatable), added to the defaults."),
    Option("entry_point", ("--entry-point",), list[str] | None, None,
           "Extra entry-point pattern, e.g. '*.forward_batch'."),
    Option("json_out", ("--json",), bool, False, "Print JSON: findings, diagnostics, stats.", quick=True),
    Option("output_format", ("--format",), str | None, None,
           "Output format: text (default), json, sarif, github, gitlab, junit or markdown.", metavar="FORMAT"),
    Option("output", ("--output", "-o"), str | None, None,
           "Write the --format document to FILE instead of stdout.", metavar="FILE"),
    Option("sarif", ("--sarif", "--sarif-output"), str | None, None,
           "Also write SARIF 2.1.0 to this file ('-' for stdout).", metavar="FILE"),
    Option("json_output", ("--json-output",), str | None, None, "Also write the JSON report to FILE.",
           metavar="FILE"),
    Option("github_output", ("--github-output",), str | None, None, "Also write GitHub workflow commands to FILE.",
           metavar="FILE"),
    Option("gitlab_output", ("--gitlab-output",), str | None, None,
           "Also write a GitLab Code Quality report to FILE.", metavar="FILE"),
    Option("junit_output", ("--junit-output",), str | None, None, "Also write JUnit XML to FILE.", metavar="FILE"),
    Option("markdown_output", ("--markdown-output",), str | None, None,
           "Also write the Markdown report (tables, hot-path charts) to FILE.", metavar="FILE"),
    Option("statistics", ("--statistics",), bool, False,
           "Counts per rule and severity and the top files (text: instead of the findings; JSON: stats.statistics)."),
    Option("warn_unused_ignores", ("--warn-unused-ignores/--no-warn-unused-ignores",), bool, True,
           "Report '# castfind: ignore' comments that suppress nothing (CF001)."),
    Option("baseline_commit", ("--baseline-commit", "--diff"), str | None, None,
           "Report only findings that are new relative to the git tree at REF.", metavar="REF"),
    Option("fail_on", ("--fail-on",), str | None, None,
           "Exit 1 when a finding is at or above: error (default), warning, info."),
    Option("exit_zero", ("--exit-zero",), bool, False,
           "Exit 0 even when findings are at or above --fail-on (reports still mark them as failing)."),
    Option("select", ("--select",), list[str] | None, None,
           "Report only these rules: ids, id prefixes (CF10), kebab names or ALL; comma-separated or repeated. "
           "Replaces [tool.castfind] select.", metavar="RULES"),
    Option("extend_select", ("--extend-select",), list[str] | None, None,
           "Report these rules too, on top of the selection.", metavar="RULES"),
    Option("ignore", ("--ignore",), list[str] | None, None,
           "Do not report these rules (ids, prefixes, names); the more specific selector wins.", metavar="RULES"),
    Option("baseline", ("--baseline",), str | None, None, "Hide findings recorded in this baseline file."),
    Option("write_baseline", ("--write-baseline",), str | None, None,
           "Record the current findings in this baseline file."),
    Option("config", ("--config",), str | None, None,
           "Read [tool.castfind] from this TOML file instead of the pyproject.toml found from the roots up to "
           "the repository top.", metavar="FILE"),
    Option("trace", ("--trace",), list[str] | None, None, "A runtime trace (.castfind.jsonl) to join (repeatable)."),
    Option("explain", ("--explain",), str | None, None,
           "Say why each cast on that line (or the one at COL) was or was not flagged.", metavar="PATH:LINE[:COL]"),
    Option("stops", ("--stops",), bool, False,
           "Print where the proofs stopped: casts of buffer-like operands per stop reason, with the top files "
           "(JSON with --json); exit 0."),
    Option("include_tests", ("--include-tests",), bool, False,
           "Report findings in tests, benchmarks, examples and docs too (by default they are indexed but not "
           "reported: [tool.castfind] report-exclude)."),
    Option("eager", ("--eager",), bool, False,
           "Parse every file instead of only those that can matter (slower; same findings)."),
    Option("color", ("--color",), str, "auto",
           "Colour the text output: auto (on a terminal; NO_COLOR turns it off, FORCE_COLOR on), always or never.",
           metavar="WHEN"),
    Option("set_", ("--set",), list[str] | None, None,
           "Bind a name of the cost formulas (repeatable), e.g. --set layer_num=61.", metavar="NAME=VALUE"),
    Option("model_config", ("--model-config",), str | None, None,
           "A Hugging Face config.json whose fields bind the cost formulas' names.", metavar="FILE"),
    Option("kv_tokens", ("--kv-tokens",), int | None, None, "KV-cache slots (the pools' size) for the cost formulas.",
           metavar="N", min=1),
    Option("kv_cache_dtype", ("--kv-cache-dtype",), str | None, None,
           "SGLang's --kv-cache-dtype (auto, bf16, fp8_e4m3, fp8_e5m2, ...).", metavar="DTYPE"),
    Option("platform", ("--platform",), str | None, None,
           "The deployment's platform (cuda, rocm, npu, xpu, musa, cpu, mps): branches that test for another "
           "platform are off the path.", metavar="NAME"),
    Option("attention_backend", ("--attention-backend",), str | None, None,
           "The server's --attention-backend (e.g. flashinfer, fa3, triton).", metavar="NAME"),
    Option("quantization", ("--quantization",), str | None, None,
           "The server's --quantization (e.g. fp8, awq).", metavar="NAME"),
    Option("tp", ("--tp",), int | None, None, "The tensor-parallel size (weights divided by it where the code "
           "divides by the TP size).", metavar="N", min=1),
    Option("all_paths", ("--all-paths",), bool, False,
           "With a deployment, also report findings on branches the deployment never takes."),
    Option("all_models", ("--all-models",), bool, False,
           "With --model-config, also report findings not on that model's path."),
    *INDEX,
)
