"""Every rule's own examples run (semgrep/Fixit style); malformed rule files are rejected with file:line."""

from __future__ import annotations

import pytest

from castfind.rules import RuleError, load_rules, validate
from castfind.ruletest import check_rule

RULES = load_rules()


@pytest.mark.parametrize("rule", RULES.rules, ids=[r.id for r in RULES.rules])
def test_rule_examples(rule):
    assert check_rule(RULES, rule) == []


def test_rules_test_command_exits_0():
    from tests.conftest import run_castfind

    r = run_castfind("rules", "test")
    assert r.returncode == 0 and f"{len(RULES.rules)} passed, 0 failed" in r.stdout


def test_every_rule_has_id_name_severity_message_and_fix():
    for r in RULES.rules:
        assert r.id.startswith("CF") and r.name and r.severity in ("error", "warning", "info") and r.message and r.fix


def test_malformed_rule_file_names_file_line_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - id: CF201\n    name: x\n    severity: fatal\n    message: m\n    cast: [to]\n"
                   "    receiver: {buffer: [nope]}\n    examples: {match: 'x', no_match: 'y'}\n    colour: red\n")
    _, errors = validate([bad], include_default=True)
    msgs = [str(e) for e in errors]
    assert any(m.startswith(f"{bad}:4: rule CF201.severity") for m in msgs), msgs
    assert any(m.startswith(f"{bad}:9: rule CF201.colour") for m in msgs), msgs
    with pytest.raises(RuleError):
        load_rules([bad])


def test_yaml_syntax_error_has_a_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - id: [\n")
    _, errors = validate([bad])
    assert errors and errors[0].path == str(bad) and errors[0].line >= 2
