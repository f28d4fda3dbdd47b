"""The model's own path (issue 35 item 3): ``--model-config``'s ``architectures`` pick the model class, the classes
it builds are its module set, and ``--attention-backend`` / ``--quantization`` pick components from registries read
from the code (fixtures/deploy_models: a mini engine with two models, two attention backends registered by a
decorator factory, one with a latent branch, and two quantization schemes in a dict; its spellings in rules.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from castfind import api
from castfind.analysis.modelpath import ModelPath, off_path
from castfind.core.rules import RuleError, load_rules, validate
from castfind.core.types import Finding
from tests.support import REPO, run_castfind

FIX = REPO / "fixtures" / "deploy_models"
RULES = str(FIX / "rules.yaml")
ALPHA, BETA = str(FIX / "alpha_config.json"), str(FIX / "beta_config.json")
PKG = "minieng/minieng"
#: Every finding of the fixture, by (file, line): its function.
ALL = {
    ("layers/backends.py", 9): "PagedBackend.forward_decode",
    ("layers/backends.py", 17): "PagedLatentBackend.forward_decode",
    ("layers/backends.py", 26): "FlatBackend.forward_decode",
    ("layers/quant.py", 6): "Int8Method.forward",
    ("layers/quant.py", 11): "Fp4Method.forward",
    ("models/alpha.py", 14): "AlphaMLP.forward",
    ("models/beta.py", 12): "BetaMLP.forward",
}


def _scan(**options: object) -> api.ScanRun:
    return api.scan([str(FIX)], use_cache=False, jobs=1, rules=(RULES,), **options)


def _where(run: api.ScanRun) -> dict[tuple[str, int], str]:
    """Each reported finding's (file in the package, line) → its off_path."""
    out = {}
    for f in run.report.findings:
        assert f.path.startswith(PKG + "/")
        out[(f.path[len(PKG) + 1:], f.line)] = f.off_path
    return out


def test_without_a_model_config_every_finding_is_reported_on_the_path() -> None:
    run = _scan(attention_backend="paged", quantization="int8")
    assert _where(run) == dict.fromkeys(ALL, "")
    assert run.report.off_path == {}
    assert {f.function for f in run.report.findings} == set(ALL.values())


def test_model_a_keeps_its_casts_and_drops_model_b() -> None:
    run = _scan(model_config=ALPHA)
    assert set(_where(run)) == set(ALL) - {("models/beta.py", 12)}
    assert run.report.off_path == {"model": 1}


def test_model_b_built_through_its_own_helper_keeps_its_casts_and_drops_model_a() -> None:
    run = _scan(model_config=BETA)
    assert set(_where(run)) == set(ALL) - {("models/alpha.py", 14)}
    assert run.report.off_path == {"model": 1}


def test_the_attention_backend_keeps_one_backend_and_the_latent_branch_follows_the_config() -> None:
    # Alpha has no kv_lora_rank: the paged factory's `if not runner.use_latent_backend:` arm.
    alpha = _scan(model_config=ALPHA, attention_backend="paged")
    assert set(_where(alpha)) == set(ALL) - {("layers/backends.py", 17), ("layers/backends.py", 26),
                                             ("models/beta.py", 12)}
    # Beta has one: the latent arm, and the plain paged backend is off.
    beta = _scan(model_config=BETA, attention_backend="paged")
    assert set(_where(beta)) == set(ALL) - {("layers/backends.py", 9), ("layers/backends.py", 26),
                                            ("models/alpha.py", 14)}
    flat = _scan(model_config=BETA, attention_backend="flat")
    assert {k for k in _where(flat) if k[0] == "layers/backends.py"} == {("layers/backends.py", 26)}


def test_the_quantization_table_keeps_the_method_its_config_returns() -> None:
    run = _scan(model_config=ALPHA, quantization="fp4")
    assert ("layers/quant.py", 11) in _where(run) and ("layers/quant.py", 6) not in _where(run)


def test_all_models_shows_them_with_why_and_counts_none_left_out() -> None:
    run = _scan(model_config=BETA, attention_backend="paged", quantization="int8", all_models=True)
    assert _where(run) == {
        ("layers/backends.py", 9): "model: PagedBackend is not the selected attention backend "
                                   "(paged: the model config rules it out)",
        ("layers/backends.py", 17): "",
        ("layers/backends.py", 26): "model: FlatBackend is not the selected attention backend (paged)",
        ("layers/quant.py", 6): "",
        ("layers/quant.py", 11): "model: Fp4Method is not the selected quantization (int8)",
        ("models/alpha.py", 14): "model: not on BetaForCausalLM's path",
        ("models/beta.py", 12): "",
    }
    assert run.report.off_path == {}


