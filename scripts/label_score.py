#!/usr/bin/env python3
"""Score a ``castfind scan --json`` run against hand labels (recall and precision at severity ``error``).

Usage:
    castfind scan .corpus/sglang --json > scan.json      # exit 1 (findings) is expected
    python scripts/label_score.py scan.json labels/sglang-0.5.23/labels.csv
    python scripts/label_score.py scan.json --errors labels/sglang-0.5.23/errors.csv

Scan the *parent* of the ``sglang`` package (``.corpus/sglang``), so that finding paths start with ``sglang/``
as the label paths do; ``--path-prefix`` prepends a prefix to every finding path otherwise.

This module is the one implementation of the scoring: ``tests/test_labels.py`` (the corpus test) and
``tests/test_label_score.py`` (its rules on tiny inputs) import it. Standard library only.

Matching a label (path, line, column: where its cast call starts, 1-based) to findings:

1. Only findings whose ``path`` equals the label's path are considered.
2. **Exact**: findings at the label's (line, column) are that cast's findings, and only they decide, whatever
   their severity (an outer call's error cannot stand in for an inner cast castfind judged less severe). When
   several labels sit there (chained casts such as ``x.float().to(dt)`` start at the same column), a finding
   whose ``expr`` equals one label's ``expr`` (whitespace ignored; labels cut it to 160 characters) is that
   label's alone; a finding whose text matches no label there is shared by all of them.
3. **Range**: with no exact finding, every finding whose ``line``..``end_line`` contains the label's line
   decides, except findings that sit exactly at *another* label's position (those belong to that label). This
   covers a column that differs (``ast`` counts UTF-8 bytes, castfind characters) and multi-line calls.
4. A label is **flagged** when one of the findings that decide it has severity ``error``.
5. A label is **found small** when it is not flagged and a finding that decides it is a ``warning`` whose
   cost verdict is ``tiny``: castfind found the cast and lowered it *only* because it read the buffer's size
   as small by construction, and says so. The labels have no size criterion (labels/sglang-0.5.23/README.md:
   an entire weight tensor of a layer is whole whatever its size); castfind's rules do (issue 34: a buffer
   small by construction is a warning, not an error). Counting such a label as found keeps the label as it
   was written; a cast castfind stops finding, or lowers for any other reason (cold, guess, no-op), is a miss.

Figures, over the labelled population only (a finding on an unlabelled line counts neither way):

* labels whose ``label`` is ``unsure`` or whose ``why`` starts with ``unsure:`` are excluded from both;
* recall = whole-buffer-hot labels flagged or found small / whole-buffer-hot labels; the table also prints
  the stricter recall at error (flagged only);
* precision = flagged labels that are whole-buffer-hot / flagged labels;
* a **miss** is a whole-buffer-hot label not flagged; a **false alarm** is a flagged label of any other kind.

A figure whose denominator is zero is ``None`` (printed ``n/a``).

``--errors FILE`` scores the other way round: every ``error`` finding of the scan against ``errors.csv``
(columns ``path,line,column,function,expr,label,why``), where each row is one error finding of a scan, read and
classed ``TP`` or ``FP-small`` / ``FP-noop`` / ``FP-once`` / ``FP-cold`` / ``FP-guess``
(labels/sglang-0.5.23/README.md says what each means):

6. An error finding is that row's when path, line and column are equal; when several rows sit there (chained
   casts), the row whose ``expr`` equals the finding's (rule 2's comparison). Several error findings of one cast
   (two rules) count once.
7. Precision at error = labelled casts classed ``TP`` / labelled casts flagged at error, rows whose ``why``
   starts with ``unsure:`` left out; the table counts each class.
8. An error finding with no row is **unlabelled**: the figure is not computed over it, and the corpus test fails
   until a person labels it by reading the code. A row with no error finding in the scan is **not flagged now**
   (castfind changed); it stays in the file, which is the ground truth for the scan it was made from.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOT = "whole-buffer-hot"
ERROR_CLASSES = ("TP", "FP-small", "FP-noop", "FP-once", "FP-cold", "FP-guess")  # errors.csv's ``label`` column
FLAG_SEVERITY = "error"
SMALL_VERDICT = "tiny"  # castfind's cost verdict for a buffer small by construction (analysis/cost.py)
EXPR_CUT = 160  # labels.csv keeps the first 160 characters of a cast's (one-line) text

Finding = Mapping[str, Any]


@dataclass(frozen=True)
class Label:
    """One row of ``labels.csv``."""

    path: str
    line: int
    column: int
    function: str
    expr: str
    population: str
    label: str
    why: str

    @property
    def unsure(self) -> bool:
        return self.label == "unsure" or self.why.strip().lower().startswith("unsure")

    @property
    def hot(self) -> bool:
        return self.label == HOT

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Match:
    """The findings that decide one label, and how they were found (``exact``, ``range`` or ``none``)."""

    label: Label
    findings: tuple[Finding, ...]
    how: str

    @property
    def flagged(self) -> bool:
        return any(f.get("severity") == FLAG_SEVERITY for f in self.findings)

    @property
    def found_small(self) -> bool:
        """Not flagged, but reported as a warning that castfind lowered for the buffer's size alone (rule 5)."""
        return not self.flagged and any(
            f.get("severity") == "warning" and (f.get("cost") or {}).get("verdict") == SMALL_VERDICT
            for f in self.findings)


