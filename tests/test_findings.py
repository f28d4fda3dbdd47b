"""Ranking, inline suppression, fingerprints, baseline and exit codes (castfind.analysis.findings)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from castfind.analysis.findings import (
    Baseline,
    BaselineEntry,
    BaselineError,
    apply_baseline,
    check_baseline_target,
    exit_code,
    fails,
    filter_suppressed,
    fingerprint,
    load_baseline,
    normalise_expr,
    occurrence_fingerprints,
    rank,
    suppressed,
    write_baseline,
)
from castfind.core.types import Finding, Runtime


def mk(
    rule: str = "CF101",
    severity: str = "error",
    path: str = "pkg/attn.py",
    line: int = 10,
    column: int = 5,
    function: str = "Backend.forward_decode",
    expr: str = "k.to(q.dtype)",
    end_line: int | None = None,
    total: int | None = None,
) -> Finding:
    runtime = None
    if total is not None:
        runtime = Runtime(calls=1, shape=(4,), src_dtype="float8_e4m3fn", dst_dtype="bfloat16",
                          bytes_per_call=total, bytes_total=total)
    return Finding(
        rule=rule, name="whole-kv-cache-cast-on-hot-path", severity=severity, root="/repo", path=path,
        line=line, end_line=end_line if end_line is not None else line, column=column, function=function,
        expr=expr, message="m", runtime=runtime,
    )


# ----------------------------------------------------------------- rank


def test_rank_exact_order() -> None:
    info = mk(severity="info", path="a.py")
    warn_late = mk(severity="warning", path="b.py", line=20)
    warn_early = mk(severity="warning", path="b.py", line=3)
    err_unmeasured_a = mk(path="a.py", line=1)
    err_unmeasured_z = mk(path="z.py", line=1)
    err_small = mk(path="z.py", line=99, total=10)
    err_big = mk(path="z.py", line=100, total=10_000)
    warn_measured = mk(severity="warning", path="z.py", total=1)
    col2 = mk(path="a.py", line=1, column=2)
    given_order = [info, warn_late, err_unmeasured_z, err_small, warn_early, err_unmeasured_a, err_big,
                   warn_measured, col2]
    assert rank(given_order) == [
        err_big, err_small, col2, err_unmeasured_a, err_unmeasured_z,
        warn_measured, warn_early, warn_late,
        info,
    ]


def test_rank_unknown_severity_sorts_last() -> None:
    odd = mk(severity="critical")
    info = mk(severity="info")
    assert rank([odd, info]) == [info, odd]


# ----------------------------------------------------------------- suppression

SOURCE = """\
def f(q):
    a = k.to(q.dtype)  # castfind: ignore
    b = k.to(q.dtype)  # castfind: ignore[CF101]
    c = k.to(q.dtype)  # castfind: ignore[CF102]
    # castfind: ignore[CF102, CF101]
    d = k.to(q.dtype)
    e = k.to(q.dtype)  # castfind: ignore[CF101]
    g = k.to(q.dtype)
    h = torch.cat(
        [k, v]).to(q.dtype)  # castfind: ignore[cf101]
    i = k.to(q.dtype)  # castfind: ignored
    j = k.to(q.dtype)  # castfind: ignore[whole-kv-cache-cast-on-hot-path]