def test_json_and_text_say_what_was_left_out() -> None:
    r = run_castfind("scan", str(FIX), "--no-cache", "-j", "1", "--rules", RULES, "--model-config", ALPHA,
                     "--attention-backend", "flat", "--json")
    doc = json.loads(r.stdout)
    assert doc["stats"]["off_path"] == {"model": 3}
    assert all(f["off_path"] == "" for f in doc["findings"])
    t = run_castfind("scan", str(FIX), "--no-cache", "-j", "1", "--rules", RULES, "--model-config", ALPHA,
                     "--attention-backend", "flat", "--all-models")
    assert "off this deployment's path: model: not on AlphaForCausalLM's path" in t.stdout
    t = run_castfind("scan", str(FIX), "--no-cache", "-j", "1", "--rules", RULES, "--model-config", ALPHA,
                     "--attention-backend", "flat")
    assert "and 3 findings off this deployment's path (--all-models shows them)" in t.stdout


def test_an_unknown_architecture_is_one_line_and_the_scan_goes_on(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"architectures": ["GammaForCausalLM"]}')
    r = run_castfind("scan", str(FIX), "--no-cache", "-j", "1", "--rules", RULES, "--model-config", str(config))
    # A diagnostic, as every other input problem that does not stop the scan: in the report (text: its own line).
    lines = [line for line in (r.stdout + r.stderr).splitlines() if "GammaForCausalLM" in line]
    assert lines == [f"{config}: --model-config: architectures GammaForCausalLM: no class of that name in the "
                     "roots; scanning as without a model"]
    assert r.returncode == 1 and r.stdout.count(" CF10") == len(ALL)


def test_an_unknown_backend_name_is_one_line_and_selects_nothing() -> None:
    run = _scan(model_config=ALPHA, attention_backend="nope")
    assert [d.message for d in run.report.diagnostics if d.path == "--attention-backend"] == [
        "nope: no registered entry (known: flat, paged); its components are not selected"]
    assert set(_where(run)) == set(ALL) - {("models/beta.py", 12)}


@pytest.mark.parametrize(("text", "key", "reason"), [
    ("models: [EntryClass]\n", "models", "expected a mapping"),
    ("models:\n  components:\n    tp: {table: X}\n", "models.components.tp", "unknown flag"),
    ("models:\n  components:\n    quantization: {table: X, returns: 'yes'}\n", "models.components.quantization.returns",
     "expected true or false"),
    ("models:\n  components:\n    attention_backend: {decorator: r, tests: {use_mla: 3}}\n",
     "models.components.attention_backend.tests.use_mla", "expected a name and a config field"),
    ("models:\n  entry_class: [EntryClass]\n", "models.entry_class", "unknown key"),
])
def test_bad_models_data_is_one_error_naming_the_file_and_key(tmp_path: Path, text: str, key: str, reason: str) -> None:
    rules = tmp_path / "bad.yaml"
    rules.write_text(text)
    _, errors = validate([str(rules)])
    assert [(e.path, e.key) for e in errors] == [(str(rules), key)]
    assert reason in errors[0].reason
    with pytest.raises(RuleError):
        load_rules([str(rules)])


def test_a_users_file_extends_the_shipped_registries(tmp_path: Path) -> None:
    rules = tmp_path / "more.yaml"
    rules.write_text("models:\n  entry_variables: [MODELS]\n  components:\n    attention_backend:\n"
                     "      decorator: [add_backend]\n      tests: {is_latent: kv_lora_rank}\n")
    spec = load_rules([str(rules)]).models
    assert spec.entry_variables == ("EntryClass", "MODELS")
    (attn,) = [r for r in spec.registries if r.flag == "attention_backend"]
    assert attn.decorators == ("register_attention_backend", "add_backend")
    assert dict(attn.tests) == {"use_mla_backend": "kv_lora_rank", "is_latent": "kv_lora_rank"}


def _finding(module: str, function: str, hot: tuple[str, ...]) -> Finding:
    return Finding("CF101", "x", "error", "r", "p.py", 1, 1, 1, function, "e", "m", hot_path=hot, module=module)


