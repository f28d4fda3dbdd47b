"""scan on the bundled fixture: exact rule ids and lines, output formats, exit codes, bad input."""

from __future__ import annotations

import json
import shutil

from castfind.analysis.scan import scan
from castfind.core.rules import load_rules
from castfind.store.discover import discover
from castfind.store.index import Index
from tests.support import REPO, run_castfind

FIX = REPO / "fixtures" / "scan"
BACKEND = "minisrv/minisrv/backend.py"
POOL = "minisrv/minisrv/pool.py"

EXPECTED = {
    ("CF101", BACKEND, 14), ("CF101", BACKEND, 16), ("CF102", BACKEND, 30),
    ("CF104", POOL, 20), ("CF103", BACKEND, 37), ("CF103", BACKEND, 41),
}


def _json(*args: str) -> tuple[int, dict]:
    r = run_castfind("scan", *args, "--no-cache", "--json")
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)


def test_fixture_findings_are_exact():
    rc, data = _json(str(FIX))
    assert rc == 1
    assert {(f["rule"], f["path"], f["line"]) for f in data["findings"]} == EXPECTED
    assert set(data) == {"findings", "diagnostics", "stats"}
    first = data["findings"][0]
    assert first["severity"] == "error" and first["function"] == "DecodeBackend.forward_decode"
    proj = next(f for f in data["findings"] if f["line"] == 30)
    assert proj["hot_path"] == ["minisrv.backend.DecodeBackend.forward_decode", "minisrv.backend.DecodeBackend._project"]


def test_demand_driven_scan_equals_eager_scan():
    rules = load_rules()

    def run(demand: bool) -> list:
        out = scan(Index(discover([str(FIX)]), jobs=1), rules, demand=demand)
        return sorted((f.rule, f.path, f.line, f.hot_path, f.provenance) for f in out.findings)

    assert run(True) == run(False)


def test_suppression_baseline_and_fail_on(tmp_path):
    root = tmp_path / "fx"
    shutil.copytree(FIX, root)
    rc, data = _json(str(root), "--fail-on", "error")
    assert rc == 1
    base = tmp_path / "base.json"
    r = run_castfind("scan", str(root), "--no-cache", "--write-baseline", str(base))
    assert base.exists() and r.returncode == 0  # recorded: exit 0 (issue 37)
    # Moving code down by a line keeps the baseline valid (no line numbers in fingerprints).
    p = root / BACKEND
    p.write_text("# a new comment line\n" + p.read_text())
    rc, data = _json(str(root), "--baseline", str(base))
    assert rc == 0 and data["findings"] == []
    # An inline ignore hides one finding.
    text = p.read_text().replace("get_key_buffer(layer.layer_id).to(q.dtype)\n",
                                 "get_key_buffer(layer.layer_id).to(q.dtype)  # castfind: ignore[CF101]\n", 1)
    p.write_text(text)
    rc, data = _json(str(root))
    assert ("CF101", BACKEND, 15) not in {(f["rule"], f["path"], f["line"]) for f in data["findings"]}
    assert ("CF101", BACKEND, 17) in {(f["rule"], f["path"], f["line"]) for f in data["findings"]}


def test_only_reports_the_given_files_but_keeps_hot_paths():
    r = run_castfind("scan", "--only", str(FIX / BACKEND), "--root", str(FIX), "--no-cache", "--json")
    data = json.loads(r.stdout)
    assert {f["path"] for f in data["findings"]} == {BACKEND}
    assert any(f["rule"] == "CF102" for f in data["findings"])  # hot via forward_decode


def test_unparsable_file_is_a_diagnostic_and_scan_goes_on(tmp_path):
    root = tmp_path / "fx"
    shutil.copytree(FIX, root)
    (root / "minisrv" / "minisrv" / "broken.py").write_text("def f(:\n    x.kv_buffer.to(torch.float16)\n")
    rc, data = _json(str(root))
    assert rc == 1
    assert {(f["rule"], f["path"], f["line"]) for f in data["findings"]} == EXPECTED
    assert [d["path"] for d in data["diagnostics"]] == ["minisrv/minisrv/broken.py"]


