"""Issue 35 items 4 and 5: a number for every cast on the deployment's path (a weight sharded by --tp, a getter
several pools define as a range) and the per-step table in text, Markdown and JSON, with a trace beside it
(fixtures/deploy_configs/minikit, a miniature engine written for these tests)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from castfind import cli
from castfind.analysis.cost import step_table
from castfind.core.types import Cost, Finding
from tests.support import REPO

FIX = REPO / "fixtures" / "deploy_configs"
KIT = FIX / "minikit"
runner = CliRunner()
MiB = 1024 * 1024
#: The sizes of a small deployment: 1,000 token slots, 4 layers, both pools' dimensions, an FP8 cache and a BF16 model.
SIZES = ["--set", "size=1000", "--set", "layer_num=4", "--set", "head_num=8", "--set", "head_dim=128",
         "--set", "kv_lora_rank=512", "--set", "qk_rope_head_dim=64", "--set", "hidden_size=4096",
         "--set", "intermediate_size=14336", "--kv-cache-dtype", "fp8_e4m3", "--set", "activation_dtype=bfloat16"]
WEIGHT = 14336 * 4096 * (1 + 2)  # [intermediate // tp, hidden], FP8 read, BF16 written
LATENT = 4 * 1001 * 1 * 576 * (1 + 2)  # 4 layers of [size + 1, 1, 512 + 64]
PER_HEAD = 4 * 1001 * 8 * 128 * (1 + 2)  # 4 layers of [size + 1, 8, 128]


def _scan(tmp: Path, *args: str, fmt: tuple[str, ...] = ("--json",)) -> str:
    r = runner.invoke(cli.app, ["scan", str(KIT), "--cache-dir", str(tmp / "cache"), *fmt, *args])
    assert r.exit_code == 1, r.output  # the two errors
    return r.stdout


def _findings(doc: dict) -> dict[int, dict]:
    return {f["line"]: f for f in doc["findings"]}


def test_configs_are_hugging_face_style_with_the_sizes_the_runs_bind() -> None:
    ds = json.loads((FIX / "deepseek_v3_like.json").read_text())
    llama = json.loads((FIX / "llama3_8b_like.json").read_text())
    assert (ds["architectures"], ds["num_hidden_layers"], ds["kv_lora_rank"], ds["qk_rope_head_dim"]) == (
        ["DeepseekV3ForCausalLM"], 61, 512, 64)
    assert (ds["hidden_size"], ds["n_routed_experts"], ds["moe_intermediate_size"], ds["intermediate_size"]) == (
        7168, 256, 2048, 18432)
    assert (llama["architectures"], llama["num_hidden_layers"], llama["num_key_value_heads"], llama["head_dim"],
            llama["hidden_size"], llama["intermediate_size"]) == (["LlamaForCausalLM"], 32, 8, 128, 4096, 14336)


def test_a_weight_sharded_by_tp_halves_with_tp_2(tmp_path: Path) -> None:
    one = _findings(json.loads(_scan(tmp_path, *SIZES)))[15]["cost"]
    two = _findings(json.loads(_scan(tmp_path, *SIZES, "--tp", "2")))[15]["cost"]
    assert one["value"] == WEIGHT and two["value"] == WEIGHT / 2
    assert two["per_step"] == "(intermediate_size // tp_size) * hidden_size * (1 + 2)"
    assert "value_max" not in two and two["calls_per_step"] == 1


def test_tp_names_stay_unbound_without_a_deployment(tmp_path: Path) -> None:
    """No deployment flag: the scan costs as before (tp_size unbound, no number, no table)."""
    doc = json.loads(_scan(tmp_path))
    cost = _findings(doc)[15]["cost"]
    assert cost["value"] is None and "tp_size" in cost["unbound"]
    assert "step" not in doc["stats"]


def test_a_getter_two_pools_define_is_a_range_over_both(tmp_path: Path) -> None:
    cost = _findings(json.loads(_scan(tmp_path, *SIZES)))[23]["cost"]
    assert (cost["value"], cost["value_max"]) == (LATENT, PER_HEAD)
    assert cost["candidates"] == ["CompressedPool.latent", "PerHeadPool.keys"]
    assert cost["holder"] == "CompressedPool.latent" and cost["calls_per_step"] == 4
    text = _scan(tmp_path, *SIZES, fmt=())
    assert "= 6.6 MiB–11.7 MiB (a range over the candidates)" in text
    assert "[6.6 MiB–11.7 MiB/step]" in text


def test_the_configuration_selects_the_pool_it_sizes(tmp_path: Path) -> None:
    """Without kv_lora_rank (an MHA model) only the per-head pool is sized: one number, no range."""
    sizes = [a for i, a in enumerate(SIZES)
             if not any(x.startswith(("kv_lora_rank", "qk_rope_head_dim")) for x in SIZES[i:i + 2])]
    assert sizes.count("--set") == SIZES.count("--set") - 2
    cost = _findings(json.loads(_scan(tmp_path, *sizes)))[23]["cost"]
    assert cost["value"] == PER_HEAD and "value_max" not in cost and cost["holder"] == "PerHeadPool.keys"


def test_step_table_in_json(tmp_path: Path) -> None:
    step = json.loads(_scan(tmp_path, *SIZES))["stats"]["step"]
    assert [(r["line"], r["bytes_per_step"], r["bytes_per_step_max"], r["calls_per_step"]) for r in step["rows"]] == [
        (15, WEIGHT, None, 1), (23, LATENT, PER_HEAD, 4)]
    assert (step["total"], step["total_max"], step["unnumbered"]) == (WEIGHT + LATENT, WEIGHT + PER_HEAD, 0)
    assert [round(r["share"], 4) for r in step["rows"]] == [round(WEIGHT / (WEIGHT + LATENT), 4),
                                                             round(LATENT / (WEIGHT + LATENT), 4)]
    assert step["rows"][0]["measured_calls_per_step"] is None and step["rows"][0]["check"] == ""
    assert [r["holder"] for r in step["rows"]] == ["ShardedUpProjection.weight", "CompressedPool.latent / PerHeadPool.keys"]


def test_step_table_in_text_after_the_findings(tmp_path: Path) -> None:
    text = _scan(tmp_path, *SIZES, fmt=())
    table = text.split("per decode step (static cost of each reported cast):\n")[1].split("\n\n")[0].splitlines()
    assert text.index("per decode step") > text.index("runner.py:23:16: CF101")
    assert table[0].split() == ["bytes/step", "share", "calls/step", "rule", "location", "function", "buffer"]
    assert table[1].split()[:6] == ["168.0", "MiB", "96.2%", "1", "CF102",
                                    "fixtures/deploy_configs/minikit/runner.py:15"]
    assert table[2].split()[:5] == ["6.6", "MiB–11.7", "MiB", "3.8%", "4"]
    assert table[3].strip() == "total 174.6 MiB–179.7 MiB per step over 2 casts"


def test_step_table_in_markdown(tmp_path: Path) -> None:
    md = _scan(tmp_path, *SIZES, fmt=("--format", "markdown"))
    part = md.split("#### per decode step\n\n")[1].split("\n\n")
    rows = part[0].splitlines()
    assert rows[0] == "| bytes/step | share | calls/step | rule | location | function | buffer |"
    assert rows[2].startswith("| 168.0 MiB | 96.2% | 1 | CF102 | `fixtures/deploy_configs/minikit/runner.py:15` |")
    assert rows[3].startswith("| 6.6 MiB–11.7 MiB | 3.8% | 4 | CF101 |")
    assert part[1] == "total 174.6 MiB–179.7 MiB per step over 2 casts"


def test_no_table_without_a_deployment_flag(tmp_path: Path) -> None:
    assert "per decode step" not in _scan(tmp_path, fmt=())
    assert "per decode step" not in _scan(tmp_path, fmt=("--format", "markdown"))


def _trace(path: Path, calls: int, steps: int, shape: list[int]) -> Path:
    header = {"castfind_trace": 1, "torch": "2.13.0", "devices": ["cpu"], "wall_s": 1.0, "steps": steps, "source": "t"}
    numel = 1
    for n in shape:
        numel *= n
    site = {"path": str(KIT / "runner.py"), "line": 23, "function": "forward_decode", "op": "aten::_to_copy",
            "src_dtype": "float8_e4m3fn", "dst_dtype": "bfloat16", "shape": shape, "device": "cuda:0",
            "calls": calls, "bytes_per_call": numel * 3, "steps": steps}
    path.write_text("\n".join(json.dumps(r) for r in (header, site)) + "\n")
    return path


def test_step_table_puts_measured_beside_predicted_with_a_trace(tmp_path: Path) -> None:
    """A trace of 3 steps that cast the latent pool 12 times: 4 calls and the static bytes per step, agreeing."""
    trace = _trace(tmp_path / "t.jsonl", 12, 3, [1001, 1, 576])
    doc = json.loads(_scan(tmp_path, *SIZES, "--trace", str(trace)))
    row = next(r for r in doc["stats"]["step"]["rows"] if r["line"] == 23)
    assert (row["calls_per_step"], row["measured_calls_per_step"]) == (4, 4)
    assert row["measured_bytes_per_step"] == LATENT == row["bytes_per_step"] and row["check"] == "agrees"
    text = _scan(tmp_path, *SIZES, "--trace", str(trace), fmt=())
    table = text.split("per decode step (static cost of each reported cast):\n")[1].splitlines()
    assert "measured calls/step  measured bytes/step  static vs measured" in table[0]
    latent = next(line for line in table if "runner.py:23" in line)
    assert latent.split()[-4:] == ["4", "6.6", "MiB", "agrees"]
    md = _scan(tmp_path, *SIZES, "--trace", str(trace), fmt=("--format", "markdown"))
    assert "| 6.6 MiB–11.7 MiB | 3.8% | 4 | CF101 |" in md and md.count("| 4 | 6.6 MiB | agrees |") == 1


def test_a_trace_with_a_different_count_shows_both() -> None:
    """step_table over findings: the measured calls per step beside the predicted, unequal when they differ."""
    from castfind.core.types import CostCheck, Runtime
    cost = Cost(("n",), "torch.float8_e4m3fn", "torch.bfloat16", "n * (1 + 2)", "4 * n * (1 + 2)", 300.0,
                "P.buf", calls=4.0, check=CostCheck("agrees"))
    rt = Runtime(calls=30, shape=(100,), src_dtype="float8_e4m3fn", dst_dtype="bfloat16", bytes_per_call=300,
                 bytes_total=9000, calls_per_step=10.0)
    f = Finding("CF101", "whole-kv-cache-cast", "error", "/r", "a.py", 3, 3, 1, "A.f", "b.to(x)", "m",
                cost=cost, runtime=rt)
    unnumbered = replace(f, path="b.py", severity="warning", runtime=None,
                         cost=Cost(("n",), None, None, "n", "n", None, "P.other"))
    info = replace(f, path="c.py", severity="info")  # a no-op cast is no row
    table = step_table([unnumbered, f, info])
    (row,) = table.rows
    assert (row.calls, row.measured_calls, row.bytes, row.measured_bytes) == (4.0, 10.0, 300.0, 3000.0)
    assert (table.total, table.total_max, table.unnumbered) == (300.0, None, 1)


@pytest.mark.parametrize("bad", ["0", "-2", "x"])
def test_a_bad_tp_is_one_line(tmp_path: Path, bad: str) -> None:
    r = runner.invoke(cli.app, ["scan", str(KIT), "--cache-dir", str(tmp_path / "c"), "--tp", bad])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "--tp" in r.output


def test_optional_config_fields_and_the_default_dtype_evaluate() -> None:
    """A router's dtype written ``torch.float32 if getattr(config, "router_fp32", False) else
    torch.get_default_dtype()``: the default dtype (the model's) unless the config sets the field."""
    from castfind.analysis.cost import Bindings, Evaluator
    text = "torch.float32 if getattr(config, 'router_fp32', False) else torch.get_default_dtype()"
    model = {"default_dtype": "activation_dtype", "activation_dtype": "torch.bfloat16"}
    assert Evaluator(Bindings(model)).value(text) == "torch.bfloat16"
    assert Evaluator(Bindings({**model, "config.router_fp32": "True"})).value(text) == "torch.float32"
    assert Evaluator(Bindings(model)).number("getattr(config, 'n_group', 1) * 8") == 8


def test_a_getter_that_returns_one_tensor_is_sized_whole(tmp_path: Path) -> None:
    """relaykit: one pool indexes its per-layer list by the layer argument, the other returns its lone staging
    tensor whatever the argument; the range runs from the whole staging tensor to every layer's buffer."""
    r = runner.invoke(cli.app, ["scan", str(FIX / "relaykit"), "--cache-dir", str(tmp_path / "c"), "--json",
                                "--set", "size=100", "--set", "width=64", "--set", "layer_num=3",
                                "--kv-cache-dtype", "fp8_e4m3", "--set", "activation_dtype=bfloat16"])
    (f,) = json.loads(r.stdout)["findings"]
    cost = f["cost"]
    assert (cost["value"], cost["value_max"]) == (100 * 64 * 3, 3 * 100 * 64 * 3)
    assert cost["shape"] == ["size", "width"] and cost["candidates"] == ["RelayPool.staging", "LayeredPool.buffers"]
    assert "calls_per_step" not in cost  # once for the staging tensor, 3 times for the layers: no one count
    # A third pool sized by a helper castfind does not evaluate is named, not dropped silently, nor guessed.
    assert cost["note"].endswith("; 1 more not sized with the bound names (SpillPool.spill)")


def test_no_pool_is_picked_when_none_is_sized(tmp_path: Path) -> None:
    """Without the pools' size (no --kv-tokens, no --set size) neither candidate is sized: no cost, no guess; the
    row is left out of the table."""
    sizes = [a for i, a in enumerate(SIZES) if not any(x.startswith("size=") for x in SIZES[i:i + 2])]
    doc = json.loads(_scan(tmp_path, *sizes))
    assert _findings(doc)[23]["cost"] is None
    assert [r["line"] for r in doc["stats"]["step"]["rows"]] == [15] and doc["stats"]["step"]["unnumbered"] == 0