def test_the_function_nearest_the_cast_that_is_a_models_or_a_components_decides() -> None:
    path = ModelPath("M", frozenset({"pkg.m.M", "pkg.m.Layer"}), frozenset({"pkg.m", "pkg.other", "pkg.common",
                                                                        "pkg.common.rocm"}),
                     {"pkg.b.Flat": "model: Flat is not the selected attention backend (paged)"})
    # An infrastructure class (neither a model's nor a registry's) is on every model's path.
    assert off_path(path, _finding("pkg.pool", "Pool.get", ("pkg.run.Runner.forward", "pkg.pool.Pool.get"))) == ""
    assert off_path(path, _finding("pkg.m", "Layer.forward", ("pkg.m.Layer.forward",))) == ""
    # A module-level function of a model's module decides nothing; the method that calls it does.
    assert off_path(path, _finding("pkg.other", "helper", ("pkg.m.Layer.forward", "pkg.other.helper"))) == ""
    assert off_path(path, _finding("pkg.other", "helper", ("pkg.other.N.forward", "pkg.other.helper"))) == \
        "model: not on M's path"
    # A module that is also a package's name (pkg.common.rocm beside pkg.common): its functions are functions.
    assert off_path(path, _finding("pkg.common.rocm", "absorb", ("pkg.other.N.forward", "pkg.m.Layer.prepare",
                                                                "pkg.common.rocm.absorb"))) == ""
    assert off_path(path, _finding("pkg.pool", "Pool.get", ("pkg.other.N.forward", "pkg.pool.Pool.get"))) == \
        "model: not on M's path"
    assert off_path(path, _finding("pkg.b", "Flat.forward_decode", ())) == \
        "model: Flat is not the selected attention backend (paged)"
    # The function nearest the cast decides: another model's subclass reaching this model's inherited method
    # leaves the cast on the path; this model's layer reaching an unselected backend does not.
    assert off_path(path, _finding("pkg.pool", "Pool.get", ("pkg.other.N.forward", "pkg.m.Layer.prepare",
                                                           "pkg.pool.Pool.get"))) == ""
    assert off_path(path, _finding("pkg.pool", "Pool.get", ("pkg.m.Layer.forward", "pkg.b.Flat.forward_decode",
                                                           "pkg.pool.Pool.get"))) == \
        "model: Flat is not the selected attention backend (paged)"


MLA_BACKEND = "sglang/srt/layers/attention/flashinfer_mla_backend.py"
FA_BACKEND = "sglang/srt/layers/attention/flashattention_backend.py"
ABSORB = "sglang/srt/models/deepseek_common/attention_forward_methods/forward_mla.py"
GATE = "sglang/srt/models/deepseek_v2.py"