@dataclass
class Score:
    """Recall and precision at severity ``error`` over the scored (not unsure) labels."""

    matches: list[Match] = field(default_factory=list)  # one per scored label, in label order
    unsure: list[Label] = field(default_factory=list)

    @property
    def hot(self) -> list[Match]:
        return [m for m in self.matches if m.label.hot]

    @property
    def flagged(self) -> list[Match]:
        return [m for m in self.matches if m.flagged]

    @property
    def hits(self) -> list[Match]:
        return [m for m in self.matches if m.label.hot and m.flagged]

    @property
    def small(self) -> list[Match]:
        """Whole-buffer-hot labels castfind found and lowered to a warning for the buffer's size (rule 5)."""
        return [m for m in self.matches if m.label.hot and m.found_small]

    @property
    def misses(self) -> list[Match]:
        return [m for m in self.matches if m.label.hot and not m.flagged and not m.found_small]

    @property
    def false_alarms(self) -> list[Match]:
        return [m for m in self.matches if m.flagged and not m.label.hot]

    @property
    def recall(self) -> float | None:
        return (len(self.hits) + len(self.small)) / len(self.hot) if self.hot else None

    @property
    def recall_at_error(self) -> float | None:
        return len(self.hits) / len(self.hot) if self.hot else None

    @property
    def precision(self) -> float | None:
        return len(self.hits) / len(self.flagged) if self.flagged else None

    def table(self) -> str:
        """A short plain-text report: counts, figures, then each miss and each false alarm with its why."""

        def fig(x: float | None) -> str:
            return "n/a" if x is None else f"{x:.3f}"

        by_kind: dict[str, int] = defaultdict(int)
        for m in self.matches:
            by_kind[m.label.label] += 1
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items()))
        lines = [
            f"labels scored {len(self.matches)} ({kinds}); unsure excluded {len(self.unsure)}",
            f"flagged at {FLAG_SEVERITY}: {len(self.flagged)} labelled casts; hot flagged {len(self.hits)}/{len(self.hot)}",
            f"recall    {fig(self.recall)}  ({len(self.hits) + len(self.small)}/{len(self.hot)})"
            f"  at error alone {fig(self.recall_at_error)} ({len(self.hits)}/{len(self.hot)})",
            f"precision {fig(self.precision)}  ({len(self.hits)}/{len(self.flagged)})",
            f"found, lowered to a warning as small by construction ({len(self.small)}):",
        ]
        for m in self.small:
            notes = "; ".join(str((f.get("cost") or {}).get("note", "")) for f in m.findings
                              if (f.get("cost") or {}).get("verdict") == SMALL_VERDICT)
            lines.append(f"  {m.label.where}  {m.label.expr}  castfind: {notes}  label why: {m.label.why}")
        lines.append(f"misses ({len(self.misses)}):")
        for m in self.misses:
            seen = ", ".join(f"{f.get('rule')} {f.get('severity')}" for f in m.findings) or "no finding"
            lines.append(f"  {m.label.where}  {m.label.expr}  [{seen}]  why: {m.label.why}")
        lines.append(f"false alarms ({len(self.false_alarms)}):")
        for m in self.false_alarms:
            rules = ", ".join(sorted({str(f.get("rule")) for f in m.findings if f.get("severity") == FLAG_SEVERITY}))
            lines.append(f"  {m.label.where}  {m.label.expr}  [{m.label.label}, {rules}, {m.how}]  why: {m.label.why}")
        lines.append(f"unsure, not scored ({len(self.unsure)}):")
        lines += [f"  {u.where}  {u.label}  why: {u.why}" for u in self.unsure]
        return "\n".join(lines)


