"""castfind against the hand labels of sglang 0.5.23 casts (labels/sglang-0.5.23/): recall and precision at error.

The scan is the session's ``sglang_scan`` (conftest.py: one ``castfind scan --json`` of the sglang wheel on the
shared ``corpus_cache``), so this costs no extra scan. Matching and figures are those of scripts/label_score.py
(its docstring has the rules): a label is flagged when the finding at its (path, line, column) — or, with none
there, a finding whose line range holds its line — has severity ``error``; ``unsure`` labels are left out of
both figures; findings on unlabelled lines count neither way. Recall also counts a whole-buffer-hot label that
castfind found and lowered to a warning for the buffer's size alone (cost verdict ``tiny``; label_score's rule
5: the labels have no size criterion, the rules do); the table prints the stricter recall at error beside it.
Labels are never edited to make this pass.

``errors.csv`` is the other half of issue 34's precision: every ``error`` finding of the scan of the wheel, read
and classed (labels/sglang-0.5.23/README.md). Each error finding must have its row, and TP over the rows castfind
flags (unsure left out) must stay at 0.9 or above (scripts/label_score.py's rules 6-8).
"""

from __future__ import annotations

import pytest

from scripts.label_score import read_error_labels, read_labels, score, score_errors
from tests.support import REPO

pytestmark = pytest.mark.corpus

LABELS = REPO / "labels" / "sglang-0.5.23" / "labels.csv"
ERRORS = REPO / "labels" / "sglang-0.5.23" / "errors.csv"
MIN_RECALL = 0.9
MIN_PRECISION = 0.9


def test_error_findings_recall_and_precision_on_the_hand_labels(sglang_scan):
    labels = read_labels(LABELS)
    assert len(labels) == 353  # labels/sglang-0.5.23/README.md: 153 of population A + 200 sampled from B
    result = score(labels, sglang_scan["findings"])
    table = result.table()
    print("\n" + table)
    recall, precision = result.recall, result.precision  # plain floats: pytest's report stays readable
    assert recall is not None and recall >= MIN_RECALL, f"recall below {MIN_RECALL}\n{table}"
    assert precision is not None and precision >= MIN_PRECISION, f"precision below {MIN_PRECISION}\n{table}"


def test_every_error_finding_has_a_label(sglang_scan):
    result = score_errors(read_error_labels(ERRORS), sglang_scan["findings"])
    missing = [f"{f['path']}:{f['line']}:{f['column']} {f.get('rule')} {f.get('expr', '')}" for f in result.unlabelled]
    assert not missing, (f"{len(missing)} error finding(s) have no row in {ERRORS.relative_to(REPO)}: label it by "
                         "reading the code (never from castfind's message):\n  " + "\n  ".join(missing))


def test_error_precision_on_the_error_labels(sglang_scan):
    result = score_errors(read_error_labels(ERRORS), sglang_scan["findings"])
    table = result.table()
    print("\n" + table)
    precision = result.precision
    assert precision is not None and precision >= MIN_PRECISION, f"precision at error below {MIN_PRECISION}\n{table}"
