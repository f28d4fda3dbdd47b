"""Where the proofs stopped: ``castfind scan --stops`` and ``--explain PATH:LINE[:COL]`` on fixtures/stops.

fixtures/stops holds one cast per stop reason, each marked ``# stop: REASON``; the table must count
exactly those, the same cold and warm (carried results), and must not change a scan without ``--stops``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from castfind import api
from tests.support import REPO, run_castfind

FIX = REPO / "fixtures" / "stops"
ATTN = FIX / "stoppkg" / "stoppkg" / "attn.py"
REL = "stoppkg/stoppkg/attn.py"


def marked() -> Counter[str]:
    """The stop reasons the fixture's comments promise, one per marked cast."""
    out: Counter[str] = Counter()
    for line in ATTN.read_text().splitlines():
        m = re.search(r"# .*stop: ([a-z-]+)", line)
        if m:
            out[m.group(1)] += 1
    return out


def line_of(marker: str) -> int:
    (n,) = [i for i, line in enumerate(ATTN.read_text().splitlines(), 1) if marker in line]
    return n


def test_the_table_counts_each_marked_stop_once() -> None:
    run = api.scan([str(FIX)], stops=True, use_cache=False, jobs=1)
    assert run.stops is not None
    got = {r.reason: r.count for r in run.stops.rows}
    assert got == dict(marked())
    assert set(got) == {"parameter", "unknown-call", "unresolved-attribute", "gather-index", "batch-slice",
                        "token-split", "no-assignment", "step-limit", "excluded", "cold", "other"}
    assert all(r.files == ((REL, r.count),) for r in run.stops.rows)
    # q.float() is a parameter too, but not buffer-like: examined, not counted.
    assert run.stops.buffer_like == run.stops.examined - 1


def test_stops_leave_the_findings_alone() -> None:
    plain = api.scan([str(FIX)], use_cache=False, jobs=1)
    stops = api.scan([str(FIX)], stops=True, use_cache=False, jobs=1)
    assert plain.stops is None
    assert plain.report.findings == stops.report.findings
    assert [(f.rule, f.line) for f in plain.report.findings] == [("CF101", line_of("# two casts")),
                                                                 ("CF104", line_of("stop: cold"))]


def test_stops_on_a_warm_run_match_a_cold_one(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold = api.scan([str(FIX)], stops=True, use_cache=False, jobs=1).stops
    first = api.scan([str(FIX)], cache_dir=cache, jobs=1)  # stores the carried results
    warm = api.scan([str(FIX)], stops=True, cache_dir=cache, jobs=1)
    assert warm.report.stats["replayed"] > 0  # getters and hot paths replayed, the check ran fresh
    assert warm.stops == cold
    assert warm.report.findings == first.report.findings
    again = api.scan([str(FIX)], cache_dir=cache, jobs=1)  # the carried findings survive a --stops run
    assert again.report.findings == first.report.findings


def test_cli_stops_text_and_json_exit_0() -> None:
    r = run_castfind("scan", str(FIX), "--no-cache", "--stops")
    assert r.returncode == 0, r.stderr
    assert "stop reason" in r.stdout and "token-split" in r.stdout and REL in r.stdout
    r = run_castfind("scan", str(FIX), "--no-cache", "--stops", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {s["reason"]: s["count"] for s in doc["stops"]} == dict(marked())
    assert doc["stops"][0]["files"] == [{"path": REL, "count": doc["stops"][0]["count"]}]
    plain = run_castfind("scan", str(FIX), "--no-cache")
    assert plain.returncode == 1 and "stop reason" not in plain.stdout  # without --stops: the findings' exit code


def test_cli_stops_with_sarif_or_explain_is_a_usage_error() -> None:
    for extra in (["--format", "sarif"], ["--explain", f"{ATTN}:3"]):
        r = run_castfind("scan", str(FIX), "--no-cache", "--stops", *extra)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--stops" in r.stderr, r.stderr


def test_cli_explain_line_gives_one_account_per_cast_and_col_picks_one() -> None:
    line = line_of("# two casts")
    r = run_castfind("scan", str(FIX), "--no-cache", "--explain", f"{ATTN}:{line}")
    assert r.returncode == 0, r.stderr
    assert f"{REL}:{line}:16: self.k_buffer.to(q.dtype)" in r.stdout
    assert f"{REL}:{line}:43: k_buffer.float()" in r.stdout
    assert "hot path: stoppkg.attn.Attn.forward_decode" in r.stdout and "=> CF101" in r.stdout
    r = run_castfind("scan", str(FIX), "--no-cache", "--explain", f"{ATTN}:{line}:43")
    assert r.returncode == 0, r.stderr
    assert f"{REL}:{line}:43: k_buffer.float()" in r.stdout and ":16:" not in r.stdout and "CF101" not in r.stdout
    assert "provenance stopped at parameter: k_buffer is a parameter of Attn.forward_decode" in r.stdout
    r = run_castfind("scan", str(FIX), "--no-cache", "--explain", f"{ATTN}:{line}:5")
    assert r.returncode == 0 and "no cast starts at column 5" in r.stdout and "16, 43" in r.stdout


def test_cli_explain_names_the_hop_where_provenance_stopped() -> None:
    line = line_of("stop: token-split")
    r = run_castfind("scan", str(FIX), "--no-cache", "--explain", f"{ATTN}:{line}")
    assert r.returncode == 0, r.stderr
    assert "provenance: k = element 0 of self.kv_buffer.split(64)" in r.stdout
    assert "stopped at token-split: self.kv_buffer.split(64) cuts axis 0 (no dim given)" in r.stdout


def test_cli_explain_names_what_made_it_once() -> None:
    model = REPO / "fixtures" / "once" / "oncepkg" / "oncepkg" / "model.py"
    line = next(i for i, s in enumerate(model.read_text().splitlines(), 1) if "self._w is None" in s) + 1
    r = run_castfind("scan", str(REPO / "fixtures" / "once"), "--no-cache", "--explain", f"{model}:{line}")
    assert r.returncode == 0, r.stderr
    assert "runs once: its result is stored to self._w" in r.stdout and "=> CF103" in r.stdout, r.stdout
