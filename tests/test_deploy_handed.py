"""Issue 35 item 4: a parameter's cast costs what its callers hand in (castfind/analysis/handed.py), on
fixtures/deploy_configs/headkit: a model builds its output head (`ShardedLMHead(vocab, hidden)`) and hands it to a
logits processor, whose `forward` hands it on twice before `head.weight.float()`; the look-alike kernel is handed a
key cache that a helper reserves, an allocation castfind cannot size, and says so."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from castfind import cli
from castfind.read.allocs import allocations
from tests.support import REPO

KIT = REPO / "fixtures" / "deploy_configs" / "headkit"
CONFIG = KIT / "config.json"
DEPLOY = ("--model-config", str(CONFIG), "--platform", "cuda")
runner = CliRunner()
HEAD_LINE, KERNEL_LINE = 32, 40
#: The head's weight, [vocab_size, hidden_size] = [32000, 1024] in the model's bf16 (2 B), written as float32 (4 B).
HEAD = 32000 * 1024 * (2 + 4)


def _scan(tmp: Path, *args: str, root: Path = KIT, fmt: tuple[str, ...] = ("--json",)) -> str:
    r = runner.invoke(cli.app, ["scan", str(root), "--cache-dir", str(tmp / "cache"), *fmt, *args])
    assert r.exit_code == 1, r.output  # the two errors
    return r.stdout


def _costs(tmp: Path, *args: str, root: Path = KIT) -> dict[int, dict | None]:
    doc = json.loads(_scan(tmp, *args, root=root))
    return {f["line"]: f["cost"] for f in doc["findings"] if f["path"].endswith("layers.py")}


def test_the_head_handed_to_the_processor_is_sized_by_the_models_constructor(tmp_path: Path) -> None:
    cost = _costs(tmp_path, *DEPLOY)[HEAD_LINE]
    assert cost is not None
    assert (cost["value"], cost["calls_per_step"], cost["holder"]) == (HEAD, 1, "TinyForCausalLM.lm_head")
    assert cost["shape"] == ["config.vocab_size", "config.hidden_size"] and cost["declared"] == "model.py:13"
    assert cost["note"].endswith("handed to head.weight by its callers") and "value_max" not in cost


def test_the_look_alike_says_why_it_has_no_number(tmp_path: Path) -> None:
    """The kernel's cache is handed in, but reserved by a helper, and then an activation (a cast's result): no
    number, and the cost line says why, call by call."""
    cost = _costs(tmp_path, *DEPLOY)[KERNEL_LINE]
    assert cost is not None and cost["value"] is None and cost["shape"] == []
    assert cost["note"] == ("no number: k_cache is a parameter; TinyForCausalLM.k_cache is handed in, but castfind "
                            "finds no allocation of it it can size; model.py:21 TinyForCausalLM.forward hands "
                            "hidden.view(-1, 64).to(torch.bfloat16), the result of a call (.run) that hands out no "
                            "buffer castfind can size")  # a cast is read as what it was made from: hidden, line 20
    text = _scan(tmp_path, *DEPLOY, fmt=())
    assert f"cost: {cost['note']}\n" in text
    # The head's cast runs only when `self.upcast` (open under these bindings): a row apart, not in the total.
    assert ("total 0 B per step over 0 casts, 187.5 MiB more when the open tests of 1 cast hold (each finding's "
            "'only when' lists them) (1 more costed cast without a number: each cost line lists the unbound names to "
            "bind, or says why there is no buffer to size)") in text
    md = _scan(tmp_path, *DEPLOY, fmt=("--format", "markdown"))
    assert "| no number: k\\_cache is a parameter; TinyForCausalLM.k\\_cache is handed in" in md


def test_the_step_table_has_the_head_and_counts_the_look_alike(tmp_path: Path) -> None:
    step = json.loads(_scan(tmp_path, *DEPLOY))["stats"]["step"]
    assert [(r["line"], r["bytes_per_step"], r["calls_per_step"], r["holder"]) for r in step["rows"]] == [
        (HEAD_LINE, HEAD, 1, "TinyForCausalLM.lm_head")]
    assert step["rows"][0]["only_when"] == ["self.upcast"]
    assert (step["total"], step["conditional"], step["unnumbered"]) == (0, HEAD, 1)


def test_without_a_deployment_a_parameters_cast_costs_as_before(tmp_path: Path) -> None:
    """No deployment flag: no caller is followed, both casts have no cost (as before this mechanism), and an
    embedding-like module's weight cast in its owner is not sized either (it was not before)."""
    kit = tmp_path / "headkit"
    shutil.copytree(KIT, kit)
    model = kit / "model.py"
    model.write_text(model.read_text().replace("        return self.logits_processor(",
                                               "        self.tied = self.lm_head.weight.float()\n"
                                               "        return self.logits_processor("))
    assert _costs(tmp_path, root=kit) == {HEAD_LINE: None, KERNEL_LINE: None}
    doc = json.loads(_scan(tmp_path, root=kit))
    tied = [f for f in doc["findings"] if f["path"].endswith("model.py")]
    assert [(f["line"], f["rule"], f["cost"]) for f in tied] == [(22, "CF102", None)]
    with_deployment = json.loads(_scan(tmp_path, *DEPLOY, root=kit))
    cost = next(f["cost"] for f in with_deployment["findings"] if f["path"].endswith("model.py"))
    assert (cost["value"], cost["holder"]) == (HEAD, "TinyForCausalLM.lm_head")