""".splitlines()


@pytest.mark.parametrize(
    ("line", "end_line", "expected"),
    [
        (2, 2, True),    # bare ignore on the line
        (3, 3, True),    # ignore[CF101] on the line
        (4, 4, False),   # wrong rule id
        (6, 6, True),    # comment-only line above, list of ids
        (8, 8, False),   # the line above is code with a trailing ignore: does not leak
        (9, 10, True),   # comment on the last line of a multi-line expression; ids are case-blind
        (11, 11, False), # "ignored" is not the keyword
        (12, 12, True),  # the rule's kebab-case name works as well as its id
        (200, 200, False),  # past the end of a file that changed since the scan
    ],
)
def test_suppressed(line: int, end_line: int, expected: bool) -> None:
    assert suppressed(mk(line=line, end_line=end_line), SOURCE) is expected


def test_filter_suppressed_reads_each_file_once_and_reports_unreadable() -> None:
    calls: list[tuple[str, str]] = []

    def read(root: str, path: str) -> list[str]:
        calls.append((root, path))
        if path == "gone.py":
            raise FileNotFoundError(2, "No such file", path)
        return SOURCE

    kept_a = mk(line=4)
    hidden = mk(line=2)
    gone = mk(path="gone.py", line=2)
    out = filter_suppressed([kept_a, hidden, mk(line=3), gone, mk(path="gone.py", line=3)], read)
    assert out.kept == [kept_a, gone, mk(path="gone.py", line=3)]
    assert out.suppressed == 2
    assert [(d.path, d.kind) for d in out.diagnostics] == [("gone.py", "read-error")]
    assert "cannot read file to check suppressions" in out.diagnostics[0].message
    assert calls == [("/repo", "pkg/attn.py"), ("/repo", "gone.py")]


# ----------------------------------------------------------------- fingerprint


def test_fingerprint_ignores_line_column_and_whitespace() -> None:
    base = mk(line=10, column=5, expr="self.pool.get_key_buffer(layer.layer_id).to(q.dtype)")
    moved = replace(base, line=250, end_line=253, column=9,
                    expr="self.pool.get_key_buffer(\n    layer.layer_id,\n).to(\n    q.dtype  # why\n)")
    assert fingerprint(base) == fingerprint(moved)
    assert len(fingerprint(base)) == 16


def test_fingerprint_quote_style_is_formatting() -> None:
    assert fingerprint(mk(expr="k.to('cuda')")) == fingerprint(mk(expr='k.to("cuda")'))


@pytest.mark.parametrize(
    "change",
    [
        {"expr": "v.to(q.dtype)"},
        {"function": "Backend.forward_extend"},
        {"rule": "CF102"},
        {"path": "pkg/other.py"},
        {"expr": "k.to('cuda ')"},  # whitespace inside a string literal is meaning, not format
    ],
)
def test_fingerprint_changes_with_identity(change: dict[str, str]) -> None:
    base = mk(expr="k.to('cuda')")
    assert fingerprint(base) != fingerprint(replace(base, **change))


def test_normalise_expr_falls_back_on_untokenisable_text() -> None:
    assert normalise_expr("k.to(  q.dtype") == "k.to(q.dtype"
    assert normalise_expr("f(a,\n  b,\n)") == "f(a,b)"


@given(st.lists(st.sampled_from([" ", "\n", "\t", ""]), min_size=5, max_size=5))
def test_fingerprint_stable_under_any_spacing(gaps: list[str]) -> None:
    parts = ["k", ".to(", "q", ".", "dtype)"]
    spaced = "".join(p + g for p, g in zip(parts, gaps, strict=True))
    # Inside brackets any spacing is legal Python; the fingerprint must not notice it.
    assert fingerprint(mk(expr="(" + spaced + ")")) == fingerprint(mk(expr="(k.to(q.dtype))"))


def test_occurrence_fingerprints_number_duplicates_in_source_order() -> None:
    a, b, other = mk(line=30), mk(line=12), mk(line=20, expr="v.to(q.dtype)")
    fp = fingerprint(a)
    assert occurrence_fingerprints([a, b, other]) == [f"{fp}:2", f"{fp}:1", f"{fingerprint(other)}:1"]
    # Moving the whole function keeps the numbering.
    shifted = [replace(f, line=f.line + 100) for f in (a, b, other)]
    assert occurrence_fingerprints(shifted) == occurrence_fingerprints([a, b, other])


# ----------------------------------------------------------------- baseline


def test_baseline_round_trip_with_duplicate_counts(tmp_path) -> None:
    dup1, dup2 = mk(line=10), mk(line=40)
    other = mk(rule="CF102", severity="warning", path="a/b.py", function="", expr="w.float()")
    path = tmp_path / "sub" / "castfind-baseline.json"
    path.parent.mkdir()  # an output's folder must exist (castfind creates none: test_small_lies.py)
    written = write_baseline(path, [dup1, other, dup2])
    doc = json.loads(path.read_text())
    assert doc == {
        "castfind_baseline": 1,
        "findings": [
            {"fingerprint": fingerprint(other), "rule": "CF102", "path": "a/b.py", "function": "",
             "expr": "w.float()", "count": 1},
            {"fingerprint": fingerprint(dup1), "rule": "CF101", "path": "pkg/attn.py",
             "function": "Backend.forward_decode", "expr": "k.to(q.dtype)", "count": 2},
        ],
    }
    loaded = load_baseline(path)
    assert loaded == written
    assert loaded.counts() == {fingerprint(other): 1, fingerprint(dup1): 2}
    assert [p.name for p in path.parent.iterdir()] == ["castfind-baseline.json"]  # no temp file left


def test_apply_baseline_hides_known_keeps_new_and_reports_fixed(tmp_path) -> None:
    old1, old2 = mk(line=10), mk(line=40)
    gone = mk(function="Backend.forward_extend")
    path = tmp_path / "b.json"
    write_baseline(path, [old1, old2, gone])
    baseline = load_baseline(path)

    # Code moved (new lines), a third identical cast appeared, one recorded finding was fixed.
    moved1, moved2, new_dup = replace(old1, line=110), replace(old2, line=140), mk(line=150)
    brand_new = mk(expr="v.to(q.dtype)")
    kept, hidden, fixed = apply_baseline([brand_new, new_dup, moved2, moved1], baseline)
    assert kept == [brand_new, new_dup]  # the extra copy is new: count 2 hides only two
    assert hidden == 2
    assert fixed == (BaselineEntry(fingerprint(gone), "CF101", "pkg/attn.py", "Backend.forward_extend",
                                   "k.to(q.dtype)", 1),)


def test_apply_baseline_partial_fix_reports_the_missing_count() -> None:
    f = mk()
    entry = BaselineEntry(fingerprint(f), f.rule, f.path, f.function, f.expr, count=3)
    outcome = apply_baseline([f], Baseline((entry,)))
    assert (outcome.kept, outcome.hidden) == ([], 1)
    assert [e.count for e in outcome.fixed] == [2]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
        ('{"version": "2.1.0", "runs": []}', "not a castfind baseline (no 'castfind_baseline' key)"),
        ("[1, 2]", "not a castfind baseline (no 'castfind_baseline' key)"),
        ('{"castfind_baseline": 7, "findings": []}', "unsupported baseline version 7 (this castfind reads 1)"),
        ('{"castfind_baseline": 1, "findings": {}}', "'findings' must be a list"),
        ('{"castfind_baseline": 1, "findings": [{"count": 1}]}', "findings[0].fingerprint is missing or not a string"),
        ('{"castfind_baseline": 1, "findings": [{"fingerprint": "ab", "count": 0}]}',
         "findings[0].count must be a positive integer, got 0"),
        ('{"castfind_baseline": 1, "findings": [{"fingerprint": "ab", "count": true}]}',
         "findings[0].count must be a positive integer, got True"),
        ('{"castfind_baseline": 1, "findings": [{"fingerprint": "ab", "rule": 5}]}',
         "findings[0].rule must be a string, got int"),
    ],
)
def test_load_baseline_rejects_bad_files(tmp_path, content: str, reason: str) -> None:
    path = tmp_path / "b.json"
    path.write_text(content)
    with pytest.raises(BaselineError) as info:
        load_baseline(path)
    assert info.value.reason == reason
    assert info.value.path == str(path)
    assert str(info.value) == f"{path}: {reason}"


def test_load_baseline_missing_and_binary(tmp_path) -> None:
    with pytest.raises(BaselineError, match="no such file"):
        load_baseline(tmp_path / "absent.json")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(BaselineError, match="cannot read"):
        load_baseline(binary)


def test_empty_baseline_round_trip(tmp_path) -> None:
    path = tmp_path / "b.json"
    assert write_baseline(path, []) == Baseline(())
    assert load_baseline(path) == Baseline(())
    assert apply_baseline([mk()], load_baseline(path)) == ([mk()], 0, ())


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ('{"mine": true}', "not a castfind baseline (no 'castfind_baseline' key)"),
        ("print('hello')\n", "not a castfind baseline (not JSON)"),
        ("[1, 2]", "not a castfind baseline (no 'castfind_baseline' key)"),
    ],
)
def test_write_baseline_refuses_to_overwrite_another_file(tmp_path, content: str, why: str) -> None:
    path = tmp_path / "b.json"
    path.write_text(content)
    with pytest.raises(BaselineError) as info:
        write_baseline(path, [mk()])
    assert info.value.reason.startswith(f"exists and is {why}; not overwriting it — ")
    assert path.read_text() == content
    with pytest.raises(BaselineError):
        check_baseline_target(path)


def test_write_baseline_replaces_a_baseline_even_of_another_version_and_an_empty_file(tmp_path) -> None:
    path = tmp_path / "b.json"
    for old in ('{"castfind_baseline": 99, "findings": "?"}', ""):
        path.write_text(old)
        check_baseline_target(path)
        write_baseline(path, [mk()])
        assert len(load_baseline(path).entries) == 1


def test_write_baseline_to_a_folder_or_unwritable_place_is_a_baseline_error(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    for target in (tmp_path, tmp_path / "file" / "b.json", "/proc/castfind/b.json"):
        with pytest.raises(BaselineError) as info:
            check_baseline_target(target)
        assert info.value.path == str(target) and " — " in info.value.reason
        with pytest.raises(BaselineError):
            write_baseline(target, [mk()])


# ----------------------------------------------------------------- exit code


@pytest.mark.parametrize(
    ("severities", "fail_on", "code"),
    [
        ([], "info", 0),
        (["info"], "error", 0),
        (["info"], "warning", 0),
        (["info"], "info", 1),
        (["warning"], "error", 0),
        (["warning"], "warning", 1),
        (["warning", "info"], "info", 1),
        (["error"], "error", 1),
        (["error"], "info", 1),
        (["critical"], "info", 0),  # unknown severities never fail a build
    ],
)
def test_exit_code(severities: list[str], fail_on: str, code: int) -> None:
    findings = [mk(severity=s) for s in severities]
    assert exit_code(findings, fail_on) == code
    assert fails(findings, fail_on) is bool(code)


def test_exit_code_rejects_unknown_level() -> None:
    with pytest.raises(ValueError, match="fail-on must be one of error, warning, info, got 'fatal'"):
        exit_code([], "fatal")
