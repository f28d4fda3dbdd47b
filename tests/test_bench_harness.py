"""The benchmark harness's pure parts: statistics, parsing, tables, task selection. No real runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


bl = _load("benchlib")
run = _load("run")


def test_median_odd_even_empty():
    assert bl.median([3.0, 1.0, 2.0]) == 2.0
    assert bl.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert bl.median([]) is None


def test_ratio_and_its_text():
    assert bl.ratio(1.0, 4.0) == 0.25
    assert bl.ratio(None, 4.0) is None
    assert bl.ratio(1.0, 0.0) is None
    assert bl.fmt_ratio(0.25) == "0.25x"
    assert bl.fmt_ratio(12.345) == "12.35x"
    assert bl.fmt_ratio(0.00123) == "0.0012x"
    assert bl.fmt_ratio(None) == "n/a"


def test_rss_units_and_proc_parsing():
    assert bl.maxrss_to_kb(2048, "linux") == 2048
    assert bl.maxrss_to_kb(2048 * 1024, "darwin") == 2048
    assert bl.kb_to_mb(3072) == 3.0
    status = "Name:\tpython\nVmPeak:\t  900 kB\nVmRSS:\t  123456 kB\nThreads:\t1\n"
    assert bl.parse_vmrss_kb(status) == 123456
    assert bl.parse_vmrss_kb("Name:\tzombie\nState:\tZ\n") == 0
    assert bl.parse_children("12 345 \n") == [12, 345]
    assert bl.parse_children("") == []


def test_machine_parsing():
    cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
    assert bl.parse_cpu_model(cpuinfo) == "AMD EPYC 7B13"
    assert bl.parse_cpu_model("") == "unknown CPU"
    assert bl.parse_mem_total_gib("MemTotal:       24641536 kB\nMemFree: 1 kB\n") == pytest.approx(23.5, abs=0.01)
    assert bl.mem_text(None) == "unknown memory"


def test_count_lines_ignores_blank_lines():
    assert bl.count_lines("a.py:1:x.float()\n\nb.py:2:y.to(z)\n") == 2
    assert bl.count_lines("") == 0


def test_last_line_unboxes_rich_errors_and_keeps_traceback_causes():
    boxed = "Usage: castfind [OPTIONS]\n╭─ Error ──────╮\n│ No such command 'scan'. │\n╰──────────────╯\n"
    assert bl.last_line(boxed) == "No such command 'scan'."
    assert bl.last_line("Traceback (most recent call last):\n  File x\nValueError: bad\n") == "ValueError: bad"
    assert bl.last_line("\n\n") == ""
    assert bl.last_line("x" * 300, limit=10) == "xxxxxxx..."


def _rows():
    return [
        bl.Row("grep", walls=[0.5, 0.4, 0.6], rss_kb=[2048], tree_kb=[2048], count=100, files=10),
        bl.Row("semgrep", walls=[10.0], rss_kb=[204800], tree_kb=[409600], count=110, files=10),
        bl.Row("scan-cold", walls=[5.0, 4.0, 6.0], rss_kb=[102400, 153600], tree_kb=[307200], count=7, files=10),
        bl.Row("scan-warm", error="exit 2: No such command 'scan'."),
    ]


def test_text_table_exact():
    assert bl.format_table(_rows(), 10.0).splitlines() == [
        "task       wall s (median)  min s  runs  peak RSS MB  tree RSS MB  findings/matches  files  wall vs semgrep",
        "---------  ---------------  -----  ----  -----------  -----------  ----------------  -----  ---------------",
        "grep                  0.50   0.40     3            2            2               100     10            0.05x",
        "semgrep              10.00  10.00     1          200          400               110     10            1.00x",
        "scan-cold             5.00   4.00     3          150          300                 7     10            0.50x",
        "scan-warm              n/a    n/a     0          n/a          n/a             ERROR    n/a              n/a",
    ]


def test_markdown_table_exact():
    md = bl.format_markdown(_rows()[:3], None).splitlines()
    assert md[0] == ("| task | wall s (median) | min s | runs | peak RSS MB | tree RSS MB | findings/matches | files "
                     "| wall vs semgrep |")
    assert md[1] == "|:---|---:|---:|---:|---:|---:|---:|---:|---:|"
    assert md[3] == "| semgrep | 10.00 | 10.00 | 1 | 200 | 400 | 110 | 10 | n/a |"
    assert len(md) == 5


def test_summary_ratios_and_na_without_semgrep():
    rows = _rows()
    assert bl.summary_lines(rows) == [
        "castfind scan-cold / semgrep: wall 0.50x, peak RSS 0.75x, tree RSS 0.75x",
        "castfind scan-warm / semgrep: wall n/a, peak RSS n/a",
    ]
    rows[1].error = "semgrep unavailable: no network"
    assert bl.summary_lines(rows)[0] == "castfind scan-cold / semgrep: wall n/a, peak RSS n/a"
    assert bl.errors_text(rows) == ["semgrep: semgrep unavailable: no network",
                                    "scan-warm: exit 2: No such command 'scan'."]


def test_walk_py_files_skips_what_castfind_skips(tmp_path):
    for rel in ["pkg/__init__.py", "pkg/a.py", "pkg/tests/test_a.py", "pkg/.agents/x.py", "pkg/build/b.py",
                "pkg/x.egg-info/c.py", "env/pyvenv.cfg", "env/lib/d.py", "pkg/notes.txt", "top.py"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    got = [Path(p).relative_to(tmp_path).as_posix() for p in bl.walk_py_files([str(tmp_path)])]
    assert got == ["pkg/__init__.py", "pkg/a.py", "pkg/tests/test_a.py", "top.py"]


def test_grep_excludes_mirror_skip_dirs():
    ex = bl.grep_exclude_dirs()
    assert ex[:2] == [".*", "*.egg-info"]
    assert "build" in ex and "site-packages" in ex and ".git" not in ex


def test_pick_edit_file_prefers_the_named_file(tmp_path):
    (tmp_path / "sglang").mkdir()
    for name, size in [("a.py", 10), ("b.py", 20), ("c.py", 30)]:
        (tmp_path / "sglang" / name).write_text("#" * size)
    assert bl.pick_edit_file(tmp_path, "sglang/c.py") == tmp_path / "sglang" / "c.py"
    assert bl.pick_edit_file(tmp_path, "sglang/missing.py") == tmp_path / "sglang" / "b.py"


def test_select_tasks_by_name_prefix_and_quick():
    assert run.select("where,grep", quick=False) == ["grep", "where-cold", "where-warm"]
    assert run.select("semgrep", quick=False) == ["semgrep", "semgrep-sglang", "semgrep-flashinfer"]
    assert "semgrep-sglang" not in run.select(None, quick=True)
    assert run.select("semgrep,scan-cold", quick=True) == ["semgrep", "scan-cold"]  # a prefix keeps --quick's choice
    assert run.select("semgrep-sglang", quick=True) == ["semgrep-sglang"]  # a full name is run all the same
    assert run.select("checkout", quick=True) == ["checkout-cold", "checkout-warm"]
    with pytest.raises(SystemExit, match="unknown task nope"):
        run.select("nope", quick=False)


def test_shorten_folds_file_lists():
    cmd = ["semgrep", "scan", "/a/1.py", "/a/2.py", "/a/3.py", "/a/4.py", "--x"]
    assert run.shorten(cmd) == "semgrep scan '<4 .py files>' --x"
    assert run.shorten(["grep", "-rn", "x", "/a"]) == "grep -rn x /a"


def test_checkout_rows_without_a_checkout_say_how_to_build_one(tmp_path):
    args = run.argparse.Namespace(corpus=str(tmp_path), checkout=None, castfind=None, jobs=2, quick=True, repeat=1,
                                  timeout=10)
    bench = run.Bench(args)
    try:
        cold = bench.cold("checkout")
        warm = bench.warm("checkout")
    finally:
        run.shutil.rmtree(bench.tmp, ignore_errors=True)
    assert not cold.walls and "make corpus" in cold.error and str(tmp_path / "checkout") in cold.error
    assert not warm.walls and "make corpus" in warm.error
    assert bench.kind_cmd("checkout", "/c")[-6:] == [str(tmp_path / "checkout"), "--jobs", "2", "--cache-dir", "/c",
                                                     "--json"]
