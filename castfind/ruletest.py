"""Run each rule's own examples (Fixit's VALID/INVALID, semgrep's ``# ruleid:``).

``match`` code must be flagged by that rule on exactly the lines marked ``# match``; ``no_match``
code must not be flagged by it at all. Each example is scanned as a one-file root, with the whole
rule set in force (so a rule that shadows another is caught too).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from castfind.analysis.scan import scan
from castfind.core.rules import Rule, RuleSet
from castfind.store.discover import discover
from castfind.store.index import Index


def _findings(rules: RuleSet, code: str) -> dict[int, set[str]]:
    """The ids of the rules that flag each line of ``code``."""
    with tempfile.TemporaryDirectory(prefix="castfind-example-") as d:
        (Path(d) / "example.py").write_text(code, encoding="utf-8")
        index = Index(discover([d]), cache=None, jobs=1)
        out = scan(index, rules)
        lines: dict[int, set[str]] = {}
        for f in out.findings:
            lines.setdefault(f.line, set()).add(f.rule)
        return lines


def _flagged(rules: RuleSet, code: str, rule_id: str) -> set[int]:
    return {line for line, ids in _findings(rules, code).items() if rule_id in ids}


def check_rule(rules: RuleSet, rule: Rule) -> list[str]:
    """Problems with one rule's examples (empty when they pass)."""
    problems: list[str] = []
    want = {i for i, line in enumerate(rule.match_example.splitlines(), 1) if line.rstrip().endswith("# match")}
    if not want:
        problems.append("match example marks no line with '# match'")
    lines = _findings(rules, rule.match_example)
    got = {line for line, ids in lines.items() if rule.id in ids}
    if got != want:
        problems.append(f"match example: expected lines {sorted(want)}, flagged {sorted(got)}")
    for line in sorted(want - got):
        if lines.get(line):  # an earlier rule took the line: the first matching rule reports a cast
            ids = ", ".join(sorted(lines[line]))
            problems.append(f"match example: line {line} is taken by {ids}, an earlier rule that shadows {rule.id} there")
    bad = _flagged(rules, rule.no_match_example, rule.id)
    if bad:
        problems.append(f"no_match example: flagged lines {sorted(bad)}")
    return problems


def run_examples(rules: RuleSet) -> list[tuple[Rule, list[str]]]:
    return [(r, check_rule(rules, r)) for r in rules.rules]