def _wide(tmp: Path, registered: bool) -> Path:
    """headkit with a second model that hands the processor a head twice as wide (a registered model or not)."""
    kit = tmp / "headkit"
    shutil.copytree(KIT, kit)
    (kit / "wide.py").write_text(
        "from torch import nn\n\nfrom .layers import LogitsHead, ShardedLMHead\n\n\n"
        "class WideForCausalLM(nn.Module):\n"
        "    def __init__(self, config):\n"
        "        super().__init__()\n"
        "        self.lm_head = ShardedLMHead(config.vocab_size, 2 * config.hidden_size)\n"
        "        self.logits_processor = LogitsHead(config)\n\n"
        "    def forward(self, input_ids, positions, batch):\n"
        "        return self.logits_processor(input_ids, self.embed(input_ids), self.lm_head, batch)\n"
        + "\n\nEntryClass = WideForCausalLM\n" * registered)
    return kit


#: A deployment without a model config (so no model path chooses among the models): the sizes bound by hand.
SIZES = ("--platform", "cuda", "--set", "config.vocab_size=32000", "--set", "config.hidden_size=1024",
         "--set", "activation_dtype=bfloat16")


def test_two_heads_of_two_sizes_handed_in_give_a_range(tmp_path: Path) -> None:
    """No model config: either model's call may be this deployment's, so the cost is the range over both heads."""
    cost = _costs(tmp_path, *SIZES, root=_wide(tmp_path, registered=False))[HEAD_LINE]
    assert cost is not None
    assert (cost["value"], cost["value_max"]) == (HEAD, 2 * HEAD)
    assert cost["candidates"] == ["TinyForCausalLM.lm_head", "WideForCausalLM.lm_head"]
    assert "one of 2 buffers handed to head.weight by its callers" in cost["note"]


def test_another_registered_models_call_is_left_out(tmp_path: Path) -> None:
    """The second model is registered too, and the config names the first: the wide head is another model's."""
    kit = _wide(tmp_path, registered=True)
    cost = _costs(tmp_path, *DEPLOY, root=kit)[HEAD_LINE]
    assert cost is not None and (cost["value"], cost["holder"]) == (HEAD, "TinyForCausalLM.lm_head")
    assert "value_max" not in cost
    wide = kit / "config.json"
    wide.write_text(CONFIG.read_text().replace("TinyForCausalLM", "WideForCausalLM"))
    cost = _costs(tmp_path, "--model-config", str(wide), "--platform", "cuda", root=kit)[HEAD_LINE]
    assert cost is not None and (cost["value"], cost["holder"]) == (2 * HEAD, "WideForCausalLM.lm_head")


def test_a_call_that_hides_the_argument_says_so(tmp_path: Path) -> None:
    """The model hands its head among `*args`: castfind cannot tell which argument is the head, and says so."""
    kit = tmp_path / "headkit"
    shutil.copytree(KIT, kit)
    model = kit / "model.py"
    model.write_text(model.read_text().replace("self.logits_processor(input_ids, hidden, self.lm_head, batch)",
                                               "self.logits_processor(*(input_ids, hidden, self.lm_head, batch))"))
    cost = _costs(tmp_path, *DEPLOY, root=kit)[HEAD_LINE]
    assert cost is not None and cost["value"] is None
    assert cost["note"] == ("no number: head.weight is a parameter; model.py:22 passes head in a way castfind cannot "
                            "read (*args or a missing argument)")


def test_embedding_like_constructors_are_read_as_num_by_dim_weights() -> None:
    tree = ast.parse("class M:\n"
                     "    def __init__(self, v, d):\n"
                     "        self.embed = nn.Embedding(v, d)\n"
                     "        self.table = VocabParallelEmbedding(num_embeddings=v, embedding_dim=d)\n"
                     "        self.head = ParallelLMHead(v, d, dtype=torch.bfloat16)\n"
                     "        self.norm = RMSNorm(d)\n")
    got = {a.target: (a.kind, a.shape, a.dtype) for a in allocations(tree) if a.kind != "value"}
    assert got == {"self.embed": ("embedding", ("v", "d"), None), "self.table": ("embedding", ("v", "d"), None),
                   "self.head": ("embedding", ("v", "d"), "torch.bfloat16")}
