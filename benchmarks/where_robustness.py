"""Robustness run for ``castfind where`` on real codebases (a benchmark, not a test).

For each codebase, ``where`` of 20 public names, each as its own process (``python -m castfind
where NAME --json``): once cold (an empty cache of its own) and then ``--warm`` times warm (the same
cache again; a name's warm time is the median of those runs, as the issue's "median of 5, whole
process" asks; castfind's bytecode cached, as an installed castfind has it). Prints, per codebase, the
slowest cold and warm lookup, the names that found nothing, and the median warm time; each cold lookup is
printed with its CPU time (user + system, the process and its workers) and the machine's 1-minute load
average as it started; ``--json FILE`` writes every measurement.

The codebases: sglang+flashinfer and transformers (``make corpus``), torch's installed sources, and jax
(an optional part of ``scripts/fetch_corpus.py``, fetched into the corpus folder when missing).
``--load`` runs a cold ``castfind scan`` of the sglang wheel beside the lookups the whole time (started
again whenever it ends), as the bound "10 s cold, on two loaded cores" is measured.

Usage: python benchmarks/where_robustness.py [--corpus .corpus] [--torch PATH] [--names N] [--warm N] [--load]
       [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
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
    "jax": [
        "jax.numpy.einsum", "jax.jit", "jax.lax.scan", "jax.grad", "jax.vmap", "jax.random.normal",
        "jax.random.PRNGKey", "jax.nn.relu", "jax.nn.softmax", "jax.lax.cond", "jax.lax.fori_loop",
        "jax.tree_util.tree_map", "jax.device_put", "jax.numpy.zeros", "jax.scipy.special.logsumexp",
        "jax.value_and_grad", "jax.checkpoint", "jax.sharding.NamedSharding", "jax.numpy.matmul",
        "jax.experimental.pallas.pallas_call",
    ],
}


def _roots(corpus: Path, torch_dir: Path) -> dict[str, list[Path]]:
    return {
        "sglang+flashinfer": [corpus / "sglang", corpus / "flashinfer"],
        "transformers": [corpus / "transformers"],
        "torch": [torch_dir],
        "jax": [corpus / "jax"],
    }


def _fetch_optional(corpus: Path, name: str) -> None:
    """Fetch an optional part of the corpus (``scripts/fetch_corpus.py --optional NAME``) when missing."""
    if (corpus / name / ".complete").exists():
        return
    sys.path.insert(0, str(ROOT / "scripts"))
    from fetch_corpus import OPTIONAL, fetch

    fetch(corpus, {name: OPTIONAL[name]})


class _Load:
    """A cold ``castfind scan`` of ``root`` (no cache) running beside the lookups, started again whenever
    it ends, until :meth:`stop`."""

    def __init__(self, root: Path) -> None:
        self.args = [sys.executable, "-m", "castfind", "scan", str(root), "--no-cache", "--json"]
        self.env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.poll()

    def poll(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         env=self.env)
            self.runs += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


def _where(name: str, roots: list[Path], cache: Path) -> tuple[float, int, int, bool, float]:
    """(seconds, exit code, definitions found, cut: the time budget left something unsearched or
    unfollowed, CPU seconds) for one ``where`` process. The CPU time (user + system, the process and
    its workers) is what the load of the machine changes least."""
    args = [sys.executable, "-m", "castfind", "where", name, "--json", "--cache-dir", str(cache),
            "--no-follow-installed"]
    for r in roots:
        args += ["--root", str(r)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # castfind's bytecode is cached, as an installed castfind has it (pip compiles it): with
    # PYTHONDONTWRITEBYTECODE set (this project's machines set it) every run compiled castfind's modules again,
    # 0.1 s of CPU and more of wall time per warm lookup that no user pays.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    dt = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        doc = json.loads(p.stdout)
        found = len(doc["definitions"])
        cut = any("time budget" in u["reason"] for u in doc["unresolved"])
    except (ValueError, KeyError, TypeError):
        found, cut = 0, False
    return dt, p.returncode, found, cut, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=ROOT / ".corpus")
    ap.add_argument("--torch", type=Path, default=None, help="torch's installed package folder")
    ap.add_argument("--names", type=int, default=20, help="names per codebase (the first N)")
    ap.add_argument("--only", default=None, help="one codebase: " + ", ".join(NAMES))
    ap.add_argument("--warm", type=int, default=5, help="warm runs per name; the median is reported")
    ap.add_argument("--load", action="store_true", help="a cold scan of the sglang wheel runs beside the lookups")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    if a.only in (None, "jax"):
        _fetch_optional(a.corpus, "jax")
    load = _Load(a.corpus / "sglang") if a.load else None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # killed: the scan beside it is stopped too
    try:
        _run(a, load)
    finally:
        if load is not None:
            load.stop()
            print(f"load: {load.runs} cold scan(s) of {a.corpus / 'sglang'} started beside the lookups")


def _run(a: argparse.Namespace, load: _Load | None) -> None:
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
                if load is not None:
                    load.poll()
                load_avg = os.getloadavg()[0]  # the machine's 1-minute load as the cold lookup starts
                cold = _where(name, roots, Path(d))
                warms = [_where(name, roots, Path(d)) for _ in range(max(1, a.warm))]
            warm = (statistics.median(w[0] for w in warms), warms[-1][1], warms[-1][2])
            warm_cpu = statistics.median(w[4] for w in warms)
            rows.append({"codebase": base, "name": name, "cold_s": cold[0], "warm_s": warm[0],
                         "warm_runs_s": [w[0] for w in warms], "rc": warm[1], "definitions": warm[2],
                         "cold_cut": cold[3], "cold_cpu_s": cold[4], "warm_cpu_s": warm_cpu, "load": load_avg})
            print(f"{base:18} {name:60} cold {cold[0]:6.2f}s{' (cut)' if cold[3] else '      '} "
                  f"(cpu {cold[4]:5.2f}s, load {load_avg:4.1f})  "
                  f"warm {warm[0]:5.2f}s (max {max(w[0] for w in warms):5.2f}s, cpu {warm_cpu:4.2f}s)  "
                  f"defs {warm[2]}", flush=True)
        mine = [r for r in rows if r["codebase"] == base]
        if mine:
            c = max(mine, key=lambda r: r["cold_s"])
            w = max(mine, key=lambda r: r["warm_s"])
            missing = [r["name"] for r in mine if not r["definitions"]]
            over = sum(1 for r in mine if r["warm_s"] > 0.3)
            runs = [t for r in mine for t in r["warm_runs_s"]]
            print(f"== {base}: slowest cold {c['cold_s']:.2f}s ({c['name']}, cpu {c['cold_cpu_s']:.2f}s, load "
                  f"{c['load']:.1f}), cold CPU max {max(r['cold_cpu_s'] for r in mine):.2f}s, load "
                  f"{min(r['load'] for r in mine):.1f}-{max(r['load'] for r in mine):.1f}, median cold "
                  f"{statistics.median(r['cold_s'] for r in mine):.2f}s, slowest warm {w['warm_s']:.2f}s "
                  f"({w['name']}), median warm {statistics.median(r['warm_s'] for r in mine):.2f}s, "
                  f"slowest warm run {max(runs):.2f}s, warm over 0.3 s: {over} of {len(mine)}, "
                  f"warm CPU median {statistics.median(r['warm_cpu_s'] for r in mine):.2f}s max "
                  f"{max(r['warm_cpu_s'] for r in mine):.2f}s, "
                  f"cold cut by the time budget: {sum(1 for r in mine if r['cold_cut'])}; "
                  f"not found: {missing or 'none'}")
        print(f"load average now: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        if a.json:  # after each codebase: a run stopped part way keeps what it measured
            a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