def read_labels(path: str | Path) -> list[Label]:
    with open(path, newline="", encoding="utf-8") as fh:
        return [Label(r["path"], int(r["line"]), int(r["column"]), r["function"], r["expr"], r["population"],
                      r["label"], r["why"]) for r in csv.DictReader(fh)]


def read_findings(path: str | Path) -> list[dict[str, Any]]:
    """The findings of a ``castfind scan --json`` document (a bare list of findings is accepted too)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return list(data["findings"] if isinstance(data, dict) else data)


def _squash(text: str) -> str:
    return "".join(text.split())


def _same_expr(finding_expr: str, label_expr: str) -> bool:
    """Equal with whitespace ignored; a label's text cut at 160 characters need only be a prefix."""
    f, lab = _squash(finding_expr), _squash(label_expr)
    return f.startswith(lab) if len(label_expr) >= EXPR_CUT else f == lab


def match_labels(labels: Sequence[Label], findings: Iterable[Finding]) -> list[Match]:
    """The findings that decide each label, by the rules in this module's docstring (one Match per label)."""
    by_path: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        by_path[str(f["path"])].append(f)
    at: dict[tuple[str, int, int], list[Label]] = defaultdict(list)
    for lab in labels:
        at[(lab.path, lab.line, lab.column)].append(lab)
    out = []
    for lab in labels:
        here = by_path.get(lab.path, [])
        exact = [f for f in here if (f["line"], f["column"]) == (lab.line, lab.column)]
        if exact:
            same = [f for f in exact if _same_expr(str(f.get("expr", "")), lab.expr)]
            if not same:  # findings no label here claims by its text are shared by the labels here
                others = [o for o in at[(lab.path, lab.line, lab.column)] if o is not lab]
                same = [f for f in exact if not any(_same_expr(str(f.get("expr", "")), o.expr) for o in others)]
            out.append(Match(lab, tuple(same), "exact" if same else "none"))
            continue
        around = [f for f in here if f["line"] <= lab.line <= f.get("end_line", f["line"])
                  and (lab.path, f["line"], f["column"]) not in at]
        out.append(Match(lab, tuple(around), "range" if around else "none"))
    return out


def score(labels: Sequence[Label], findings: Iterable[Finding]) -> Score:
    """Match every label, set the unsure ones aside, and return the figures."""
    # Unsure labels still own the findings at their positions: matching sees every label.
    matches = match_labels(labels, findings)
    return Score(matches=[m for m in matches if not m.label.unsure],
                 unsure=[lab for lab in labels if lab.unsure])


@dataclass(frozen=True)
class ErrorLabel:
    """One row of ``errors.csv``: an error finding of a scan, read and classed (``ERROR_CLASSES``)."""

    path: str
    line: int
    column: int
    function: str
    expr: str
    label: str
    why: str

    @property
    def unsure(self) -> bool:
        return self.why.strip().lower().startswith("unsure")

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


@dataclass
class ErrorScore:
    """Precision at severity ``error`` over the error findings of one scan, by the rows of ``errors.csv``."""

    labelled: list[tuple[ErrorLabel, tuple[Finding, ...]]] = field(default_factory=list)  # one per flagged row
    unlabelled: list[Finding] = field(default_factory=list)  # error findings no row names
    not_flagged: list[ErrorLabel] = field(default_factory=list)  # rows with no error finding in this scan

    @property
    def scored(self) -> list[ErrorLabel]:
        return [lab for lab, _ in self.labelled if not lab.unsure]

    @property
    def unsure(self) -> list[ErrorLabel]:
        return [lab for lab, _ in self.labelled if lab.unsure]

    @property
    def true_positives(self) -> list[ErrorLabel]:
        return [lab for lab in self.scored if lab.label == "TP"]

    @property
    def precision(self) -> float | None:
        return len(self.true_positives) / len(self.scored) if self.scored else None

    def table(self) -> str:
        """Counts per class, the figure, then every false or unsure row with its why, and what has no row."""
        fig = "n/a" if self.precision is None else f"{self.precision:.3f}"
        lines = [f"error findings labelled {len(self.labelled)}; unsure excluded {len(self.unsure)}; "
                 f"unlabelled {len(self.unlabelled)}",
                 f"precision at error {fig}  ({len(self.true_positives)}/{len(self.scored)})",
                 "class      scored  unsure"]
        for cls in ERROR_CLASSES:
            n = sum(lab.label == cls for lab in self.scored)
            u = sum(lab.label == cls for lab in self.unsure)
            lines.append(f"{cls:<10} {n:>6}  {u:>6}")
        lines.append("false positives and unsure rows:")
        lines += [f"  {lab.where}  {lab.label}  {lab.expr}  why: {lab.why}"
                  for lab, _ in self.labelled if lab.label != "TP" or lab.unsure]
        lines.append(f"error findings with no label ({len(self.unlabelled)}; label it by reading the code):")
        lines += [f"  {f['path']}:{f['line']}:{f['column']}  {f.get('rule')}  {f.get('expr', '')}"
                  for f in self.unlabelled]
        lines.append(f"labelled, not flagged at error by this scan ({len(self.not_flagged)}):")
        lines += [f"  {lab.where}  {lab.label}  {lab.expr}" for lab in self.not_flagged]
        return "\n".join(lines)


