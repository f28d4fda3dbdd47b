"""Rule selection (issue 37, item 3): ``--select`` / ``--extend-select`` / ``--ignore``, the same keys and
``per-file-ignores`` in ``[tool.castfind]``, ``castfind rule ID`` and each shipped rule's README section."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from castfind.core.rules import MEASURED_CAST, UNUSED_SUPPRESSION, load_rules
from castfind.core.selection import Layer, Selection, SelectionError
from tests.support import REPO, run_castfind

RULES = (*load_rules().rules, UNUSED_SUPPRESSION, MEASURED_CAST)
SHIPPED = sorted(r.id for r in RULES)


def _on(*layers: Layer) -> list[str]:
    return sorted(Selection(layers).enabled(RULES))


def test_selectors_by_id_prefix_name_and_all() -> None:
    assert _on() == SHIPPED
    assert _on(Layer(select=("CF101",))) == ["CF101"]
    assert _on(Layer(select=("CF10",))) == ["CF101", "CF102", "CF103", "CF104"]
    assert _on(Layer(select=("whole-buffer-cast-once",))) == ["CF103"]
    assert _on(Layer(select=("ALL",), ignore=("CF1",))) == ["CF001", "CF900"]
    assert _on(Layer(extend_select=("CF101",), ignore=("CF10",))) == ["CF001", "CF101", "CF900"]


def test_the_more_specific_selector_wins_and_ignore_wins_a_tie() -> None:
    assert _on(Layer(select=("CF1",), ignore=("CF104",))) == ["CF101", "CF102", "CF103"]
    assert _on(Layer(select=("CF104",), ignore=("CF1",))) == ["CF104"]
    assert _on(Layer(select=("CF10",), ignore=("CF10",))) == []


def test_a_later_layer_with_select_starts_afresh() -> None:
    config = Layer(select=("CF101", "CF102"), where="pyproject.toml")
    assert _on(config, Layer(ignore=("CF102",))) == ["CF101"]
    assert _on(config, Layer(select=("CF104",))) == ["CF104"]
    assert _on(config, Layer(extend_select=("CF900",))) == ["CF101", "CF102", "CF900"]


def test_a_selector_that_names_no_rule_is_an_error() -> None:
    with pytest.raises(SelectionError, match=r"--ignore: 'CF7' names no rule"):
        Selection((Layer(ignore=("CF7",)),)).check(RULES)
    with pytest.raises(SelectionError, match=r"per-file-ignores 'x/\*': 'nope' names no rule"):
        Selection((), (("x/*", ("nope",)),), "pyproject.toml").check(RULES)
    Selection((Layer(select=("cf10", "unused-suppression")),)).check(RULES)  # lower-case ids are ids


def test_per_file_ignores_match_names_and_paths() -> None:
    sel = Selection((), (("test_*.py", ("ALL",)), ("pkg/legacy/*", ("CF102",))))
    on = sel.enabled(RULES)
    assert not sel.keeps(on, "CF101", "whole-kv-cache-cast-on-hot-path", "/r", "pkg/tests/test_x.py")
    assert not sel.keeps(on, "CF102", "whole-weight-cast-on-hot-path", "/r", "pkg/legacy/old.py")
    assert sel.keeps(on, "CF101", "whole-kv-cache-cast-on-hot-path", "/r", "pkg/legacy/old.py")
    assert sel.keeps(on, "CF102", "whole-weight-cast-on-hot-path", "/r", "pkg/new.py")


def _findings(proc) -> list[tuple[str, str, int]]:
    assert proc.returncode in (0, 1), proc.stderr
    return sorted((f["rule"], f["path"], f["line"]) for f in json.loads(proc.stdout)["findings"])


def test_command_line_selection_on_the_fixture(tmp_path: Path) -> None:
    cache = ("--cache-dir", str(tmp_path / "cache"))
    everything = _findings(run_castfind("scan", "fixtures/scan", "--json", *cache))
    assert sorted({r for r, _, _ in everything}) == ["CF101", "CF102", "CF103", "CF104"]
    picked = run_castfind("scan", "fixtures/scan", "--json", "--select", "CF10", "--ignore", "CF101,CF103", *cache)
    assert _findings(picked) == [f for f in everything if f[0] in ("CF102", "CF104")]
    assert json.loads(picked.stdout)["stats"]["deselected"] == len(everything) - 2
    by_name = run_castfind("scan", "fixtures/scan", "--json", "--select", "whole-weight-cast-on-hot-path", *cache)
    assert _findings(by_name) == [f for f in everything if f[0] == "CF102"]
    bad = run_castfind("scan", "fixtures/scan", "--select", "CF7", *cache)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines()[-1].startswith("castfind: --select: 'CF7' names no rule")


def test_config_selection_and_per_file_ignores(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    shutil.copytree(REPO / "fixtures/scan", proj)
    cache = ("--cache-dir", str(tmp_path / "cache"))
    everything = _findings(run_castfind("scan", str(proj), "--json", *cache))
    (proj / "pyproject.toml").write_text('[tool.castfind]\nignore = ["CF103"]\n'
                                         'per-file-ignores = {"pool.py" = ["CF104"], "minisrv/*/backend.py" = ["CF102"]}\n')
    got = _findings(run_castfind("scan", str(proj), "--json", *cache))
    assert got == [f for f in everything if f[0] == "CF101"]
    # The command line is laid over the configuration: its --select starts afresh, per-file ignores stay.
    again = _findings(run_castfind("scan", str(proj), "--json", "--select", "CF103,CF104", *cache))
    assert again == [f for f in everything if f[0] == "CF103"]
    (proj / "pyproject.toml").write_text('[tool.castfind]\nselect = ["CF1O1"]\n')
    bad = run_castfind("scan", str(proj), *cache)
    assert bad.returncode == 2
    assert "[tool.castfind] select: 'CF1O1' names no rule" in bad.stderr


def test_rule_command_documents_each_rule() -> None:
    for r in RULES:
        proc = run_castfind("rule", r.id.lower() if r.id == "CF102" else r.id)
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout
        assert out.startswith(f"{r.id} {r.name} ({r.severity})\n")
        assert "why it costs:" in out and "fix:" in out
        assert f"docs: https://github.com/castfind/castfind/blob/main/README.md#{r.id.lower()}" in out
        if r.match_example:
            assert "# match" in out and "example, not flagged:" in out
    by_name = run_castfind("rule", "whole-buffer-cast-once")
    assert by_name.stdout.startswith("CF103 ")
    unknown = run_castfind("rule", "CF999")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr == "castfind: rule CF999: no rule has this id or name — 'castfind rules list' lists them\n"


def test_every_shipped_rule_has_why_and_a_readme_section() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("\n## Rules\n"):]
    section = section[:section.find("\n## ", 1)]
    anchors = re.findall(r'<a id="(cf\d{3})"></a>', section)
    assert sorted(anchors) == [i.lower() for i in SHIPPED]
    for r in RULES:
        assert len(r.why) > 80, f"{r.id} needs a why: that says what the cast costs"
        assert r.help_uri == f"https://github.com/castfind/castfind/blob/main/README.md#{r.id.lower()}"
        assert f"`{r.name}`" in section


def test_sarif_help_uri_points_at_each_rules_section(tmp_path: Path) -> None:
    proc = run_castfind("scan", "fixtures/scan", "--sarif", "-", "--cache-dir", str(tmp_path / "cache"))
    rules = json.loads(proc.stdout)["runs"][0]["tool"]["driver"]["rules"]
    assert {r["id"]: r["helpUri"].rsplit("#", 1)[1] for r in rules} == {i: i.lower() for i in SHIPPED}


def test_a_user_rule_has_no_readme_section(tmp_path: Path) -> None:
    from tests.support import OVERLAPPING_KV_RULE

    (tmp_path / "mine.yaml").write_text(OVERLAPPING_KV_RULE)
    mine = next(r for r in load_rules([str(tmp_path)]).rules if r.id == "CF201")
    assert mine.help_uri is None
