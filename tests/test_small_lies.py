"""Issue 37, item 5: what castfind says must be true. ``--explain`` on a line without a cast, ``--set`` and
``--kv-tokens`` that bind nothing useful, the files counted in the summary, colour, outputs into a missing
folder."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from castfind.report.text import wants_color
from tests.support import REPO, run_castfind

FIX = REPO / "fixtures" / "scan"
BACKEND = FIX / "minisrv" / "minisrv" / "backend.py"
ANSI = re.compile("\033\\[")


def _line_of(text: str) -> int:
    return next(i for i, s in enumerate(BACKEND.read_text().splitlines(), 1) if text in s)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("cache"))


def test_explain_on_a_line_without_a_cast_is_one_line_exit_2(cache: str) -> None:
    line = _line_of("def forward_decode")  # the line above the first cast of the function
    r = run_castfind("scan", str(FIX), "--cache-dir", cache, "--explain", f"{BACKEND}:{line}")
    assert r.returncode == 2
    assert r.stdout == ""  # no account of another line's cast
    err = r.stderr.strip().splitlines()
    assert err[-1].startswith(f"castfind: {BACKEND}:{line}: no cast that castfind examined on this line")
    assert [e for e in err if not e.startswith("castfind: indexing")] == err[-1:]


def test_explain_on_a_cast_line_still_explains_it(cache: str) -> None:
    line = _line_of("get_key_buffer(layer.layer_id).to(q.dtype)")
    r = run_castfind("scan", str(FIX), "--cache-dir", cache, "--explain", f"{BACKEND}:{line}")
    assert r.returncode == 0, r.stderr
    assert f"minisrv/minisrv/backend.py:{line}:13: self.token_to_kv_pool.get_key_buffer" in r.stdout
    assert "=> CF101 error" in r.stdout


def test_a_set_name_no_formula_reads_is_said_in_the_text_report(cache: str) -> None:
    r = run_castfind("scan", str(FIX), "--cache-dir", cache, "--set", "bogus=3")
    assert "--set: bogus: no cost formula of this scan reads bogus" in r.stdout
    assert r.stdout.splitlines()[-1].endswith("(1 diagnostic)")


def test_a_set_value_that_is_not_a_number_is_said_in_the_text_report(cache: str) -> None:
    r = run_castfind("scan", str(FIX), "--cache-dir", cache, "--set", "tokens=abc")
    assert r.returncode == 1
    assert ("--set: tokens=abc: not a number, a dtype castfind sizes or a formula of bound names, so every cost "
            "that reads tokens stays unbound — give a count such as --set tokens=4096") in r.stdout.splitlines()
    ok = run_castfind("scan", str(FIX), "--cache-dir", cache, "--set", "tokens=4096", "--json")
    assert json.loads(ok.stdout)["diagnostics"] == []


def test_kv_tokens_that_binds_nothing_gets_a_hint(cache: str) -> None:
    r = run_castfind("scan", str(FIX), "--cache-dir", cache, "--kv-tokens", "1000", "--json")
    diags = [d for d in json.loads(r.stdout)["diagnostics"] if d["path"] == "--kv-tokens"]
    assert len(diags) == 1 and diags[0]["message"].startswith("binds size, which no cost formula of this scan reads")
    # fixtures/cost's pools are sized by `size`: --kv-tokens binds it, no hint.
    r = run_castfind("scan", str(REPO / "fixtures" / "cost"), "--cache-dir", cache, "--kv-tokens", "1000", "--json")
    assert not [d for d in json.loads(r.stdout)["diagnostics"] if d["path"] == "--kv-tokens"]


def test_the_summary_counts_files_with_reported_findings(cache: str) -> None:
    r = run_castfind("scan", str(FIX), "--cache-dir", cache, "--json")
    doc = json.loads(r.stdout)
    with_findings = {f["path"] for f in doc["findings"]}
    assert len(with_findings) == 2 and doc["stats"]["files"] == 3
    text = run_castfind("scan", str(FIX), "--cache-dir", cache)
    assert text.stdout.splitlines()[-1] == "3 errors, 1 warning, 2 info in 2 of 3 files"
    one = run_castfind("scan", str(FIX), "--cache-dir", cache, "--select", "CF104")
    assert one.stdout.splitlines()[-1] == "0 errors, 1 warning, 0 info in 1 of 3 files"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("when", "tty", "env", "want"), [
    ("auto", True, {}, True),
    ("auto", False, {}, False),
    ("auto", True, {"NO_COLOR": "1"}, False),
    ("auto", False, {"FORCE_COLOR": "1"}, True),
    ("auto", False, {"FORCE_COLOR": "0"}, False),
    ("auto", False, {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),
    ("always", False, {"NO_COLOR": "1"}, True),
    ("never", True, {"FORCE_COLOR": "1"}, False),
])
def test_wants_color(when: str, tty: bool, env: dict[str, str], want: bool) -> None:
    assert wants_color(when, _Tty() if tty else io.StringIO(), env) is want


def test_colour_on_the_command_line_when_piped(cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert not ANSI.search(run_castfind("scan", str(FIX), "--cache-dir", cache).stdout)
    assert ANSI.search(run_castfind("scan", str(FIX), "--cache-dir", cache, "--color", "always").stdout)
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert ANSI.search(run_castfind("scan", str(FIX), "--cache-dir", cache).stdout)  # the quick path too
    assert not ANSI.search(run_castfind("scan", str(FIX), "--cache-dir", cache, "--color", "never").stdout)
    bad = run_castfind("scan", str(FIX), "--cache-dir", cache, "--color", "sometimes")
    assert bad.returncode == 2 and bad.stderr.strip() == "castfind: --color sometimes: expected auto, always, never"


@pytest.mark.parametrize("option", ["--sarif", "--json-output", "--junit-output", "--output", "--write-baseline"])
def test_an_output_into_a_missing_folder_is_one_line_and_creates_nothing(tmp_path: Path, cache: str,
                                                                        option: str) -> None:
    target = tmp_path / "new" / "dir" / "x.out"
    r = run_castfind("scan", str(FIX), "--cache-dir", cache, option, str(target))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"castfind: {target}: folder {target.parent} does not exist — create it first, or pass a file path in a "
        f"writable folder to {'--sarif-output' if option == '--sarif' else option}"]
    assert not (tmp_path / "new").exists()


def test_explain_counts_every_line_of_a_multi_line_cast_and_no_line_below_it(cache: str) -> None:
    root = REPO / "fixtures" / "explain_lines"
    attn = root / "spanpkg" / "attn.py"
    lines = attn.read_text().splitlines()
    first = next(i for i, s in enumerate(lines, 1) if "get_key_buffer(" in s)
    for line in (first, first + 1, first + 2):
        r = run_castfind("scan", str(root), "--cache-dir", cache, "--explain", f"{attn}:{line}")
        assert r.returncode == 0, r.stderr
        assert f"spanpkg/attn.py:{first}:" in r.stdout and "=> CF101 error" in r.stdout
    below = first + 3  # scores = q @ k: no cast, though the nearest cast above is a finding
    r = run_castfind("scan", str(root), "--cache-dir", cache, "--explain", f"{attn}:{below}")
    assert r.returncode == 2 and r.stdout == ""
    assert f"{attn}:{below}: no cast that castfind examined on this line" in r.stderr