def read_error_labels(path: str | Path) -> list[ErrorLabel]:
    """The rows of ``errors.csv``; a row whose ``label`` is not one of ``ERROR_CLASSES`` is a ValueError."""
    out = []
    with open(path, newline="", encoding="utf-8") as fh:
        for n, r in enumerate(csv.DictReader(fh), start=2):
            lab = ErrorLabel(r["path"], int(r["line"]), int(r["column"]), r["function"], r["expr"], r["label"],
                             r["why"])
            if lab.label not in ERROR_CLASSES:
                raise ValueError(f"{path}:{n}: label {lab.label!r} is not one of {', '.join(ERROR_CLASSES)}")
            out.append(lab)
    return out


def score_errors(labels: Sequence[ErrorLabel], findings: Iterable[Finding]) -> ErrorScore:
    """Give each ``error`` finding its row of ``errors.csv`` (rule 6) and return the figure (rules 7 and 8)."""
    at: dict[tuple[str, int, int], list[ErrorLabel]] = defaultdict(list)
    for lab in labels:
        at[(lab.path, lab.line, lab.column)].append(lab)
    mine: dict[ErrorLabel, list[Finding]] = defaultdict(list)
    result = ErrorScore()
    for f in findings:
        if f.get("severity") != FLAG_SEVERITY:
            continue
        here = at.get((str(f["path"]), f["line"], f["column"]), [])
        if len(here) > 1:
            here = [lab for lab in here if _same_expr(str(f.get("expr", "")), lab.expr)]
        if len(here) == 1:
            mine[here[0]].append(f)
        else:
            result.unlabelled.append(f)
    result.labelled = [(lab, tuple(mine[lab])) for lab in labels if lab in mine]
    result.not_flagged = [lab for lab in labels if lab not in mine]
    return result


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scan_json", help="output of `castfind scan ROOT --json`")
    ap.add_argument("labels_csv", nargs="?",
                    help="labels.csv (path,line,column,function,expr,population,label,why)")
    ap.add_argument("--errors", metavar="FILE",
                    help="errors.csv (path,line,column,function,expr,label,why): precision of the error findings")
    ap.add_argument("--path-prefix", default="", help="prepend this to every finding path (e.g. 'sglang/')")
    args = ap.parse_args(argv)
    if not args.labels_csv and not args.errors:
        ap.error("give labels.csv, --errors errors.csv, or both")
    try:
        labels = read_labels(args.labels_csv) if args.labels_csv else []
        error_labels = read_error_labels(args.errors) if args.errors else []
        findings = read_findings(args.scan_json)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"label_score: cannot read input: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.path_prefix:
        findings = [dict(f, path=args.path_prefix + str(f["path"])) for f in findings]
    label_paths = {lab.path for lab in labels} | {lab.path for lab in error_labels}
    if findings and not any(f["path"] in label_paths for f in findings):
        print("label_score: no finding is in a labelled file; scan the parent of the package the labels "
              "name, or pass --path-prefix", file=sys.stderr)
    tables = []
    if args.labels_csv:
        tables.append(score(labels, findings).table())
    if args.errors:
        tables.append(score_errors(error_labels, findings).table())
    print("\n\n".join(tables))
    return 0

if __name__ == "__main__":
    sys.exit(main())
