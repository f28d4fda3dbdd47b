"""Static cost: allocation facts, formulas over constructor parameters, bound values, ×N per step (fixtures/cost)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from castfind import api, cli
from castfind.analysis.cost import DTYPE_BYTES, MAX_TEXT, Bindings, CostModel, Evaluator, Unknown, bindings, judged, small_by_construction
from castfind.analysis.cost import check as check_cost
from castfind.analysis.findings import rank
from castfind.core.rules import RuleError, load_rules, validate
from castfind.core.types import Cost, Finding, Runtime
from castfind.read import codec
from castfind.read.extract import extract_source
from tests.support import REPO

FIX = REPO / "fixtures" / "cost"
POOLS = FIX / "servekit" / "pools.py"
DSV3 = {"num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "hidden_size": 7168,
        "torch_dtype": "bfloat16"}
runner = CliRunner()


def _facts(path: Path):
    return extract_source(path.read_bytes(), "servekit.pools", "servekit/pools.py", False)


def test_allocation_facts_are_extracted() -> None:
    allocs = {(a.scope, a.target): a for a in _facts(POOLS).allocations if a.kind != "value"}
    kv = allocs[("LatentKVPool._create_buffers", "self.kv_buffer")]
    assert (kv.kind, kv.shape, kv.dtype, kv.count) == (
        "tensor", ("self.size + self.page_size", "1", "self.kv_cache_dim"), "self.store_dtype", "self.layer_num")
    v = allocs[("HeadKVPool.__init__", "self.v_buffer")]  # positional sizes, not a tuple
    assert v.shape == ("self.size + self.page_size", "self.head_num", "self.head_dim") and v.count == "self.layer_num"
    w = allocs[("Projection.__init__", "self.weight")]
    assert (w.kind, w.shape, w.dtype, w.count) == ("parameter", ("vocab_size", "hidden_size"), "params_dtype", None)
    g = allocs[("Projection.__init__", "self.gate")]
    assert (g.kind, g.shape) == ("linear", ("8", "hidden_size"))


def test_attribute_values_keep_the_test_of_their_if() -> None:
    values = [a for a in _facts(POOLS).allocations if a.kind == "value" and a.target == "self.store_dtype"]
    assert [(a.text, a.when) for a in values] == [
        ("torch.uint8", "dtype in (torch.float8_e5m2, torch.float8_e4m3fn)"),
        ("dtype", "not (dtype in (torch.float8_e5m2, torch.float8_e4m3fn))")]
    dim = next(a for a in _facts(POOLS).allocations if a.target == "self.kv_cache_dim")
    assert dim.text == "override_kv_cache_dim if self.packed else kv_lora_rank + qk_rope_head_dim"


def test_allocation_facts_round_trip_through_the_codec() -> None:
    facts = _facts(POOLS)
    assert codec.loads(codec.dumps(facts)) == facts
    c = Cost(("a", "1"), "torch.uint8", None, "a * 1 * (1 + 4)", "n * a * 1 * (1 + 4)", 3.0, "P.kv")
    assert codec.loads(codec.dumps(c)) == c


def _scan(*extra_args: str, tmp: Path) -> dict:
    r = runner.invoke(cli.app, ["scan", str(FIX), "--cache-dir", str(tmp / "cache"), "--json", *extra_args])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def _by_file(doc: dict) -> dict[str, dict]:
    """The first finding (in ranked order) of each file."""
    out: dict[str, dict] = {}
    for f in doc["findings"]:
        out.setdefault(f["path"].rsplit("/", 1)[-1], f)
    return out


def _at(doc: dict, name: str, line: int) -> dict:
    return next(f for f in doc["findings"] if f["path"].endswith("/" + name) and f["line"] == line)


def test_formula_text_without_bindings_and_value_null(tmp_path: Path) -> None:
    found = _by_file(_scan(tmp=tmp_path))
    cost = found["latent_backend.py"]["cost"]
    assert cost["shape"] == ["size + page_size", "1", "kv_lora_rank + qk_rope_head_dim"]  # use_dsa defaults to False
    assert cost["src_dtype"] == "dtype" and cost["dst_dtype"] == "activation_dtype"  # the getter's .view(self.dtype)
    assert cost["per_step"].startswith("layer_num * ")
    assert cost["value"] is None and cost["holder"] == "LatentKVPool.kv_buffer"
    # What is missing is named, so a user knows which --set to pass.
    assert {"layer_num", "size", "kv_lora_rank", "qk_rope_head_dim"} <= set(cost["unbound"])
    assert "page_size" not in cost["unbound"]  # bound by the rules' defaults
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache"])
    line = next(t for t in r.stdout.splitlines() if t.strip().startswith("cost:") and "kv_lora_rank" in t)
    assert "(unbound: " in line and "kv_lora_rank" in line.split("(unbound: ")[1]


def test_value_with_model_config_and_flags_times_layers(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(DSV3))
    doc = _scan("--model-config", str(cfg), "--kv-tokens", "495552", "--kv-cache-dtype", "fp8_e4m3", tmp=tmp_path)
    cost = _by_file(doc)["latent_backend.py"]["cost"]
    per_call = (495552 + 1) * 1 * (512 + 64) * (1 + 2)  # fp8 read, bf16 write
    assert cost["value"] == 61 * per_call  # one buffer of a per-layer list of 61: ×61 per step
    assert cost["value"] > 40e9
    assert _by_file(doc)["latent_backend.py"] is doc["findings"][0]  # ranked first by its value


def test_mha_pool_with_set_values_and_uint8_storage(tmp_path: Path) -> None:
    doc = _scan("--set", "layer_num=32", "--set", "head_num=8", "--set", "head_dim=128", "--kv-tokens", "1000",
                "--kv-cache-dtype", "fp8_e5m2", tmp=tmp_path)
    cost = _at(doc, "head_backend.py", 12)["cost"]
    assert cost["src_dtype"] == "torch.uint8" and cost["dst_dtype"] == "torch.float32"
    assert cost["value"] == 32 * (1000 + 1) * 8 * 128 * (1 + 4)
    assert not [d for d in doc["diagnostics"] if d["path"] == "--set"]


def test_getter_through_a_self_call_ignores_a_dequantized_return(tmp_path: Path) -> None:
    """get_key_buffer returns self._get_key_buffer(i), whose returns are the buffer or a dequantized copy."""
    doc = _scan("--set", "layer_num=2", "--set", "head_num=2", "--set", "head_dim=4", "--kv-tokens", "9",
                "--kv-cache-dtype", "bf16", "--set", "activation_dtype=torch.float32", tmp=tmp_path)
    cost = _at(doc, "head_backend.py", 17)["cost"]
    assert cost["holder"] == "HeadKVPool.k_buffer"  # the word "head" in head_backend.py picks the class
    assert cost["value"] == 2 * 10 * 2 * 4 * (2 + 4)
    # `dequantize(buf, ...)` casts a parameter: its one caller in the file hands it `self.k_buffer[...]`, one layer.
    handed = _at(doc, "pools.py", 76)["cost"]
    assert handed["holder"].endswith(".k_buffer") and handed["shape"] == ["size + page_size", "head_num", "head_dim"]


def test_unused_set_is_reported(tmp_path: Path) -> None:
    doc = _scan("--set", "layer_num=4", "--set", "num_experts=256", tmp=tmp_path)
    unused = [d["message"] for d in doc["diagnostics"] if d["path"] == "--set"]
    assert [m.split(";")[0] for m in unused] == ["num_experts: no cost formula of this scan reads num_experts"]


def test_small_per_batch_tensor_gets_no_finding_and_no_cost(tmp_path: Path) -> None:
    doc = _scan("--kv-tokens", "1000", tmp=tmp_path)
    lines = {(f["path"].rsplit("/", 1)[-1], f["line"]) for f in doc["findings"]}
    assert ("head_backend.py", 13) not in lines  # self.seq_lens[:bs].to(...): a batch slice, not the pool
    assert all(f["cost"] is None or f["cost"]["holder"].endswith(("kv_buffer", "v_buffer", "k_buffer"))
               for f in doc["findings"] if "/servekit/" in f["path"])


@pytest.mark.parametrize("content, why", [("{not json", "not JSON"), ("[1, 2]", "expected a JSON object")])
def test_bad_model_config_is_one_line_exit_2(tmp_path: Path, content: str, why: str) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(content)
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "--model-config", str(cfg)])
    assert r.exit_code == 2
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and why in err and str(cfg) in err


def test_missing_model_config_and_bad_set_are_usage_errors(tmp_path: Path) -> None:
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "--model-config", str(tmp_path / "nope.json")])
    assert r.exit_code == 2 and "cannot read" in r.stderr
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "--set", "layer_num"])
    assert r.exit_code == 2 and "NAME=VALUE" in r.stderr
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "--kv-cache-dtype", "fp9"])
    assert r.exit_code == 2 and "unknown --kv-cache-dtype" in r.stderr


def test_sarif_and_text_carry_the_cost(tmp_path: Path) -> None:
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "--set", "layer_num=2", "--kv-tokens", "9",
                                "--set", "kv_lora_rank=3", "--set", "qk_rope_head_dim=1", "--kv-cache-dtype", "bf16",
                                "--set", "activation_dtype=torch.float32"])
    head = next(line for line in r.stdout.splitlines() if "latent_backend.py" in line)
    assert head.endswith(f"[{2 * 10 * 1 * 4 * (2 + 4)} B/step]")
    assert "    cost: [size + page_size, 1, kv_lora_rank + qk_rope_head_dim]" in r.stdout
    out = tmp_path / "r.sarif"
    runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "--sarif", str(out)])
    results = [res for res in json.loads(out.read_text())["runs"][0]["results"]
               if "servekit/" in res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]]
    costed = [res for res in results if "cost" in res["properties"]]
    assert len(costed) == len(results) == 4  # the parameter cast in pools.py too: its caller hands it a layer
    assert all(set(res["properties"]["cost"]) >= {"shape", "per_step", "value"} for res in costed)


def test_cost_section_is_validated(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text("cost:\n  flags:\n    kv_slots: [size]\n  defaults: {page_size: [1]}\n")
    with pytest.raises(RuleError) as e:
        load_rules([tmp_path])
    assert "cost.flags.kv_slots" in str(e.value)
    (tmp_path / "r.yaml").write_text("cost: [1\n")
    with pytest.raises(RuleError) as e:
        load_rules([tmp_path])
    assert str(tmp_path / "r.yaml") in str(e.value) and "\n" not in str(e.value)


def test_evaluator_is_safe_and_small() -> None:
    ev = Evaluator(Bindings({"n": "3", "d": "torch.float8_e4m3fn", "a": "b", "b": "a"}))
    assert ev.number("max(n, 2) * (n + 1) // 2") == 6
    assert ev.truth("d in (torch.float8_e5m2, torch.float8_e4m3fn)") is True
    for text in ("__import__('os')", "n ** 99", "m + 1", "a", "[x for x in y]", "n.__class__"):
        assert ev.number(text) is None, text
    with pytest.raises(Unknown):
        ev.value("open('x')")


def test_substitution_is_bounded_and_memoised() -> None:
    """A chain of attributes each doubling the last (`self.a1 = self.a0 + self.a0` ...) stops at the text
    budget instead of growing exponentially, and each attribute is resolved once."""
    body = "\n".join(f"        self.a{i + 1} = self.a{i} + self.a{i} if self.c{i} else self.a{i} * 2"
                     for i in range(40))
    src = f"class P:\n    def __init__(self, a0):\n        self.a0 = a0\n{body}\n"
    facts = extract_source(src.encode(), "m", "m.py", False)
    (cls,) = [d for d in facts.definitions if d.kind == "class"]

    class One:
        def definitions(self, name):
            return [(facts, cls)] if name == "P" else []

        def facts(self, root, path):
            return facts

    model = CostModel(load_rules(), One(), Bindings())
    text = model.substitute((facts, cls), "self.a40")
    assert len(text) <= MAX_TEXT
    assert len(model._attrs) <= 41


def test_ranking_puts_known_values_first_among_errors() -> None:
    def f(line: int, value: float | None, score: float = 1.0) -> Finding:
        cost = Cost((), None, None, "", "", value) if value is not None or line == 3 else None
        return Finding("CF101", "n", "error", "r", "a.py", line, line, 1, "f", "e", "m", score=score, cost=cost)

    ordered = rank([f(1, None, score=9.0), f(2, 10.0), f(3, None), f(4, 1e12)])
    assert [x.line for x in ordered] == [4, 2, 1, 3]


def test_bindings_priority_and_dtype_names() -> None:
    spec = load_rules().cost
    b = bindings(spec, config={"num_hidden_layers": 61, "torch_dtype": "bfloat16"}, kv_tokens=7,
                 kv_cache_dtype="auto", sets=[("layer_num", "2")])
    assert b.values["layer_num"] == "2" and b.values["size"] == "7" and b.values["page_size"] == "1"
    assert b.values["activation_dtype"] == "torch.bfloat16" and b.values["dtype"] == "activation_dtype"
    assert Evaluator(b).value("dtype") == "torch.bfloat16"
    assert Evaluator(b).number("config.num_hidden_layers * 2") == 122  # a model's `config.FIELD`


def test_api_scan_takes_bindings() -> None:
    run = api.scan(
        [str(FIX)], use_cache=False, sets=[("layer_num", "1"), ("kv_lora_rank", "1"), ("qk_rope_head_dim", "1"),
                                           ("activation_dtype", "torch.float32")],
        kv_tokens=1, kv_cache_dtype="bf16")
    latent = next(f for f in run.report.findings if f.path.endswith("latent_backend.py"))
    assert latent.cost is not None and latent.cost.value == 1 * 2 * 1 * 2 * (2 + 4)


def test_costs_are_carried_per_bindings_and_tree(tmp_path: Path) -> None:
    """A warm scan reads the costs of an unchanged tree back; other bound names, or a changed file, compute."""
    args = ("--set", "layer_num=2", "--set", "kv_lora_rank=3", "--set", "qk_rope_head_dim=1", "--kv-tokens", "9",
            "--kv-cache-dtype", "bf16", "--set", "activation_dtype=torch.float32")
    first = _at(_scan(*args, tmp=tmp_path), "latent_backend.py", 10)["cost"]
    assert _at(_scan(*args, tmp=tmp_path), "latent_backend.py", 10)["cost"] == first
    other = _at(_scan(*args, "--set", "layer_num=4", tmp=tmp_path), "latent_backend.py", 10)["cost"]
    assert other["value"] == 2 * first["value"]
    unused = _scan(*args, "--set", "nothing=1", tmp=tmp_path)
    assert [d["message"].split(";")[0] for d in unused["diagnostics"] if d["path"] == "--set"] == [
        "nothing: no cost formula of this scan reads nothing"]



# -- static cost against a trace (`--trace`) --------------------------------------------------------------

def _measured(shape: tuple[int, ...], src: str = "float8_e4m3fn", dst: str = "bfloat16") -> Runtime:
    numel = 1
    for n in shape:
        numel *= n
    per_call = numel * (DTYPE_BYTES[src] + DTYPE_BYTES[dst])
    return Runtime(calls=3, shape=shape, src_dtype=src, dst_dtype=dst, bytes_per_call=per_call, bytes_total=3 * per_call)


POOL_COST = Cost(("size + page_size", "1", "kv_dim"), "torch.float8_e4m3fn", "activation_dtype",
                 "(size + page_size) * 1 * kv_dim * (1 + sizeof(activation_dtype))", "n * ...")


def test_check_agrees_and_reads_unbound_names_off_the_trace() -> None:
    k = check_cost(POOL_COST, _measured((62, 1, 576)), Bindings({"size": "61", "page_size": "1"}))
    assert k.status == "agrees" and k.mismatches == ()
    assert dict(k.inferred) == {"kv_dim": "576", "activation_dtype": "torch.bfloat16"}
    assert k.bytes_per_call == k.measured_bytes_per_call == 62 * 576 * 3


def test_check_flags_an_axis_a_dtype_and_a_rank_that_differ() -> None:
    bound = Bindings({"size": "61", "page_size": "1", "kv_dim": "512"})
    k = check_cost(POOL_COST, _measured((62, 1, 576)), bound)
    assert k.status == "mismatch"
    assert k.mismatches[0] == "axis 2: static kv_dim = 512, measured 576"
    assert k.mismatches[-1].startswith("bytes per call: static")
    k = check_cost(POOL_COST, _measured((62, 1, 576), src="float32"), Bindings({"size": "61", "page_size": "1"}))
    assert k.status == "mismatch" and any(m.startswith("source dtype") for m in k.mismatches)
    k = check_cost(POOL_COST, _measured((62, 576)), Bindings())
    assert k.status == "mismatch" and k.mismatches[0].startswith("rank: static [size + page_size, 1, kv_dim] has 3")
    k = check_cost(Cost(("a + b",), None, None, "", ""), _measured((7,)), Bindings())
    assert k.status == "unchecked" and k.bytes_per_call is None


@pytest.fixture(scope="module")
def decode_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("rec") / "decode.jsonl"
    proc = subprocess.run([sys.executable, "-m", "castfind", "record", "-o", str(out), "--",
                           str(REPO / "fixtures" / "runtime" / "decode_loop.py"), "--layers", "4", "--steps", "3",
                           "--tokens", "61"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def test_runtime_fixture_static_bytes_equal_the_recorders(decode_trace: Path) -> None:
    """The FP8 pool cast to BF16 q: the static formula, bound to the run's sizes, gives the bytes the
    recorder measured, per call and per step (4 layers: ×4)."""
    args = ["scan", str(REPO / "fixtures" / "runtime"), "--no-cache", "--json", "--trace", str(decode_trace),
            "--set", "num_tokens=61", "--set", "num_layers=4", "--set", "activation_dtype=torch.bfloat16"]
    r = runner.invoke(cli.app, args)
    (f,) = [f for f in json.loads(r.stdout)["findings"] if f["rule"] != "CF900"]
    rt, cost = f["runtime"], f["cost"]
    assert rt["bytes_per_call"] == 61 * 1 * 8 * (1 + 2) and rt["calls"] == 4 * 3
    assert cost["check"]["status"] == "agrees" and cost["check"]["bytes_per_call"] == rt["bytes_per_call"]
    assert cost["value"] == rt["bytes_total"] / 3  # per step: the recorder's total over the 3 steps
    text = runner.invoke(cli.app, [a for a in args if a != "--json"]).stdout
    assert "static vs measured: agrees: 1.4 KiB/call both" in text
    wrong = runner.invoke(cli.app, [*args[:-6], "--set", "num_tokens=60"])
    check = json.loads(wrong.stdout)["findings"][0]["cost"]["check"]
    assert check["status"] == "mismatch" and check["mismatches"][0] == "axis 0: static num_tokens = 60, measured 61"


# -- multiplicity: per-layer lists and loops ------------------------------------------------------------

MULTI = REPO / "fixtures" / "multiplicity"


def test_loop_bounds_are_recorded_per_cast_inside_its_function() -> None:
    src = (b"def f(bufs, n):\n    for i in range(n):\n        for e in range(4):\n            bufs[i].float()\n"
           b"        def g():\n            x.half()\n    for y in z.to(torch.float):\n        pass\n")
    got = {c.method: c.loops for c in extract_source(src, "m", "m.py", False).casts}
    assert got == {"float": (("i", "range(n)"), ("e", "range(4)")), "half": (), "to": ()}


def test_a_loop_that_walks_the_layers_counts_once_and_a_per_layer_call_counts_by_the_list() -> None:
    run = api.scan([str(MULTI)], use_cache=False, sets=[("pool.layer_num", "4"), ("layer_num", "4"), ("size", "10"),
                                                        ("dtype", "torch.float8_e4m3fn"),
                                                        ("activation_dtype", "torch.bfloat16")])
    costs = {f.function: f.cost for f in run.report.findings}
    sweep, per_layer = costs["SweepBackend.forward_decode"], costs["PerLayerBackend.forward_decode"]
    assert sweep is not None and per_layer is not None
    assert sweep.shape == per_layer.shape == ("size", "64")  # SLOT_WIDTH, a module constant
    assert sweep.per_step.startswith("pool.layer_num * size")  # the loop's bound, not also the list's length
    assert per_layer.per_step.startswith("layer_num * size")
    assert sweep.value == per_layer.value == 4 * 10 * 64 * (1 + 2)


def test_unbound_dotted_names_are_named_as_set_binds_them() -> None:
    run = api.scan([str(MULTI)], use_cache=False)
    sweep = next(f.cost for f in run.report.findings if f.function == "SweepBackend.forward_decode")
    assert sweep is not None and "pool.layer_num" in sweep.unbound and "pool" not in sweep.unbound


def test_constructor_defaults_decide_a_conditional_attribute_without_any_rule_default() -> None:
    """`use_dsa=False, override_kv_cache_dim=None` in the pool's signature: the packed branch is not taken,
    although no rule file names either parameter."""
    assert "use_dsa" not in dict(load_rules([]).cost.defaults)
    src = (FIX / "servekit" / "pools.py").read_bytes()
    init = next(d for d in extract_source(src, "servekit.pools", "servekit/pools.py", False).definitions
                if d.qualname == "LatentKVPool.__init__")
    assert ("use_dsa", "False") in init.param_defaults and ("override_kv_cache_dim", "None") in init.param_defaults


def test_parameters_set_on_a_layer_by_create_weights_and_depthwise_convs_are_allocations() -> None:
    src = (MULTI / "loopkit" / "quant.py").read_bytes()
    allocs = {a.target: a for a in extract_source(src, "loopkit.quant", "loopkit/quant.py", False).allocations}
    up = allocs["layer.w_up_weight"]  # register_parameter on create_weights' own parameter
    assert (up.scope, up.kind, up.dtype) == ("Fp8ExpertMethod.create_weights", "parameter", "torch.float8_e4m3fn")
    assert up.shape == ("num_experts", "2 * intermediate_size", "hidden_size")
    scale = allocs["layer.w_up_scale"]  # setattr(layer, "w_up_scale", ...)
    assert scale.dtype == "torch.float32" and scale.shape is None  # `ones(n)`: one size or a shape tuple? unknown
    assert allocs["self.conv"].shape == ("channels", "1", "kernel")  # groups == in_channels: depthwise
    wrapped = extract_source(b"class Q:\n    def make(self, layer, n):\n"
                             b"        w = ModelWeightParameter(data=torch.empty(n, 4, dtype=torch.int8), loader=f)\n"
                             b"        layer.register_parameter('qweight', w)\n        other.w = w\n",
                             "q", "q.py", False).allocations
    assert [(a.target, a.shape) for a in wrapped] == [("layer.qweight", ("n", "4"))]  # not `other`: no parameter


def test_a_quantized_method_and_a_module_weight_are_costed_from_their_allocations() -> None:
    run = api.scan([str(MULTI)], use_cache=False, sets=[("num_experts", "8"), ("hidden_size", "16"),
                                                        ("intermediate_size", "32"), ("channels", "4"), ("kernel", "3"),
                                                        ("activation_dtype", "torch.bfloat16")])
    costs = {f.function: f.cost for f in run.report.findings}
    apply, conv = costs["Fp8ExpertMethod.apply"], costs["ShortConv.forward"]
    assert apply is not None and apply.holder == "Fp8ExpertMethod.w_up_weight"
    assert apply.value == 8 * 64 * 16 * (1 + 2)  # fp8 read, bf16 write
    assert conv is not None and conv.src_dtype == "default_dtype"  # made in torch's default dtype
    # ... which is the activation dtype unless something says otherwise: then `.to(x.dtype)` moves nothing, and on
    # a deployment (--set describes one) dtypes the bound names make equal are a no-op of 0 B (an info)
    assert conv.value == 0 and conv.verdict == "no-op"
    assert conv.note == "no-op with the bound dtypes: default_dtype == x.dtype (torch.bfloat16)"
    assert next(f.severity for f in run.report.findings if f.function == "ShortConv.forward") == "info"
    run = api.scan([str(MULTI)], use_cache=False, sets=[("channels", "4"), ("kernel", "3"),
                                                        ("activation_dtype", "torch.bfloat16"),
                                                        ("default_dtype", "torch.float32")])
    conv = next(f.cost for f in run.report.findings if f.function == "ShortConv.forward")
    assert conv is not None and conv.value == 4 * 1 * 3 * (4 + 2)


# --------------------------------------------------------------------------- no-op and tiny casts (quietkit)

QUIET = "quietkit/"


def test_cast_to_the_declared_dtype_is_info_saying_why(tmp_path: Path) -> None:
    doc = _scan(tmp=tmp_path)
    router = _at(doc, "noop.py", 16)  # nn.Parameter(torch.empty(..., dtype=torch.float32)) then .float()
    assert router["severity"] == "info" and router["cost"]["verdict"] == "no-op"
    assert router["message"].endswith("(no-op: buffer declared torch.float32 at quietkit/noop.py:13)")
    assert router["cost"]["declared"] == "quietkit/noop.py:13"
    keys = _at(doc, "noop.py", 30)  # torch.zeros(..., dtype=torch.bfloat16) then .to(torch.bfloat16)
    assert keys["severity"] == "info" and "declared torch.bfloat16" in keys["cost"]["note"]
    values = _at(doc, "noop.py", 31)  # dtype=self.cache_dtype, then .to(self.cache_dtype) in the same class
    assert values["severity"] == "info" and values["cost"]["note"].startswith("no-op: buffer declared self.cache_dtype")


def test_one_name_in_two_classes_is_not_a_noop(tmp_path: Path) -> None:
    """ForeignReader's `self.cache_dtype` is not its cache's: the same words, said whose, the error kept."""
    f = _at(_scan(tmp=tmp_path), "noop.py", 45)
    assert f["severity"] == "error" and f["cost"]["verdict"] == ""
    assert f["cost"]["note"] == "no-op when PagedCache.cache_dtype == ForeignReader.cache_dtype"


def test_dtype_from_configuration_says_when_it_is_a_noop_and_is_one_once_bound(tmp_path: Path) -> None:
    latent = _at(_scan(tmp=tmp_path), "latent_backend.py", 10)
    assert latent["severity"] == "error" and latent["cost"]["note"] == "no-op when kv_cache_dtype == q.dtype"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(DSV3))
    # --kv-cache-dtype auto: the pool holds the activation dtype, so the bound dtypes are equal: a no-op, 0 bytes,
    # an info (no error of 0 B on the deployment's path), not in the step table.
    doc = _scan("--model-config", str(cfg), "--kv-tokens", "100", "--kv-cache-dtype", "auto", tmp=tmp_path)
    latent = _at(doc, "latent_backend.py", 10)
    assert latent["severity"] == "info" and latent["cost"]["value"] == 0 and latent["cost"]["verdict"] == "no-op"
    assert latent["cost"]["note"] == "no-op with the bound dtypes: kv_cache_dtype == q.dtype (torch.bfloat16)"
    assert ("latent_backend.py", 10) not in {(r["path"].rsplit("/", 1)[-1], r["line"])
                                              for r in doc["stats"]["step"]["rows"]}
    # fp8: the dtypes differ, the error and its bytes stay
    doc = _scan("--model-config", str(cfg), "--kv-tokens", "100", "--kv-cache-dtype", "fp8_e4m3", tmp=tmp_path)
    latent = _at(doc, "latent_backend.py", 10)
    assert latent["severity"] == "error" and latent["cost"]["verdict"] == "" and latent["cost"]["value"] > 0


def test_small_by_construction_is_a_warning_and_a_whole_buffer_stays_an_error(tmp_path: Path) -> None:
    doc = _scan(tmp=tmp_path)
    for line, shape in ((27, "[channels, 1, 4]"), (28, "[channels]")):
        f = _at(doc, "tiny.py", line)
        assert f["severity"] == "warning" and f["cost"]["verdict"] == "tiny", line
        assert f"small by construction: {shape} has one free dimension" in f["message"]
    router = _at(doc, "tiny.py", 15)  # [n_experts, hidden]: an expert count is a model size
    assert router["severity"] == "error" and router["cost"]["verdict"] == ""
    head = _at(doc, "tiny.py", 41)  # [vocab, hidden]: two free dimensions
    pool = _at(doc, "tiny.py", 42)  # [slots, 1, 576]: 576 > cost.tiny.max_literal
    assert head["severity"] == pool["severity"] == "error"
    assert head["cost"]["verdict"] == pool["cost"]["verdict"] == ""


def test_bound_values_that_make_a_small_buffer_large_keep_the_error(tmp_path: Path) -> None:
    small = ("--set", "channels=8", "--set", "params_dtype=torch.bfloat16")
    conv = _at(_scan(*small, tmp=tmp_path), "tiny.py", 27)
    assert conv["severity"] == "warning" and conv["cost"]["value"] == 8 * 1 * 4 * (2 + 4)
    large = ("--set", "channels=4194304", "--set", "params_dtype=torch.bfloat16")
    conv = _at(_scan(*large, tmp=tmp_path), "tiny.py", 27)
    assert conv["severity"] == "error" and conv["cost"]["verdict"] == ""
    assert "but 100663296 bytes per step with the bound values (>= 67108864)" in conv["cost"]["note"]


@pytest.mark.parametrize("shape, small", [
    (["hidden"], True), (["n_experts", "hidden"], False), (["config.num_local_experts", "config.hidden_size"], False),
    (["c", "1", "4"], True), (["c", "1", "kernel_size"], True), (["8", "hidden_size"], True), (["16", "16"], False),
    (["size + page_size", "1", "kv_lora_rank + qk_rope_head_dim"], False), (["size", "1", "576"], False),
    (["size * head_num * head_dim"], False), (["vocab", "hidden"], False), (["layer_num", "size"], False),
    (["n_experts", "2 * inter", "hidden"], False), (["get_size()"], False), (["max(a, b) // 2"], True),
    (["hc_mult", "dim"], True), (["config.hc_mult", "config.hidden_size"], True),
    (["hidden * ffn_dim_multiplier", "hidden"], False), (["multimodal_dim", "hidden"], False),
])
def test_small_by_construction_rule(shape: list[str], small: bool) -> None:
    assert (small_by_construction(shape, load_rules().cost) is not None) is small


def test_judged_sets_severity_from_the_verdict() -> None:
    f = Finding("CF101", "n", "error", "r", "a.py", 1, 1, 1, "f", "e", "m")
    noop = Cost((), None, None, "", "", None, "", "a.py:3", "no-op", "no-op: buffer declared torch.float32 at a.py:3")
    tiny = Cost((), None, None, "", "", None, "", "a.py:3", "tiny", "small by construction: [c] has one free dimension")
    cond = Cost((), None, None, "", "", None, "", "a.py:3", "", "no-op when kv_cache_dtype == q.dtype")
    assert (judged(f, noop).severity, judged(f, noop).message) == ("info", f"m ({noop.note})")
    assert (judged(f, tiny).severity, judged(f, tiny).message) == ("warning", f"m ({tiny.note})")
    assert (judged(f, cond).severity, judged(f, cond).message, judged(f, cond).cost) == ("error", "m", cond)
    assert judged(f, None) is f
    info = Finding("CF103", "n", "info", "r", "a.py", 1, 1, 1, "f", "e", "m")
    assert judged(info, tiny).severity == "info" and judged(info, tiny).message == "m"


def test_cost_tiny_section_is_validated(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text("cost:\n  tiny:\n    max_bytes: -1\n    smalldims: [x]\n")
    _, errors = validate([tmp_path])
    text = "\n".join(str(e) for e in errors)
    assert "cost.tiny.max_bytes" in text and "cost.tiny.smalldims" in text
    (tmp_path / "r.yaml").write_text("cost:\n  tiny: {max_bytes: 10, max_literal: 2, small_dims: [\"*heads*\"]}\n")
    spec = load_rules([tmp_path]).cost
    assert (spec.tiny_max_bytes, spec.tiny_max_literal, spec.small_dims) == (10.0, 2.0, ("*heads*",))


def test_verdicts_are_carried_with_the_costs(tmp_path: Path) -> None:
    """A warm scan of an unchanged tree reads the costs back and judges them again: the same severities."""
    first = _scan(tmp=tmp_path)
    again = _scan(tmp=tmp_path)
    assert [(f["path"], f["line"], f["severity"], f["message"], f["cost"]) for f in again["findings"]] == [
        (f["path"], f["line"], f["severity"], f["message"], f["cost"]) for f in first["findings"]]
    assert any(f["severity"] == "info" for f in again["findings"] if QUIET in f["path"])


def test_cost_reads_the_buffer_off_provenances_walk() -> None:
    """Issue 33: one walk back. The cost stage names the buffer provenance's walk ended at (its Trail: the
    steps, then ``self.kv_buffer``), with the index and the dtype view the walk stepped through."""
    from castfind.analysis.provenance import Origin, Provenance

    src = (b"import torch\n"
           b"class Pool:\n"
           b"    def __init__(self, n):\n"
           b"        self.kv_buffer = [torch.zeros((n, 8), dtype=torch.uint8) for _ in range(4)]\n"
           b"    def step(self, i: int, q):\n"
           b"        kv = self.kv_buffer[i].view(torch.float8_e4m3fn)\n"
           b"        x = kv.mT\n"
           b"        return x.to(q.dtype)\n")
    facts = extract_source(src, "servekit.toy", "servekit/toy.py", False)
    cast = next(c for c in facts.casts if c.method == "to")
    rules = load_rules()
    got = Provenance(rules).origin_or_stop(facts, cast.scope, cast.receiver, cast.line)
    assert isinstance(got, Origin) and got.path == "self.kv_buffer"
    assert [s.kind for s in got.trail.steps] == ["name", "view-attribute", "name", "view", "index"]
    assert got.trail.end is not None and got.trail.line == 6

    class Lookup:
        def definitions(self, name: str):
            return [(facts, d) for d in facts.definitions if d.name == name]

        def facts(self, root: str, path: str):
            return facts

    finding = Finding("CF101", "x", "error", "r", "servekit/toy.py", cast.line, cast.line, cast.column,
                      cast.scope, "x.to(q.dtype)", "")
    cost = CostModel(rules, Lookup(), Bindings()).cost(finding)
    assert cost is not None and cost.holder == "Pool.kv_buffer"  # the buffer the walk ended at, declared ×4
    assert cost.src_dtype == "torch.float8_e4m3fn"  # the walk's .view(dtype) step, not the declared uint8
    assert cost.shape == ("n", "8") and cost.per_step.startswith("4 * ")  # [i] of a per-layer list: ×4 per step


# --------------------------------------------------------------------------- know the buffer (quietkit/shapes.py)

def test_a_weight_handed_to_a_helper_is_sized_by_the_module_it_belongs_to(tmp_path: Path) -> None:
    """`forward` hands `self.conv.weight` (a parallel linear built with keywords, weight [channels, taps]) to
    `_mix`: small, a warning; the same shape of hand-off of `self.proj.weight` ([inter, hidden]) stays an error."""
    doc = _scan(tmp=tmp_path)
    taps = _at(doc, "shapes.py", 34)
    assert taps["severity"] == "warning" and taps["cost"]["verdict"] == "tiny"
    assert taps["cost"]["shape"] == ["channels", "conv_kernel_size"]
    proj = _at(doc, "shapes.py", 37)
    assert proj["severity"] == "error" and proj["cost"]["shape"] == ["inter", "hidden"]


def test_conv1d_written_with_keywords_depthwise_is_small_and_full_is_not(tmp_path: Path) -> None:
    doc = _scan(tmp=tmp_path)
    depthwise = _at(doc, "shapes.py", 50)
    assert depthwise["severity"] == "warning" and depthwise["cost"]["shape"] == ["channels", "1", "kernel_size"]
    full = _at(doc, "shapes.py", 51)
    assert full["severity"] == "error" and full["cost"]["shape"] == ["out_channels", "channels", "3"]


def test_a_weight_built_in_the_model_dtype_cast_to_an_activation_dtype_is_a_noop(tmp_path: Path) -> None:
    """`nn.Linear(...)` without dtype= is in the model's dtype (the rules' `default_dtype: activation_dtype`), and so
    is `out`: `.to(out.dtype)` returns the weight itself. An fp8 weight cast the same way is a real conversion."""
    doc = _scan(tmp=tmp_path)
    for line in (66, 67):
        f = _at(doc, "shapes.py", line)
        assert f["severity"] == "info" and f["cost"]["verdict"] == "no-op", line
        assert "declared without dtype=" in f["cost"]["note"]
    fp8 = _at(doc, "shapes.py", 68)
    assert fp8["severity"] == "error" and fp8["cost"]["verdict"] == ""
    # Bound by hand to another dtype, the convention no longer decides it.
    doc = _scan("--set", "default_dtype=torch.float32", tmp=tmp_path)
    assert _at(doc, "shapes.py", 66)["severity"] == "error"