def test_bad_rule_file_and_missing_path_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - id: CF9\n    name: Bad Name\n")
    r = run_castfind("scan", str(FIX), "--no-cache", "--rules", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"castfind: {bad}:2:") and len(r.stderr.strip().splitlines()) == 1
    r = run_castfind("scan", str(tmp_path / "nope"), "--no-cache")
    assert r.returncode == 2 and "nope" in r.stderr and "Traceback" not in r.stderr


def test_sarif_output(tmp_path):
    out = tmp_path / "r.sarif"
    r = run_castfind("scan", str(FIX), "--no-cache", "--sarif", str(out))
    assert r.returncode == 1
    doc = json.loads(out.read_text())
    assert doc["version"] == "2.1.0"
    assert {res["ruleId"] for res in doc["runs"][0]["results"]} == {"CF101", "CF102", "CF103", "CF104"}


def test_explain_says_why_a_cast_is_quiet():
    r = run_castfind("scan", str(FIX), "--no-cache", "--explain", f"{BACKEND}:20")
    assert r.returncode == 0
    assert "not a whole buffer" in r.stdout
    r = run_castfind("scan", str(FIX), "--no-cache", "--explain", f"{BACKEND}:14")
    assert "hot path" in r.stdout and "CF101" in r.stdout


def test_once_fixture_each_memo_mechanism_and_its_look_alike():
    """fixtures/once: ``# once`` lines are CF103, ``# every-call`` lines a rule for casts that run every call."""
    root = REPO / "fixtures" / "once"
    src = (root / "oncepkg" / "oncepkg" / "model.py").read_text().splitlines()
    want = {i: ("once" if line.endswith(")  # once") else "every") for i, line in enumerate(src, 1)
            if line.endswith(")  # once") or ")  # every-call" in line}
    out = scan(Index(discover([str(root)]), jobs=1), load_rules())
    got = {f.line: ("once" if f.rule == "CF103" else "every") for f in out.findings}
    assert got == want
    assert sum(v == "once" for v in want.values()) == 7 and sum(v == "every" for v in want.values()) == 9


DISPATCH = REPO / "fixtures" / "dispatch"


def test_typed_dispatch_fixture_flags_the_overrides_hot_and_not_the_look_alikes():
    rc, data = _json(str(DISPATCH))
    got = {(f["rule"], f["path"], f["function"]): f["hot_path"] for f in data["findings"]}
    P = "dispatchpkg"
    assert got == {
        # self.quant_method: Optional[QuantMethodBase] → every override, hot through LinearBase.forward.
        ("CF102", f"{P}/quant.py", "Fp8LinearMethod.apply"): [f"{P}.linear.LinearBase.forward",
                                                              f"{P}.quant.Fp8LinearMethod.apply"],
        ("CF102", f"{P}/quant.py", "Int8LinearMethod.apply"): [f"{P}.linear.LinearBase.forward",
                                                               f"{P}.quant.Int8LinearMethod.apply"],
        # self.impl = FlashImpl(...); self.backend = make_backend() -> DecodeBackendBase.
        ("CF102", f"{P}/attention.py", "FlashImpl.run"): [f"{P}.attention.Attention.forward",
                                                          f"{P}.attention.FlashImpl.run"],
        ("CF102", f"{P}/backends.py", "TritonBackend.decode"): [f"{P}.attention.Attention.forward",
                                                                f"{P}.backends.TritonBackend.decode"],
        # Look-alikes: same method names, outside the declared hierarchies: cold.
        ("CF104", f"{P}/backends.py", "CpuDecoder.decode"): [],
        ("CF104", f"{P}/legacy.py", "LegacyMethod.apply"): [],
    }
    assert rc == 1 and data["diagnostics"] == []
