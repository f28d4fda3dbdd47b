"""The deployment as bindings (issue 35, item 2): platform predicates and server-flag fields bound through the
rule files' ``deployment:`` section, branch tests evaluated in three-valued logic, and findings behind a false
branch off the deployment's path (fixtures/deploy: a small engine with two platforms and two backends)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from castfind import api
from castfind.analysis.deployment import deployment_of
from castfind.core.rules import RuleError, load_rules, validate
from castfind.read.facts import Guard
from tests.support import REPO, run_castfind

FIX = REPO / "fixtures" / "deploy"
MINI_RULES = str(FIX / "rules")
BACKENDS = "minieng/minieng/backends.py"
RUNNER = "minieng/minieng/runner.py"

# The fixture's casts, by where they are and what guards them on the path the plain scan chooses.
MIX = (BACKENDS, 9)      # reached through the slow backend (the else arm) and through the accelerator branch
WIDE = (BACKENDS, 19)    # fast backend, under `layer.wide`: a test no flag binds
FAST = (BACKENDS, 20)    # fast backend (`attention_backend == "fast"` at the call)
SLOW = (BACKENDS, 28)    # slow backend: the else arm of that test
EITHER = (RUNNER, 22)    # its own test: `attention_backend in ("fast", "turbo")`
ACCEL = (RUNNER, 30)     # behind the module-level `_is_accel = is_accel()`
OTHER = (RUNNER, 33)     # behind a direct `if is_other():`
ALL = {MIX, WIDE, FAST, SLOW, EITHER, ACCEL, OTHER}

IS_FAST = 'self.server_args.attention_backend == "fast"'
EITHER_TEST = 'self.server_args.attention_backend in ("fast", "turbo")'


def _bound(platform=None, **flags):
    return deployment_of(load_rules().deployment, platform, **flags)


# --------------------------------------------------------------------------- the evaluator

CUDA_TABLE = [
    ("_is_cuda", True), ("is_cuda()", True), ("utils.is_cuda()", True), ("current_platform.is_cuda()", True),
    ("is_cuda_alike()", True), ("torch.cuda.is_available()", True),
    ("_is_hip", False), ("is_hip()", False), ("_is_npu", False), ("is_npu()", False), ("is_xpu()", False),
    ("_is_musa", False), ("_is_cpu", False), ("is_mps()", False), ("torch.backends.mps.is_available()", False),
    ("_use_aiter", False), ("_use_aiter_gfx95", False), ("_is_cpu_amx_available", False),
    ("not _is_npu", True), ("not is_cuda()", False),
    ("_is_hip and self.use_mla", False), ("_is_cuda and self.use_mla", None), ("_is_cuda or self.use_mla", True),
    ("self.use_mla or _is_hip", None), ("(_is_hip or _is_npu) and x", False),
    ('server_args.attention_backend == "flashinfer"', True),
    ('self.server_args.attention_backend == "fa3"', False),
    ('get_global_server_args().attention_backend != "fa3"', True),
    ('global_server_args_dict["attention_backend"] in ("fa3", "triton")', False),
    ("global_server_args_dict['attention_backend'] in {'flashinfer'}", True),
    ('server_args.attention_backend not in ["fa3", "trtllm_mla"]', True),
    ('"flashinfer" == server_args.attention_backend', True),
    ("server_args.attention_backend is None", False), ("server_args.attention_backend is not None", True),
    ("server_args.attention_backend", True),
    ("server_args.tp_size == 2", True), ("server_args.tp_size == 1", False), ("server_args.tp_size > 1", None),
    ('server_args.quantization == "fp8"', None),  # not given: open
    ('self.attention_backend == "fa3"', None),  # a field the mapping does not name
    ('server_args.attention_backend == backend_name', None),  # not a literal
    ('1 < server_args.tp_size < 4', None),  # a chain
    ("is_cuda(device)", None), ("is_sm90_supported()", None), ("envs.SGLANG_X", None),
    ("True", True), ("None", False), ("if x", None), ("", None),
    # A tensor's device type: another platform's is false; its own and cpu (any platform's) stay open.
    ('x.device.type == "mps"', False), ('x.device.type != "mps"', True), ('device_type == "npu"', False),
    ('target_device.type not in {"npu", "mps"}', True), ('target_device.type in {"cpu", "mps"}', None),
    ('q.device.type == "cuda"', None), ('t.device.type == "cpu"', None),
]


@pytest.mark.parametrize(("test", "want"), CUDA_TABLE)
def test_evaluator_on_cuda_with_flashinfer_and_tp2(test: str, want: bool | None) -> None:
    dep = _bound("cuda", attention_backend="flashinfer", tp=2)
    assert dep.evaluate(test)[0] is want


@pytest.mark.parametrize(("platform", "test", "want"), [
    ("rocm", "_use_aiter", None), ("rocm", "_is_hip", True), ("rocm", "is_cuda_alike()", True),
    ("rocm", "_is_cuda", False), ("cpu", "_is_cpu_amx_available", None), ("cpu", "_is_cuda", False),
    ("npu", "_is_npu", True), ("mps", "torch.backends.mps.is_available()", True),
    ("rocm", 'q.device.type == "cuda"', None), ("npu", 'q.device.type == "cuda"', False),
    (None, 'x.device.type == "mps"', None),
    (None, "_is_hip", None), (None, "is_cuda()", None),  # no platform given: platform tests stay open
])
def test_evaluator_per_platform(platform: str | None, test: str, want: bool | None) -> None:
    assert _bound(platform).evaluate(test)[0] is want


def test_evaluator_names_the_bindings_that_decided() -> None:
    dep = _bound("cuda", attention_backend="fa3")
    assert dep.evaluate("_is_hip or server_args.attention_backend == 'flashinfer'") == (
        False, ("--platform cuda", "--attention-backend fa3"))
    assert dep.evaluate("_is_hip and x") == (False, ("--platform cuda",))
    assert dep.evaluate("x") == (None, ())


def test_a_negated_guard_flips_the_test() -> None:
    dep = _bound("cuda")
    assert dep.holds(Guard("_is_hip", negated=True)) is True
    assert dep.holds(Guard("_is_hip", negated=False)) is False
    assert dep.holds(Guard("self.use_mla", negated=True)) is None


def test_no_flag_binds_nothing() -> None:
    assert not _bound().active
    assert _bound(tp=None, attention_backend=None).flags == ()


# --------------------------------------------------------------------------- the fixture, through the scan


def _scan(**flags) -> api.ScanRun:
    return api.scan([str(FIX)], use_cache=False, jobs=1, all_paths=True, **flags)


def _off(run: api.ScanRun) -> dict[tuple[str, int], str]:
    """Every finding by place → its off_path reason ("" when on the path)."""
    return {(f.path, f.line): f.off_path for f in run.report.findings}


def _on(run: api.ScanRun) -> set[tuple[str, int]]:
    return {k for k, why in _off(run).items() if not why}


def test_without_flags_nothing_is_off_and_nothing_is_counted() -> None:
    run = api.scan([str(FIX)], use_cache=False, jobs=1)
    assert _on(run) == ALL and len(run.report.findings) == 7
    assert run.report.off_path == {}
    assert {f.severity for f in run.report.findings} == {"error"}


def test_attention_backend_fast_prunes_only_the_else_arm() -> None:
    run = _scan(attention_backend="fast")
    assert _off(run) == {**dict.fromkeys(ALL, ""),
                         SLOW: f"branch: not ({IS_FAST}) is false on --attention-backend fast"}
    by = {(f.path, f.line): f for f in run.report.findings}
    # Two paths reach _mix: the one the plain scan chose (the slow backend) is closed, the accelerator branch
    # is still open, so it stays on, with that path and its conditions.
    mix = by[MIX]
    assert mix.hot_path == ("minieng.runner.Runner.forward_decode", "minieng.runner.Runner._accel_step",
                            "minieng.backends.Widening._mix")
    assert [(c.test, c.negated, c.path, c.line) for c in mix.conditions] == [("_is_accel", False, RUNNER, 23)]
    # A test no flag binds stays open: the finding stays on, its test still listed.
    assert [(c.test, c.negated) for c in by[WIDE].conditions] == [(IS_FAST, False), ("layer.wide", False)]


@pytest.mark.parametrize(("backend", "off"), [
    ("turbo", {FAST, WIDE}),  # `== "fast"` is false at the call; `in ("fast", "turbo")` holds
    ("slow", {FAST, WIDE, EITHER}),  # the cast's own `in (...)` test is false too
])
def test_attention_backend_other_values(backend: str, off: set[tuple[str, int]]) -> None:
    run = _scan(attention_backend=backend)
    assert _on(run) == ALL - off
    got = _off(run)
    assert got[FAST] == f"branch: {IS_FAST} is false on --attention-backend {backend}"
    if EITHER in off:
        assert got[EITHER] == f"branch: {EITHER_TEST} is false on --attention-backend slow"


def test_platform_needs_the_engines_spellings_from_a_users_rule_file() -> None:
    # The shipped mapping does not know minieng's probes: every platform test stays open.
    assert _on(_scan(platform="rocm")) == ALL
    # Its own rule file (YAML only) names them: on rocm the accelerator branch is off, on cuda the other one.
    rocm = _scan(platform="rocm", rules=[MINI_RULES])
    assert _on(rocm) == ALL - {ACCEL}
    assert _off(rocm)[ACCEL] == "branch: _is_accel is false on --platform rocm"
    cuda = _scan(platform="cuda", rules=[MINI_RULES])
    assert _on(cuda) == ALL - {OTHER}
    assert _off(cuda)[OTHER] == "branch: is_other() is false on --platform cuda"


def test_a_cast_is_off_only_when_every_path_is() -> None:
    # rocm closes the accelerator branch, "fast" the slow backend: no path to _mix is left.
    run = _scan(platform="rocm", attention_backend="fast", rules=[MINI_RULES])
    assert _on(run) == ALL - {ACCEL, SLOW, MIX}
    assert _off(run)[MIX] == f"branch: not ({IS_FAST}) is false on --attention-backend fast"


def test_off_path_findings_are_dropped_and_counted_unless_all_paths() -> None:
    run = api.scan([str(FIX)], use_cache=False, jobs=1, attention_backend="slow")
    assert {(f.path, f.line) for f in run.report.findings} == ALL - {FAST, WIDE, EITHER}
    assert all(f.off_path == "" for f in run.report.findings)
    assert run.report.off_path == {"branch": 3}


def test_cli_json_text_and_exit_codes(tmp_path: Path) -> None:
    r = run_castfind("scan", str(FIX), "--no-cache", "--attention-backend", "slow", "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["stats"]["off_path"] == {"branch": 3}
    assert {(f["path"], f["line"]) for f in doc["findings"]} == ALL - {FAST, WIDE, EITHER}
    assert {f["off_path"] for f in doc["findings"]} == {""}
    r = run_castfind("scan", str(FIX), "--no-cache", "--attention-backend", "slow", "--all-paths", "--json")
    shown = {(f["path"], f["line"]): f["off_path"] for f in json.loads(r.stdout)["findings"]}
    assert set(shown) == ALL and shown[EITHER] == f"branch: {EITHER_TEST} is false on --attention-backend slow"
    r = run_castfind("scan", str(FIX), "--no-cache", "--attention-backend", "slow")
    assert r.returncode == 1
    assert "3 findings off this deployment's path (--all-paths shows them)" in r.stdout
    r = run_castfind("scan", str(FIX), "--no-cache", "--attention-backend", "slow", "--all-paths")
    assert (f"    off this deployment's path: branch: {EITHER_TEST} is false on --attention-backend slow"
            in r.stdout.splitlines())
    assert "off this deployment's path (" not in r.stdout  # nothing left out, nothing counted


def test_unknown_platform_is_a_usage_error() -> None:
    r = run_castfind("scan", str(FIX), "--no-cache", "--platform", "tpu")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "castfind: --platform tpu: unknown platform; known: cuda, rocm, npu, xpu, musa, cpu, mps")


def test_a_users_platform_is_known_once_its_rule_file_names_it(tmp_path: Path) -> None:
    (tmp_path / "tpu.yaml").write_text("deployment:\n  platforms:\n    tpu:\n      holds: [is_tpu, _is_tpu]\n")
    run = _scan(platform="tpu", rules=[str(tmp_path / "tpu.yaml")])
    assert _on(run) == ALL  # minieng never tests for a tpu; its probes are unknown to this mapping


@pytest.mark.parametrize(("text", "key", "reason"), [
    ("deployment:\n  platforms:\n    cuda: [is_cuda]\n", "deployment.platforms.cuda",
     "expected a mapping {holds: [...], only: [...], devices: [...]}, got a list"),
    ("deployment:\n  platforms:\n    cuda:\n      true: [is_cuda]\n", "deployment.platforms.cuda.True",
     "unknown key; expected one of ['devices', 'holds', 'only']"),
    ("deployment:\n  device_fields: {a: b}\n", "deployment.device_fields", "expected a list of strings, got a mapping"),
    ("deployment:\n  flags:\n    backend: [x.backend]\n", "deployment.flags.backend",
     "unknown flag; expected one of ['attention_backend', 'kv_cache_dtype', 'quantization', 'tp']"),
    ("deployment:\n  flags:\n    tp: [3]\n", "deployment.flags.tp", "expected a string, got the number 3 (item 1)"),
    ("deployment:\n  flags:\n    tp: ['']\n", "deployment.flags.tp", "an empty pattern matches nothing; remove it"),
    ("deployment: [cuda]\n", "deployment", "expected a mapping {platforms: {NAME: {holds: [...], only: [...]}}, "
     "flags: ...}, got a list"),
])
def test_a_bad_deployment_section_is_one_line(tmp_path: Path, text: str, key: str, reason: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    _, errors = validate([str(bad)])
    assert [(e.key, e.reason) for e in errors] == [(key, reason)]
    with pytest.raises(RuleError):
        load_rules([str(bad)])
    r = run_castfind("scan", str(FIX), "--no-cache", "--rules", str(bad))
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()[-1:]
    assert line.startswith("castfind: ") and str(bad.name) in line and key in line


def test_a_users_patterns_add_to_the_shipped_ones(tmp_path: Path) -> None:
    extra = tmp_path / "more.yaml"
    extra.write_text("deployment:\n  flags:\n    attention_backend: ['*.attn_choice']\n"
                     "  platforms:\n    cuda:\n      holds: [on_gpu]\n")
    spec = load_rules([str(extra)]).deployment
    dep = deployment_of(spec, "cuda", attention_backend="fa3")
    assert dep.evaluate("self.cfg.attn_choice == 'fa3'")[0] is True
    assert dep.evaluate("server_args.attention_backend == 'fa3'")[0] is True  # the shipped pattern still binds
    assert dep.evaluate("on_gpu()")[0] is True and dep.evaluate("_is_cuda")[0] is True


def test_sarif_and_markdown_say_why_a_shown_finding_is_off_the_path() -> None:
    """With --all-paths, the off-path findings are shown: SARIF carries the reason in the result's properties
    (``offPath``), Markdown in the error's details; on the path neither says anything."""
    r = run_castfind("scan", str(FIX), "--no-cache", "--attention-backend", "slow", "--all-paths", "--format", "sarif")
    results = json.loads(r.stdout)["runs"][0]["results"]
    off = [(res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            res["locations"][0]["physicalLocation"]["region"]["startLine"], res["properties"].get("offPath", ""))
           for res in results]
    assert [why for uri, line, why in off if uri.endswith(EITHER[0]) and line == EITHER[1]] == [
        f"branch: {EITHER_TEST} is false on --attention-backend slow"]
    assert sum(1 for *_, why in off if why) == 3
    r = run_castfind("scan", str(FIX), "--no-cache", "--attention-backend", "slow", "--all-paths", "--format", "markdown")
    said = [line for line in r.stdout.splitlines() if line.startswith("Off this deployment's path: branch: ")]
    errors = [f for f in json.loads(run_castfind("scan", str(FIX), "--no-cache", "--attention-backend", "slow",
                                                 "--all-paths", "--json").stdout)["findings"]
              if f["off_path"] and f["severity"] == "error"]
    assert len(said) == len(errors) > 0