@pytest.mark.corpus
@pytest.mark.parametrize(("config", "backend", "on", "off"), [
    ({"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61, "kv_lora_rank": 512,
      "qk_rope_head_dim": 64, "hidden_size": 7168, "torch_dtype": "bfloat16"}, "flashinfer",
     # The MLA pool cast of the selected backend's MLA arm; DeepSeek's own absorbed weights (reached, on the
     # chosen path, through another model's subclass of its attention) and router.
     {(MLA_BACKEND, 822), (ABSORB, 566), (ABSORB, 893), (GATE, 576)},
     {(FA_BACKEND, 2350): "model: FlashAttentionBackend is not the selected attention backend (flashinfer)",
      ("sglang/srt/models/sarvam_moe.py", 391): "model: not on DeepseekV3ForCausalLM's path",
      # the diffusion server beside the LLM server: nothing DeepSeek's code imports reaches it
      ("sglang/multimodal_gen/runtime/layers/moe.py", 90):
          "model: no import of DeepseekV3ForCausalLM's code or its components reaches sglang.multimodal_gen"}),
    ({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128,
      "hidden_size": 4096, "torch_dtype": "bfloat16"}, "fa3",
     # FA3 is the selected backend, but its pool cast is in the absorbed-MLA arm (the else of `if not
     # self.use_mla:`), which a config without kv_lora_rank turns off (deployment.model_fields).
     set(),
     {(FA_BACKEND, 2350): "branch: not (not self.use_mla) is false on --model-config (kv_lora_rank absent)",
      (MLA_BACKEND, 822): "model: FlashInferMLAAttnBackend is not the selected attention backend (fa3)",
      (ABSORB, 566): "model: not on LlamaForCausalLM's path", (GATE, 576): "model: not on LlamaForCausalLM's path"}),
])
def test_the_sglang_wheel_keeps_the_models_own_casts(corpus, corpus_cache, sglang_scan, tmp_path: Path,
                                                     config: dict[str, object], backend: str,
                                                     on: set[tuple[str, int]], off: dict[tuple[str, int], str]) -> None:
    """The engine's outcome is carried from ``sglang_scan`` (the model path is applied after it, in post)."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config))
    r = run_castfind("scan", str(corpus["sglang"]), "--cache-dir", str(corpus_cache), "--json", "-j", "2",
                     "--model-config", str(cfg), "--attention-backend", backend, "--all-models", "--all-paths")
    assert r.returncode == 1, r.stderr
    why = {(f["path"], f["line"]): f["off_path"] for f in json.loads(r.stdout)["findings"]}
    assert {k: why.get(k) for k in on} == dict.fromkeys(on, "")
    assert {k: why.get(k) for k in off} == off


def _memo_rows(cache: Path, prefix: str) -> list[str]:
    import sqlite3

    with sqlite3.connect(cache / "facts.sqlite3") as con:
        return [k for (k,) in con.execute("SELECT key FROM memo WHERE key LIKE ?", (prefix + "%",))]


def test_the_model_path_is_carried_between_runs_and_computed_again_when_a_file_changes(tmp_path: Path) -> None:
    import shutil
    import sqlite3

    root = tmp_path / "deploy_models"
    shutil.copytree(FIX, root)
    cache = tmp_path / "cache"

    def scan() -> api.ScanRun:
        return api.scan([str(root)], cache_dir=str(cache), jobs=1, rules=(str(root / "rules.yaml"),),
                        model_config=str(root / "beta_config.json"))

    first = scan()
    assert set(_where(first)) == set(ALL) - {("models/alpha.py", 14)}
    [row] = _memo_rows(cache, "modelpath-")
    again = scan()  # read back: the same answer
    assert [f.to_dict() for f in again.report.findings] == [f.to_dict() for f in first.report.findings]
    assert again.report.off_path == {"model": 1}
    # A damaged row is computed again, not trusted.
    with sqlite3.connect(cache / "facts.sqlite3") as con:
        con.execute("UPDATE memo SET data = ? WHERE key = ?", (b"\x00not json", row))
    damaged = scan()
    assert [f.to_dict() for f in damaged.report.findings] == [f.to_dict() for f in first.report.findings]
    # Beta's decoder layer no longer builds its MLP: the MLP's cast leaves the model's path at once.
    beta = root / "minieng" / "minieng" / "models" / "beta.py"
    beta.write_text(beta.read_text().replace("self.mlp = BetaMLP(config)", "self.mlp = None"))
    edited = scan()
    assert ("models/beta.py", 12) not in set(_where(edited))
    assert edited.report.off_path == {"model": 2}


APPS = REPO / "fixtures" / "deploy_apps"


def test_another_application_that_no_import_of_the_model_reaches_is_off_its_path() -> None:
    """fixtures/deploy_apps: a language model, its engine's runner (same sub-package, not imported by the model)
    and an image generator's router (a sub-package no import of the model's code reaches)."""
    plain = api.scan([str(APPS)], use_cache=False, jobs=1)
    assert {f.function for f in plain.report.findings} == {"TinyLM.forward", "Runner.forward", "PatchRouter.forward"}
    run = api.scan([str(APPS)], use_cache=False, jobs=1, model_config=str(APPS / "config.json"), all_models=True)
    why = {f.function: f.off_path for f in run.report.findings}
    assert why == {"TinyLM.forward": "", "Runner.forward": "",
                   "PatchRouter.forward": "model: no import of TinyLM's code or its components reaches twoapps.imagegen"}


def test_a_model_path_without_imports_judges_no_module_by_them() -> None:
    bare = ModelPath("M", frozenset(), frozenset(), {})
    assert bare.reaches("any.where.at_all")
    some = ModelPath("M", frozenset(), frozenset(), {}, frozenset({"pkg.llm.model", "lib"}))
    assert some.reaches("pkg.llm.runner") and some.reaches("lib") and not some.reaches("pkg.imagegen.router")
    assert ModelPath.from_dict(some.to_dict()) == some
