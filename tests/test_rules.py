"""Every rule's own examples run (semgrep/Fixit style); malformed rule files are rejected with file:line."""

from __future__ import annotations

import pytest

from castfind.core.rules import RuleError, load_rules, validate
from castfind.ruletest import check_rule
from tests.support import OVERLAPPING_KV_RULE, why_on_line

RULES = load_rules()


@pytest.mark.parametrize("rule", RULES.rules, ids=[r.id for r in RULES.rules])
def test_rule_examples(rule):
    assert check_rule(RULES, rule) == []


def test_rules_test_command_exits_0():
    from tests.support import run_castfind

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


CODE = """\
class B:
    def forward_decode(self, q, layer):
        return self.pool.get_key_buffer(layer.layer_id).to(q.dtype)
"""


def _overlap_setup(tmp_path):
    user = tmp_path / "user.yaml"
    user.write_text(OVERLAPPING_KV_RULE)
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(CODE)
    return user, src


def test_explain_names_the_rule_that_took_the_line_and_the_one_it_shadowed(tmp_path):
    from castfind import api

    user, src = _overlap_setup(tmp_path)
    run = api.scan([str(src)], rules=[str(user)], explain=True, use_cache=False, jobs=1)
    assert [(f.rule, f.line) for f in run.report.findings] == [("CF101", 3)]
    why = why_on_line(run.explanations, "m.py", 3)
    shadow = [w for w in why if "shadow" in w]
    assert len(shadow) == 1 and "CF101" in shadow[0] and "CF201" in shadow[0] and "user.yaml" in shadow[0], why
    # Without the overlapping rule nothing is shadowed.
    run = api.scan([str(src)], explain=True, use_cache=False, jobs=1)
    assert not [w for w in why_on_line(run.explanations, "m.py", 3) if "shadow" in w]


def test_explain_command_prints_the_shadowed_rule(tmp_path):
    from tests.support import run_castfind

    user, src = _overlap_setup(tmp_path)
    r = run_castfind("scan", str(src), "--rules", str(user), "--no-cache", "--explain", f"{src / 'm.py'}:3")
    assert r.returncode == 0, r.stderr
    assert "CF201" in r.stdout and "shadow" in r.stdout, r.stdout


def test_rules_test_says_which_earlier_rule_took_a_shadowed_example_line(tmp_path):
    user, _ = _overlap_setup(tmp_path)
    rs = load_rules([user])
    rule = next(r for r in rs.rules if r.id == "CF201")
    problems = check_rule(rs, rule)
    assert any("line 3" in p and "CF101" in p for p in problems), problems