# --------------------------------------------------------------------------- fields the model config binds

LATENT = '''\
class Backend:
    def __init__(self, runner):
        self.use_mla = runner.model_config.attention_arch == "MLA"
        self.token_to_kv_pool = runner.token_to_kv_pool

    def forward_decode(self, q, layer, forward_batch):
        if not self.use_mla:
            return q
        return self.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q.dtype)
'''


def test_the_model_config_binds_the_fields_that_follow_its_architecture() -> None:
    spec = load_rules().deployment
    latent = deployment_of(spec, "cuda", {"kv_lora_rank": 512, "num_hidden_layers": 61})
    heads = deployment_of(spec, "cuda", {"num_key_value_heads": 8})
    assert latent.evaluate("self.use_mla")[0] is True and heads.evaluate("self.use_mla")[0] is False
    assert heads.evaluate("not model_runner.use_mla_backend") == (True, ("--model-config (kv_lora_rank absent)",))
    assert deployment_of(spec, "cuda").evaluate("self.use_mla")[0] is None  # no config: open, as before
    assert deployment_of(spec, None, {"kv_lora_rank": 512}).active and latent.key != heads.key


def test_a_branch_the_model_configs_architecture_rules_out_is_off_the_path(tmp_path: Path) -> None:
    (tmp_path / "eng").mkdir()
    (tmp_path / "eng" / "backend.py").write_text(LATENT)
    for name, cfg in (("heads", {"num_key_value_heads": 8}), ("latent", {"kv_lora_rank": 16})):
        (tmp_path / f"{name}.json").write_text(json.dumps(cfg))

    def cast(*args: str) -> dict:
        r = run_castfind("scan", str(tmp_path / "eng"), "--no-cache", "--json", "--all-paths", *args)
        (f,) = [f for f in json.loads(r.stdout)["findings"] if f["line"] == 9]
        return f

    off = cast("--model-config", str(tmp_path / "heads.json"))
    assert off["off_path"] == "branch: not (not self.use_mla) is false on --model-config (kv_lora_rank absent)"
    assert not cast("--model-config", str(tmp_path / "latent.json")).get("off_path")
    assert not cast().get("off_path")


def test_a_users_file_adds_model_fields_and_a_bad_one_is_a_rule_error(tmp_path: Path) -> None:
    extra = tmp_path / "more.yaml"
    extra.write_text("deployment:\n  model_fields:\n    kv_lora_rank: ['*.latent_attention']\n")
    dep = deployment_of(load_rules([str(extra)]).deployment, None, {"kv_lora_rank": 8})
    assert dep.evaluate("self.cfg.latent_attention")[0] is True and dep.evaluate("self.use_mla")[0] is True
    bad = tmp_path / "bad" / "bad.yaml"
    bad.parent.mkdir()
    bad.write_text("deployment:\n  model_fields:\n    kv_lora_rank: 3\n")
    with pytest.raises(RuleError, match="model_fields"):
        load_rules([str(bad.parent)])
