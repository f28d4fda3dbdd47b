"""scripts/label_score.py's matching rules and figures, on a tiny hand-made labels / findings pair (no corpus)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scripts.label_score import Label, main, match_labels, read_error_labels, read_labels, score, score_errors
from tests.support import REPO

A = "pkg/a.py"
HEADER = "path,line,column,function,expr,population,label,why\n"
CSV = HEADER + """\
pkg/a.py,10,13,B.forward,"pool.get(i).to(q.dtype)",A,whole-buffer-hot,"the whole pool, every step"
pkg/a.py,20,9,B.forward,w.float(),A,whole-buffer-hot,whole weight every step
pkg/a.py,30,17,B.forward,x[idx].to(dt),A,benign,gathered rows
pkg/a.py,40,5,B.forward,y.float(),A,benign,activations
pkg/a.py,50,9,B.forward,k.to(dt),A,benign,batch k
pkg/a.py,50,20,B.forward,v.to(dt),A,whole-buffer-hot,whole v pool
pkg/a.py,60,9,B.forward,z.float(),A,benign,"unsure: maybe whole"
pkg/a.py,70,9,B.forward,x.float(),B,benign,inner cast of a chain
pkg/a.py,70,9,B.forward,x.float().to(dt),B,whole-buffer-hot,outer cast of a chain
pkg/a.py,80,9,B.load,p.copy_(w),B,whole-buffer-cold,at loading
"""


def finding(line: int, column: int, severity: str = "error", end_line: int | None = None, path: str = A,
            expr: str = "e", rule: str = "CF101") -> dict:
    return {"rule": rule, "severity": severity, "path": path, "line": line, "end_line": end_line or line,
            "column": column, "expr": expr}


@pytest.fixture()
def labels(tmp_path) -> list[Label]:
    p = tmp_path / "labels.csv"
    p.write_text(CSV, encoding="utf-8")
    return read_labels(p)


def by_where(matches) -> dict[tuple[int, int, str], object]:
    return {(m.label.line, m.label.column, m.label.expr): m for m in matches}


def test_read_labels_keeps_quoted_commas_and_spots_unsure(labels):
    assert len(labels) == 10
    assert labels[0].why == "the whole pool, every step" and labels[0].hot
    assert [lab.line for lab in labels if lab.unsure] == [60]


def test_exact_position_match_flags_a_hot_label(labels):
    m = by_where(match_labels(labels, [finding(10, 13)]))[(10, 13, "pool.get(i).to(q.dtype)")]
    assert m.how == "exact" and m.flagged


def test_only_error_counts_as_flagged(labels):
    m = by_where(match_labels(labels, [finding(20, 9, severity="warning")]))[(20, 9, "w.float()")]
    assert m.how == "exact" and not m.flagged


def test_a_containing_multiline_finding_matches_when_nothing_is_exact(labels):
    # A call starting at line 28 and ending at 31 holds label line 30 (its column differs).
    m = by_where(match_labels(labels, [finding(28, 5, end_line=31)]))[(30, 17, "x[idx].to(dt)")]
    assert m.how == "range" and m.flagged
    assert by_where(match_labels(labels, [finding(31, 5, end_line=33)]))[(30, 17, "x[idx].to(dt)")].how == "none"


def test_an_exact_finding_wins_over_a_containing_one(labels):
    # castfind judged the cast itself a warning; an error on an enclosing call is another cast.
    fs = [finding(40, 5, severity="warning"), finding(39, 1, end_line=41)]
    m = by_where(match_labels(labels, fs))[(40, 5, "y.float()")]
    assert m.how == "exact" and not m.flagged


def test_a_finding_at_another_labels_position_is_not_borrowed(labels):
    # Two labelled casts on line 50: the error at column 20 belongs to v, not to k at column 9.
    ms = by_where(match_labels(labels, [finding(50, 20)]))
    assert ms[(50, 20, "v.to(dt)")].flagged
    assert ms[(50, 9, "k.to(dt)")].how == "none" and not ms[(50, 9, "k.to(dt)")].flagged


def test_chained_casts_at_one_position_are_told_apart_by_expr(labels):
    fs = [finding(70, 9, expr="x.float().to(dt)"), finding(70, 9, severity="info", expr="x.float()")]
    ms = by_where(match_labels(labels, fs))
    assert ms[(70, 9, "x.float().to(dt)")].flagged
    assert not ms[(70, 9, "x.float()")].flagged
    # The outer cast's finding alone is not borrowed by the inner label; text that names neither is shared.
    ms = by_where(match_labels(labels, [finding(70, 9, expr="x.float().to(dt)")]))
    assert ms[(70, 9, "x.float()")].how == "none" and ms[(70, 9, "x.float().to(dt)")].flagged
    ms = by_where(match_labels(labels, [finding(70, 9, expr="(x).float().to(dt)")]))
    assert ms[(70, 9, "x.float()")].flagged and ms[(70, 9, "x.float().to(dt)")].flagged


def test_other_paths_and_unlabelled_lines_do_not_count(labels):
    fs = [finding(10, 13, path="pkg/b.py"), finding(99, 1)]
    s = score(labels, fs)
    assert s.flagged == [] and s.precision is None and s.recall == 0.0


def test_figures_exclude_unsure_and_list_misses_and_false_alarms(labels):
    fs = [
        finding(10, 13),                      # hot, hit
        finding(20, 9, severity="warning"),   # hot, miss
        finding(40, 5),                       # benign, false alarm
        finding(50, 20),                      # hot, hit
        finding(60, 9),                       # unsure: not scored either way
        finding(70, 9, expr="x.float().to(dt)"),  # hot, hit
        finding(80, 9),                       # cold, false alarm
        finding(200, 1),                      # unlabelled line: not scored
    ]
    s = score(labels, fs)
    assert len(s.matches) == 9 and [u.line for u in s.unsure] == [60]
    assert len(s.hot) == 4 and len(s.hits) == 3 and len(s.flagged) == 5
    assert s.recall == pytest.approx(3 / 4) and s.precision == pytest.approx(3 / 5)
    assert [(m.label.line, m.label.column) for m in s.misses] == [(20, 9)]
    assert [(m.label.line, m.label.column) for m in s.false_alarms] == [(40, 5), (80, 9)]
    table = s.table()
    assert "recall    0.750  (3/4)" in table and "precision 0.600  (3/5)" in table
    assert "pkg/a.py:20:9" in table and "whole weight every step" in table
    assert "pkg/a.py:80:9" in table and "at loading" in table


def test_script_scores_a_scan_json_file(tmp_path, capsys):
    (tmp_path / "labels.csv").write_text(CSV, encoding="utf-8")
    (tmp_path / "scan.json").write_text(json.dumps({"findings": [finding(10, 13, path="a.py")], "stats": {}}))
    argv = [str(tmp_path / "scan.json"), str(tmp_path / "labels.csv")]
    assert main([*argv, "--path-prefix", "pkg/"]) == 0
    assert "recall    0.250  (1/4)" in capsys.readouterr().out
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "recall    0.000  (0/4)" in captured.out and "no finding is in a labelled file" in captured.err
    assert main([str(tmp_path / "missing.json"), str(tmp_path / "labels.csv")]) == 2


def test_script_runs_as_a_file():
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "label_score.py"), "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "labels_csv" in r.stdout


def test_a_hot_label_lowered_only_for_its_size_is_found_but_not_flagged(labels):
    tiny = {"verdict": "tiny", "note": "small by construction: [c, 1, 4] has one free factor"}
    fs = [
        dict(finding(10, 13, severity="warning"), cost=tiny),  # hot, found small: counts for recall
        dict(finding(20, 9, severity="warning"), cost={"verdict": "no-op", "note": "same dtype"}),  # hot, miss
        dict(finding(40, 5, severity="warning"), cost=tiny),   # benign: neither flagged nor a false alarm
        finding(50, 20),                                       # hot, hit
    ]
    s = score(labels, fs)
    assert [m.label.line for m in s.small] == [10] and [m.label.line for m in s.hits] == [50]
    assert [m.label.line for m in s.misses] == [20, 70]
    assert s.recall == pytest.approx(2 / 4) and s.recall_at_error == pytest.approx(1 / 4)
    assert s.precision == pytest.approx(1.0) and [m.label.line for m in s.flagged] == [50]
    table = s.table()
    assert "recall    0.500  (2/4)  at error alone 0.250 (1/4)" in table
    assert "pkg/a.py:10:13" in table.split("misses")[0] and "one free factor" in table


ERRORS_CSV = """\
path,line,column,function,expr,label,why
pkg/a.py,10,13,B.forward,"pool.get(i).to(q.dtype)",TP,"the whole pool, every decode step"
pkg/a.py,20,9,B.forward,w.float(),FP-small,"a [c, 4] conv weight"
pkg/a.py,30,9,B.forward,x.float(),FP-noop,x is allocated float32
pkg/a.py,30,9,B.forward,x.float().to(dt),TP,the outer cast of the chain is a real one
pkg/a.py,40,5,B.forward,y.float(),FP-cold,"unsure: the fallback may be taken on some GPUs"
pkg/a.py,50,5,B.load,p.copy_(w),FP-once,post-load hook
"""


@pytest.fixture()
def error_labels(tmp_path):
    p = tmp_path / "errors.csv"
    p.write_text(ERRORS_CSV, encoding="utf-8")
    return read_error_labels(p)


def test_error_precision_counts_each_flagged_row_once_and_leaves_unsure_out(error_labels):
    fs = [
        finding(10, 13, expr="pool.get(i).to(q.dtype)"),
        finding(10, 13, expr="pool.get(i).to(q.dtype)", rule="CF102"),  # a second rule on the same cast
        finding(20, 9),                                     # FP-small
        finding(30, 9, expr="x.float()"),                   # FP-noop: the chain's inner cast, told by its text
        finding(30, 9, expr="x.float().to(dt)"),            # TP
        finding(40, 5),                                     # unsure: out of the figure
        finding(50, 5, severity="warning"),                 # not an error: not scored, row not flagged now
    ]
    s = score_errors(error_labels, fs)
    assert [lab.line for lab in s.true_positives] == [10, 30]
    assert [lab.label for lab in s.scored] == ["TP", "FP-small", "FP-noop", "TP"]
    assert [lab.line for lab in s.unsure] == [40] and [lab.line for lab in s.not_flagged] == [50]
    assert s.unlabelled == [] and s.precision == pytest.approx(2 / 4)
    table = s.table()
    assert "precision at error 0.500  (2/4)" in table
    assert "FP-small        1       0" in table and "FP-cold         0       1" in table
    assert "a [c, 4] conv weight" in table and "the whole pool" not in table


def test_an_error_finding_with_no_row_is_unlabelled(error_labels):
    fs = [finding(10, 13), finding(11, 13), finding(10, 14), finding(10, 13, path="pkg/b.py"),
          finding(30, 9, expr="z.half()")]  # two rows at 30:9, the text names neither
    s = score_errors(error_labels, fs)
    assert [(f["path"], f["line"], f["column"]) for f in s.unlabelled] == [
        (A, 11, 13), (A, 10, 14), ("pkg/b.py", 10, 13), (A, 30, 9)]
    assert s.precision == 1.0
    assert "label it by reading the code" in s.table() and "pkg/b.py:10:13" in s.table()


def test_an_unknown_error_class_names_the_file_and_row(tmp_path):
    p = tmp_path / "errors.csv"
    p.write_text(ERRORS_CSV.replace("FP-once", "FP-maybe"), encoding="utf-8")
    with pytest.raises(ValueError, match=r"errors\.csv:7: label 'FP-maybe' is not one of TP, FP-small"):
        read_error_labels(p)


def test_script_scores_error_findings_with_errors_flag(tmp_path, capsys):
    (tmp_path / "errors.csv").write_text(ERRORS_CSV, encoding="utf-8")
    (tmp_path / "scan.json").write_text(json.dumps({"findings": [finding(10, 13), finding(20, 9)]}))
    assert main([str(tmp_path / "scan.json"), "--errors", str(tmp_path / "errors.csv")]) == 0
    assert "precision at error 0.500  (1/2)" in capsys.readouterr().out
    (tmp_path / "bad.csv").write_text(ERRORS_CSV.replace("TP,", "tp,", 1), encoding="utf-8")
    assert main([str(tmp_path / "scan.json"), "--errors", str(tmp_path / "bad.csv")]) == 2
    assert "label 'tp' is not one of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path / "scan.json")])
