"""CF001: a ``# castfind: ignore`` comment that suppresses nothing is reported (ruff's RUF100)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from castfind import cli
from castfind.analysis.findings import suppressions_in
from castfind.core.rules import UNUSED_SUPPRESSION

runner = CliRunner()

HOT = "    def forward_decode(self, q, layer):\n"
KV = "self.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q.dtype)"
SOURCE = (
    "class Backend:\n"                                                      # 1
    + HOT                                                                   # 2
    + f"        a = {KV}  # castfind: ignore[CF101]\n"                     # 3 used
    + f"        b = {KV}  # castfind: ignore[CF102]\n"                     # 4 wrong rule: CF102 unused, CF101 stays
    + f"        c = {KV}  # castfind: ignore[CF101, CF102]\n"              # 5 CF102 unused
    + "        d = q + 1  # castfind: ignore\n"                             # 6 bare, nothing there
    + "        note = '# castfind: ignore[CF101] inside a string'\n"        # 7 not a comment
    + "        # castfind: ignore[whole-kv-cache-cast-on-hot-path]\n"       # 8 by name, for line 9: used
    + f"        e = {KV}\n"                                                 # 9
    + "        return a, b, c, d, e, note\n"
)


def scan(root: Path, *extra: str) -> tuple[int, dict]:
    r = runner.invoke(cli.app, ["scan", str(root), "--no-cache", "-j", "1", "--json", *extra])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


def test_unused_ignores_are_cf001_warnings(tmp_path: Path) -> None:
    (tmp_path / "backend.py").write_text(SOURCE)
    _, doc = scan(tmp_path)
    by_rule = sorted((f["rule"], f["line"]) for f in doc["findings"])
    assert by_rule == [("CF001", 4), ("CF001", 5), ("CF001", 6), ("CF101", 4)]
    cf001 = {f["line"]: f for f in doc["findings"] if f["rule"] == "CF001"}
    assert cf001[4]["message"] == "# castfind: ignore[CF102]: CF102 suppresses nothing here"
    assert cf001[5]["message"] == "# castfind: ignore[CF101, CF102]: CF102 of [CF101, CF102] suppresses nothing here"
    assert cf001[6]["message"] == "# castfind: ignore: suppresses nothing"
    assert {f["severity"] for f in cf001.values()} == {"warning"}
    assert cf001[6]["column"] == SOURCE.splitlines()[5].index("#") + 1
    assert doc["stats"]["suppressed"] == 3  # lines 3, 5 and 9


def test_the_flag_turns_it_off_and_fail_on_applies(tmp_path: Path) -> None:
    (tmp_path / "quiet.py").write_text("def f(x):\n    return x + 1  # castfind: ignore[CF101]\n")
    code, doc = scan(tmp_path)
    assert code == 0 and [f["rule"] for f in doc["findings"]] == ["CF001"]  # a warning: below --fail-on error
    code, doc = scan(tmp_path, "--fail-on", "warning")
    assert code == 1 and [f["rule"] for f in doc["findings"]] == ["CF001"]
    code, doc = scan(tmp_path, "--fail-on", "warning", "--no-warn-unused-ignores")
    assert code == 0 and doc["findings"] == []


def test_only_reports_the_given_files(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1  # castfind: ignore\n")
    (tmp_path / "b.py").write_text("y = 2  # castfind: ignore\n")
    r = runner.invoke(cli.app, ["scan", "--only", str(tmp_path / "b.py"), "--root", str(tmp_path), "--no-cache",
                                "-j", "1", "--json"])
    assert [(f["rule"], f["path"]) for f in json.loads(r.stdout)["findings"]] == [("CF001", "b.py")]


def test_suppressions_are_read_from_comments_only() -> None:
    found = suppressions_in("s = '# castfind: ignore'\nt = 1  # castfind: ignore[cf101 , CF102]\n")
    assert [(s.line, s.column, s.codes) for s in found] == [(2, 8, ("CF101", "CF102"))]
    # Source that does not tokenise to the end (an unclosed bracket) keeps the comments read before, never raises.
    assert [s.line for s in suppressions_in("x = (1,\n  # castfind: ignore\n")] == [2]


def test_cf001_is_described_like_a_rule() -> None:
    assert (UNUSED_SUPPRESSION.id, UNUSED_SUPPRESSION.severity) == ("CF001", "warning")
    assert UNUSED_SUPPRESSION.fix


def test_a_warm_scan_sees_an_ignore_comment_added_or_removed(tmp_path: Path) -> None:
    """Which files hold an ignore comment is carried with the tree's digest: an edit is still seen."""
    root, cache = tmp_path / "src", tmp_path / "cache"
    root.mkdir()
    (root / "a.py").write_text("def f(x):\n    return x + 1\n")
    (root / "b.py").write_text("def g(x):\n    return x\n")

    def cf001() -> list[tuple[str, int]]:
        r = runner.invoke(cli.app, ["scan", str(root), "--cache-dir", str(cache), "-j", "1", "--json"])
        assert r.exit_code in (0, 1), r.output
        return sorted((f["path"], f["line"]) for f in json.loads(r.stdout)["findings"] if f["rule"] == "CF001")

    assert cf001() == [] and cf001() == []
    (root / "b.py").write_text("def g(x):\n    return x  # castfind: ignore[CF101]\n")
    assert cf001() == [("b.py", 2)] and cf001() == [("b.py", 2)]  # cold, then carried
    (root / "b.py").write_text("def g(x):\n    return x\n")
    assert cf001() == []
