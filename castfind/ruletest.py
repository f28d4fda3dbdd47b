"""Run each rule's own examples (Fixit's VALID/INVALID, semgrep's ``# ruleid:``).

``match`` code must be flagged by that rule on exactly the lines marked ``# match``; ``no_match``
code must not be flagged by it at all. Each example is scanned as a one-file root, with the whole
rule set in force (so a rule that shadows another is caught too).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from castfind.index import Index
from castfind.discover import discover
from castfind.rules import Rule, RuleSet
from castfind.scan import scan


def _flagged(rules: RuleSet, code: str, rule_id: str) -> set[int]:
    with tempfile.TemporaryDirectory(prefix="castfind-example-") as d:
        (Path(d) / "example.py").write_text(code, encoding="utf-8")
        index = Index(discover([d]), cache=None, jobs=1)
        out = scan(index, rules)
        return {f.line for f in out.findings if f.rule == rule_id}


def check_rule(rules: RuleSet, rule: Rule) -> list[str]:
    """Problems with one rule's examples (empty when they pass)."""
    problems: list[str] = []
    want = {i for i, line in enumerate(rule.match_example.splitlines(), 1) if line.rstrip().endswith("# match")}
    if not want:
        problems.append("match example marks no line with '# match'")
    got = _flagged(rules, rule.match_example, rule.id)
    if got != want:
        problems.append(f"match example: expected lines {sorted(want)}, flagged {sorted(got)}")
    bad = _flagged(rules, rule.no_match_example, rule.id)
    if bad:
        problems.append(f"no_match example: flagged lines {sorted(bad)}")
    return problems


def run_examples(rules: RuleSet) -> list[tuple[Rule, list[str]]]:
    return [(r, check_rule(rules, r)) for r in rules.rules]
