"""Robustness run for ``castfind where`` on real codebases (a benchmark, not a test).

For each codebase, ``where`` of 20 public names, each as its own process (``python -m castfind
where NAME --json``): once cold (an empty cache of its own) and then ``--warm`` times warm (the same
cache again; a name's warm time is the median of those runs, as the issue's "median of 5, whole
process" asks). Prints, per codebase, the slowest cold and warm lookup, the names that found nothing,
and the median warm time; ``--json FILE`` writes every measurement.

Usage: python benchmarks/where_robustness.py [--corpus .corpus] [--torch PATH] [--names N] [--warm N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NAMES = {
    "sglang+flashinfer": [
        "flashinfer.fused_moe.cutlass_fused_moe", "flashinfer.fused_moe.CuteDslNvfp4Runner",
        "flashinfer.fused_moe.prims_ts_bf16_moe", "flashinfer.mla.SparseMLASm120Wrapper",
        "flashinfer.mla.cake_dsv4_workspace_layout", "flashinfer.BatchPrefillWithPagedKVCacheWrapper",
        "flashinfer.sampling.top_k_top_p_sampling_from_logits", "flashinfer.norm.rmsnorm",
        "flashinfer.activation.silu_and_mul", "flashinfer.page.append_paged_kv_cache",
        "sglang.srt.mem_cache.memory_pool.MHATokenToKVPool", "sglang.srt.layers.linear.ColumnParallelLinear",
        "sglang.srt.layers.moe.fused_moe_triton.layer.FusedMoE", "sglang.srt.model_executor.model_runner.ModelRunner",
        "sglang.srt.managers.scheduler.Scheduler", "sglang.srt.layers.layernorm.RMSNorm",
        "sglang.srt.layers.rotary_embedding.get_rope", "sglang.srt.layers.sampler.Sampler",
        "sglang.srt.server_args.ServerArgs", "sglang.srt.entrypoints.engine.Engine",
    ],
    "transformers": [
        "transformers.AutoModelForCausalLM", "transformers.LlamaForCausalLM", "transformers.AutoTokenizer",
        "transformers.PreTrainedModel", "transformers.Trainer", "transformers.pipeline",
        "transformers.GenerationConfig", "transformers.BitsAndBytesConfig", "transformers.DynamicCache",
        "transformers.AutoConfig", "transformers.MistralForCausalLM", "transformers.Qwen2ForCausalLM",
        "transformers.BertModel", "transformers.T5ForConditionalGeneration", "transformers.TrainingArguments",
        "transformers.PreTrainedTokenizerFast", "transformers.set_seed", "transformers.LogitsProcessorList",
        "transformers.StoppingCriteria", "transformers.AutoProcessor",
    ],
    "torch": [
        "torch.nn.Linear", "torch.nn.functional.scaled_dot_product_attention", "torch.compile",
        "torch.autograd.grad", "torch.utils.data.DataLoader", "torch.optim.AdamW",
        "torch.distributed.all_reduce", "torch.fx.symbolic_trace", "torch.nn.Module",
        "torch.cuda.synchronize", "torch.export.export", "torch.nn.functional.softmax",
        "torch.nn.parallel.DistributedDataParallel", "torch.amp.autocast", "torch.jit.script",
        "torch.nn.init.xavier_uniform_", "torch.utils.checkpoint.checkpoint", "torch.profiler.profile",
        "torch.library.custom_op", "torch.nn.attention.sdpa_kernel",
    ],
}


def _roots(corpus: Path, torch_dir: Path) -> dict[str, list[Path]]:
    return {
        "sglang+flashinfer": [corpus / "sglang", corpus / "flashinfer"],
        "transformers": [corpus / "transformers"],
        "torch": [torch_dir],
    }


def _where(name: str, roots: list[Path], cache: Path) -> tuple[float, int, int]:
    """(seconds, exit code, definitions found) for one ``where`` process."""
    args = [sys.executable, "-m", "castfind", "where", name, "--json", "--cache-dir", str(cache),
            "--no-follow-installed"]
    for r in roots:
        args += ["--root", str(r)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t = time.perf_counter()
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    dt = time.perf_counter() - t
    try:
        found = len(json.loads(p.stdout)["definitions"])
    except (ValueError, KeyError):
        found = 0
    return dt, p.returncode, found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=ROOT / ".corpus")
    ap.add_argument("--torch", type=Path, default=None, help="torch's installed package folder")
    ap.add_argument("--names", type=int, default=20, help="names per codebase (the first N)")
    ap.add_argument("--only", default=None, help="one codebase: " + ", ".join(NAMES))
    ap.add_argument("--warm", type=int, default=5, help="warm runs per name; the median is reported")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    torch_dir = a.torch
    if torch_dir is None:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        torch_dir = Path(spec.origin).parent if spec and spec.origin else Path("torch")
    rows = []
    for base, roots in _roots(a.corpus, torch_dir).items():
        if a.only and base != a.only:
            continue
        if not all(r.exists() for r in roots):
            print(f"{base}: skipped (missing {', '.join(str(r) for r in roots if not r.exists())})")
            continue
        for name in NAMES[base][: a.names]:
            with tempfile.TemporaryDirectory() as d:
                cold = _where(name, roots, Path(d))
                warms = [_where(name, roots, Path(d)) for _ in range(max(1, a.warm))]
            warm = (statistics.median(w[0] for w in warms), warms[-1][1], warms[-1][2])
            rows.append({"codebase": base, "name": name, "cold_s": cold[0], "warm_s": warm[0],
                         "warm_runs_s": [w[0] for w in warms], "rc": warm[1], "definitions": warm[2]})
            print(f"{base:18} {name:60} cold {cold[0]:6.2f}s  warm {warm[0]:5.2f}s  defs {warm[2]}", flush=True)
        mine = [r for r in rows if r["codebase"] == base]
        if mine:
            c = max(mine, key=lambda r: r["cold_s"])
            w = max(mine, key=lambda r: r["warm_s"])
            missing = [r["name"] for r in mine if not r["definitions"]]
            print(f"== {base}: slowest cold {c['cold_s']:.2f}s ({c['name']}), slowest warm {w['warm_s']:.2f}s "
                  f"({w['name']}), median warm {statistics.median(r['warm_s'] for r in mine):.2f}s; "
                  f"not found: {missing or 'none'}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
