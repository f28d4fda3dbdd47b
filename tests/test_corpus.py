"""Acceptance on real code no one here wrote: the sglang 0.5.23 and flashinfer 0.7.2.post1 wheels."""

from __future__ import annotations

import json
import re

import pytest

from tests.support import REPO, run_castfind

pytestmark = pytest.mark.corpus


def test_no_file_of_either_wheel_crashes_extraction(corpus_cache):
    assert pytest.corpus_files > 7900  # type: ignore[attr-defined]
    # Every diagnostic is a real syntax error reported as data, not an extractor crash.
    for d in pytest.corpus_diagnostics:  # type: ignore[attr-defined]
        assert d.kind == "parse-error" and d.message.startswith("syntax error"), d


def test_where_follows_the_returned_callable_into_flashinfer(corpus, corpus_cache):
    r = run_castfind("where", "flashinfer_cutlass_fused_moe", "--root", str(corpus["sglang"]),
                     "--root", str(corpus["flashinfer"]), "--cache-dir", str(corpus_cache), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    first = data["definitions"][0]
    assert (first["qualname"], first["path"], first["line"]) == (
        "flashinfer.fused_moe.core.cutlass_fused_moe", "flashinfer/fused_moe/core.py", 1277)
    assert all(d["line"] != 966 for d in data["definitions"])  # the nested same-name def
    paths = [h["path"] for h in first["chain"]]
    runner = "sglang/srt/layers/moe/moe_runner/flashinfer_cutlass.py"
    assert paths.index(runner) < paths.index("flashinfer/fused_moe/__init__.py")
    texts = [h["text"] for h in first["chain"]]
    assert any("_flashinfer_cutlass_fused_moe()" in t for t in texts)
    assert any(t.startswith("from flashinfer.fused_moe import cutlass_fused_moe") for t in texts)
    assert {"path": runner, "line": 371, "test": False} in data["call_sites"]


def test_where_class_method_and_every_override(corpus, corpus_cache):
    r = run_castfind("where", "MLATokenToKVPool.get_key_buffer", "--root", str(corpus["sglang"]),
                     "--cache-dir", str(corpus_cache), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)["definitions"][0]
    assert d["path"] == "sglang/srt/mem_cache/memory_pool.py"
    assert d["qualname"] == "sglang.srt.mem_cache.memory_pool.MLATokenToKVPool.get_key_buffer"
    r = run_castfind("where", "get_key_buffer", "--root", str(corpus["sglang"]), "--cache-dir", str(corpus_cache), "--json")
    defs = json.loads(r.stdout)["definitions"]
    methods = [x for x in defs if x["kind"] == "method" and x["qualname"].endswith(".get_key_buffer")]
    assert len(methods) > 20


MLA = "sglang/srt/layers/attention/flashinfer_mla_backend.py"


def test_scan_flags_the_whole_fp8_pool_cast_in_forward_decode(sglang_scan):
    errors = [f for f in sglang_scan["findings"] if f["severity"] == "error"]
    top = [(f["path"], f["line"]) for f in errors[:10]]
    assert (MLA, 822) in top
    f = next(f for f in errors if (f["path"], f["line"]) == (MLA, 822))
    assert f["rule"] == "CF101" and f["function"] == "FlashInferMLAAttnBackend.forward_decode"
    assert f["hot_path"][-1].endswith("FlashInferMLAAttnBackend.forward_decode")
    assert (MLA, 761) in {(e["path"], e["line"]) for e in errors}


def test_scan_costs_the_mla_pool_cast_from_its_allocation(corpus, corpus_cache, sglang_scan, tmp_path):
    """Issue 11: with a DeepSeek-V3-like config the 822 cast costs 61 layers × the MLA pool's per-layer buffer
    (allocated in MLATokenToKVPool._create_buffers) × (1 byte FP8 read + 2 bytes BF16 write), and ranks first.
    The engine's outcome is carried from ``sglang_scan`` (bindings are not part of it: costs come after)."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                               "hidden_size": 7168, "torch_dtype": "bfloat16"}))
    r = run_castfind("scan", str(corpus["sglang"]), "--cache-dir", str(corpus_cache), "--json", "-j", "2",
                     "--model-config", str(cfg), "--kv-tokens", "495552", "--kv-cache-dtype", "fp8_e4m3")
    assert r.returncode == 1, r.stderr
    errors = [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "error"]
    assert (errors[0]["path"], errors[0]["line"]) == (MLA, 822)
    cost = errors[0]["cost"]
    assert cost["holder"] == "MLATokenToKVPool.kv_buffer"
    assert cost["shape"] == ["size + page_size", "1", "kv_lora_rank + qk_rope_head_dim"]
    assert cost["per_step"].startswith("layer_num * ")
    assert cost["value"] == 61 * (495552 + 1) * (512 + 64) * (1 + 2)
    # The pool's dtype is --kv-cache-dtype, the destination the activations': which configurations cost is said.
    assert cost["verdict"] == "" and cost["note"] == "no-op when kv_cache_dtype == q.dtype"
    assert cost["declared"].startswith("sglang/srt/mem_cache/memory_pool.py:")
    # Quiet casts (issue 11): a gate declared FP32 cast .float() is a no-op; a router [experts, hidden] is not
    # small (an expert count is a model size; hand-labelled whole-buffer-hot).
    by_line = {(f["path"], f["line"]): f for f in json.loads(r.stdout)["findings"]}
    dots = "sglang/srt/models/dots3_common/dots_omni_vision.py"
    for line in (292, 396):
        assert by_line[(dots, line)]["severity"] == "info"
        assert by_line[(dots, line)]["cost"]["note"] == f"no-op: buffer declared torch.float32 at {dots}:281"
    gate = by_line[("sglang/srt/models/deepseek_v2.py", 576)]
    assert gate["severity"] == "error" and gate["cost"]["verdict"] == ""
    # Every expert's weights are not small; declared in the default dtype, which this config binds to bf16, so
    # their .bfloat16() is the tensor itself (issue 35: a cast the bound dtypes make equal is a 0 B no-op, info).
    experts = by_line[("sglang/multimodal_gen/runtime/layers/moe.py", 192)]
    assert experts["cost"]["verdict"] != "tiny" and experts["cost"]["src_dtype"] == "default_dtype"
    assert experts["severity"] == "info" and experts["cost"]["verdict"] == "no-op" and experts["cost"]["value"] == 0


#: A platform predicate that holds only off CUDA (a ROCm, NPU, MPS, CPU, XPU or MUSA branch).
OFF_CUDA = re.compile(r"\b_?is_(hip|npu|mps|cpu|xpu|musa)\b|_use_aiter\b|device\.type == .mps.")
DEPLOY = ("--platform", "cuda", "--kv-cache-dtype", "fp8_e4m3", "--kv-tokens", "495552")


def _deployment(corpus, corpus_cache, config: str, backend: str) -> tuple[list[dict], dict]:
    r = run_castfind("scan", str(corpus["sglang"]), "--cache-dir", str(corpus_cache), "--json", "-j", "2",
                     "--model-config", str(REPO / "fixtures" / "deploy_configs" / config),
                     "--attention-backend", backend, *DEPLOY)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    findings = doc["findings"]
    for f in findings:
        if f["severity"] != "error":
            continue
        # Every error on the path has a number; none is another application's or an off-CUDA branch's.
        assert f["cost"] is not None and f["cost"]["value"] is not None, (f["path"], f["line"], f["cost"])
        assert not f["path"].startswith("sglang/multimodal_gen/"), (f["path"], f["line"])
        for c in f["conditions"]:
            holds = c["test"].strip().startswith("not ") == c["negated"]  # the branch needs the predicate true
            assert not (holds and OFF_CUDA.search(c["test"])), (f["path"], f["line"], c)
    return findings, doc["stats"]["step"]


def test_issue_35_deployments_number_every_error_on_their_path(corpus, corpus_cache, sglang_scan):
    """Issue 35's acceptance: a DeepSeek-V3-like config on CUDA with FlashInfer MLA and an FP8 KV cache puts the
    decode step's whole-pool cast (822) first, on the path, with its value; a Llama-3-8B-like config with fa3 has no
    MLA-only code on its path. In both, every error has a number and none is another model's or an off-CUDA branch's;
    a 0 B cast (the bound dtypes are one) is an info, not a row of the step."""
    ds, step = _deployment(corpus, corpus_cache, "deepseek_v3_like.json", "flashinfer")
    first = ds[0]
    assert (first["path"], first["line"], first["severity"]) == (MLA, 822, "error")
    assert first["cost"]["value"] == 61 * (495552 + 1) * (512 + 64) * (1 + 2) and "decode" in first["steps"]
    assert not first.get("off_path")
    assert all(f["severity"] == "info" for f in ds if f["cost"] and f["cost"]["verdict"] == "no-op")
    assert (step["rows"][0]["path"], step["rows"][0]["line"]) == (MLA, 822)
    assert all(r["bytes_per_step"] > 0 for r in step["rows"]), step["rows"]  # a 0 B cast is no row of the step
    # The fp32 lm_head cast runs only under --enable-fp32-lm-head (no binding gives it): counted apart, last.
    assert [r["only_when"] for r in step["rows"] if r["line"] == 1184][0][-1] == "self.use_fp32_lm_head"
    assert step["total"] == sum(r["bytes_per_step"] for r in step["rows"] if not r["only_when"])
    assert [bool(r["only_when"]) for r in step["rows"]] == sorted(bool(r["only_when"]) for r in step["rows"])
    llama, _ = _deployment(corpus, corpus_cache, "llama3_8b_like.json", "fa3")
    for f in llama:
        if f["severity"] in ("error", "warning"):
            assert "mla" not in f["path"].rsplit("/", 1)[-1] and "absorb" not in f["function"].lower(), f["path"]
            # no branch that needs the backend's MLA switch on (`if self.use_mla:`, or the else of `if not ...`)
            assert not any(c["test"].strip() == ("not self.use_mla" if c["negated"] else "self.use_mla")
                           for c in f["conditions"]), (f["path"], f["line"], f["conditions"])
    # FA3's absorbed-MLA decode casts the whole pool (`else:` of `if not self.use_mla:`); a Llama config's
    # architecture (no kv_lora_rank) turns that branch off, and FA3's own branch reads the cache in place.
    assert not any(f["path"].endswith("flashattention_backend.py") and f["severity"] in ("error", "warning")
                   for f in llama)


def test_scan_keeps_batch_casts_quiet(sglang_scan):
    flagged = {(f["path"], f["line"]) for f in sglang_scan["findings"] if f["severity"] == "error"}
    assert (MLA, 747) not in flagged and (MLA, 748) not in flagged
    # kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
    assert (MLA, 557) not in flagged and (MLA, 677) not in flagged


def test_demand_driven_scan_equals_eager_scan_on_sglang(corpus, corpus_cache):
    """Parsing only the files that can matter gives the same findings as considering every file."""
    from castfind.analysis.scan import scan
    from castfind.api import open_index
    from castfind.core.rules import load_rules

    rules = load_rules()

    def run(demand: bool) -> tuple[list, dict]:
        index = open_index([str(corpus["sglang"])], cache_dir=corpus_cache, jobs=2)
        out = scan(index, rules, demand=demand)
        return sorted((f.rule, f.path, f.line, f.hot_path, f.provenance) for f in out.findings), out.stats

    lazy, lazy_stats = run(True)
    eager, eager_stats = run(False)
    assert lazy == eager
    assert len(lazy) > 50
    assert lazy_stats["loaded"] < eager_stats["loaded"] / 2
    # Across calls too: the parameter cast of mamba1's decode helper is found through the forward that
    # passes the layer's whole conv weight (a handoff), and the demand-driven scan reads the same files.
    mamba = "sglang/srt/layers/attention/mamba/mamba1.py"
    crossed = [f for f in lazy if f[1] == mamba and any(" passes conv_weights as conv_weights of " in h for h in f[4])]
    assert {f[2] for f in crossed} >= {438}, crossed
    assert any(" passes " in h for f in lazy if f[1] != mamba for h in f[4])


def _lazy_tables(init) -> tuple[dict[str, str | None], set[str]]:
    """The lazily exported names of a package ``__init__``, read here with ``ast`` (not castfind):
    every key of a module-level dict or member of a set/frozenset literal whose name ends in
    ``LAZY_EXPORTS``, and every ``__all__`` name that no top-level statement binds."""
    import ast

    tree = ast.parse(init.read_text(encoding="utf-8"))
    tables: dict[str, str | None] = {}
    bound: set[str] = set()
    all_names: set[str] = set()
    for st in ast.walk(tree):
        if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
            name, value = st.targets[0].id, st.value
            if name == "__all__":
                all_names |= {e.value for e in value.elts}  # type: ignore[attr-defined]
            elif name.endswith("LAZY_EXPORTS"):
                if isinstance(value, ast.Call):
                    value = value.args[0]
                if isinstance(value, ast.Dict):
                    tables.update({k.value: v.value for k, v in zip(value.keys, value.values, strict=True)})  # type: ignore[union-attr]
                else:
                    tables.update({e.value: None for e in value.elts})  # type: ignore[attr-defined]
    for st in tree.body:
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            bound |= {a.asname or a.name for a in st.names}
        elif isinstance(st, ast.Try):
            bound |= {a.asname or a.name for s in st.body if isinstance(s, ast.ImportFrom) for a in s.names}
        elif isinstance(st, (ast.FunctionDef, ast.ClassDef)):
            bound.add(st.name)
    return tables, all_names - bound - set(tables)


def test_every_lazily_exported_name_of_flashinfer_fused_moe_and_mla_resolves(corpus, corpus_cache):
    from castfind.analysis.resolve import Resolver
    from castfind.api import open_index

    index = open_index([str(corpus["flashinfer"])], cache_dir=corpus_cache, jobs=1)
    r = Resolver(index)
    checked = 0
    for package in ("fused_moe", "mla"):
        tables, only_in_all = _lazy_tables(corpus["flashinfer"] / "flashinfer" / package / "__init__.py")
        assert tables, package
        for name in sorted(tables) + sorted(only_in_all):
            got = r.lookup(f"flashinfer.{package}", name)
            defs = [x for x in got if x.target.kind == "def" and x.target.definition is not None]
            assert defs and len(defs) == len(got), (package, name, got)
            for x in defs:
                t = x.target
                sf = r.modules.file(t.module)
                assert sf is not None and t.definition is not None
                line = index.line_text(sf, t.definition.line)
                # The definition is where the table's entry leads: its own `def`/`class` line, in the
                # module the table names (relative to the package) when it names one.
                assert f"def {t.definition.name}(" in line or f"class {t.definition.name}" in line, (name, line)
                if name in tables:
                    # `SparseMLASm120Wrapper = _SparseMLAPagedAttentionRunner`: an alias on the way.
                    assert t.definition.name == name or any(
                        h.kind == "alias" and h.text.startswith(f"{name} =") for h in x.chain), (name, x)
                    if tables[name] is not None:
                        assert t.module == f"flashinfer.{package}{tables[name]}", (name, t.module)
                checked += 1
            assert any(h.kind == "lazy-import" for x in got for h in x.chain), name
    assert checked >= 56  # 11 + 1 in fused_moe (the deprecated alias), 44 in mla


@pytest.fixture(scope="module")
def transformers_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("castfind-transformers-cache")


@pytest.mark.parametrize("name, module", [
    ("LlamaForCausalLM", "transformers.models.llama.modeling_llama"),
    ("AutoModelForCausalLM", "transformers.models.auto.modeling_auto"),
])
def test_where_resolves_transformers_lazy_exports_through_the_lazy_module(transformers_root, transformers_cache, name,
                                                                          module):
    # Demand-driven: a dotted symbol parses the modules on its way, never the whole wheel.
    r = run_castfind("where", f"transformers.{name}", "--root", str(transformers_root), "--no-follow-installed",
                     "--cache-dir", str(transformers_cache), "--json")
    assert r.returncode == 0, r.stderr
    defs = json.loads(r.stdout)["definitions"]
    first = defs[0]
    assert (first["qualname"], first["kind"]) == (f"{module}.{name}", "class")
    source = (transformers_root / first["path"]).read_text(encoding="utf-8").splitlines()
    assert source[first["line"] - 1].startswith(f"class {name}(")
    # The first hop is the `_LazyModule(...)` of transformers/__init__.py, not a TYPE_CHECKING import.
    hop = first["chain"][0]
    assert hop["path"] == "transformers/__init__.py" and hop["kind"] == "lazy-import"
    init = (transformers_root / "transformers" / "__init__.py").read_text(encoding="utf-8").splitlines()
    assert "_LazyModule(" in init[hop["line"] - 1]
