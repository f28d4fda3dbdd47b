"""Issue 35: every error on the deployment's path has a number. Two general gaps, on fixtures/deploy_configs/batchkit
(an attention block whose ragged-prefill helper upcasts the keys it is handed; its own model hands it only tensors made
for the batch, a draft model, registered beside it, hands it a layer's whole key pool):

* a parameter's cast that every call on the path hands a fresh per-call tensor (``torch.cat``, an arithmetic result,
  rows of the batch) is per-batch: a warning that says why, out of the step table (castfind/analysis/handed.py);
  a cast or clone of a held buffer handed in is still that buffer; a call off the model's path hands nothing;
* a cast whose dtypes the deployment's bindings make equal is a no-op of 0 B: an info, out of the step table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from castfind import cli
from tests.support import REPO

KIT = REPO / "fixtures" / "deploy_configs" / "batchkit"
CONFIG = KIT / "config.json"
MODEL = ("--model-config", str(CONFIG), "--platform", "cuda", "--kv-tokens", "512")
#: No model config: the draft model's call counts too; the pool's sizes bound by hand.
SIZES = ("--platform", "cuda", "--kv-tokens", "512", "--set", "head_num=4", "--set", "head_dim=64",
         "--set", "layer_num=6", "--set", "activation_dtype=bfloat16")
LINE = 17  # keys = keys.to(q.dtype) in PocketAttention.ragged_prefill
runner = CliRunner()


def _doc(tmp: Path, *args: str, root: Path = KIT) -> dict:
    r = runner.invoke(cli.app, ["scan", str(root), "--cache-dir", str(tmp / "cache"), "--json", *args])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def _cast(doc: dict) -> dict:
    (f,) = [f for f in doc["findings"] if f["path"].endswith("pocket.py") and f["line"] == LINE]
    return f


def _kit(tmp: Path, old: str, new: str) -> Path:
    kit = tmp / "batchkit"
    shutil.copytree(KIT, kit)
    pocket = kit / "pocket.py"
    assert old in pocket.read_text()
    pocket.write_text(pocket.read_text().replace(old, new))
    return kit


def test_keys_made_for_the_batch_on_every_call_are_per_batch(tmp_path: Path) -> None:
    doc = _doc(tmp_path, *MODEL)
    f = _cast(doc)
    assert (f["rule"], f["severity"], f["cost"]["verdict"], f["cost"]["value"]) == ("CF101", "warning", "per-batch", None)
    assert f["cost"]["note"] == (
        "per-batch: keys is a parameter every call on the path hands a tensor made for that call; "
        "pocket.py:22 PocketAttention.forward hands joined, a tensor torch.cat() makes on every call; "
        "pocket.py:23 PocketAttention.forward hands k * self.scale, an arithmetic result made on every call; "
        "pocket.py:24 PocketAttention.forward hands batch.new_keys[:batch.extend_len], rows of the batch "
        "(batch-slice: [:batch.extend_len] in batch.new_keys[:batch.extend_len])")
    assert f["message"].endswith(f"({f['cost']['note']})")
    step = doc["stats"]["step"]
    assert (step["rows"], step["total"], step["unnumbered"]) == ([], 0, 0)  # not a row, not a cast without a number


def test_without_the_model_path_the_drafts_whole_pool_is_handed_in(tmp_path: Path) -> None:
    """No model config: the draft model's call is not known to be off the path, and it hands the whole pool."""
    f = _cast(_doc(tmp_path, *SIZES, "--kv-cache-dtype", "fp8_e4m3"))
    assert f["severity"] == "error" and f["cost"]["verdict"] == ""
    assert (f["cost"]["holder"], f["cost"]["value"]) == ("SlotPool.k_buffer", 6 * 512 * 4 * 64 * (1 + 2))


@pytest.mark.parametrize("copy", [".clone()", ".to(torch.bfloat16)"])
def test_a_copy_of_a_held_buffer_is_still_that_buffer(tmp_path: Path, copy: str) -> None:
    kit = _kit(tmp_path, "out = self.ragged_prefill(q, joined)",
               f"out = self.ragged_prefill(q, batch.pool.get_key_buffer(self.layer_id){copy})")
    f = _cast(_doc(tmp_path, *MODEL, "--kv-cache-dtype", "fp8_e4m3", root=kit))
    assert f["severity"] == "error" and f["cost"]["verdict"] == "" and f["cost"]["holder"] == "SlotPool.k_buffer"
    assert f["cost"]["value"] == 6 * 512 * 4 * 64 * (1 + 2)


SCALED = "    def _scaled(self, q, scaled):\n        return self.ragged_prefill(q, scaled.view(-1, 64).to(q.dtype))\n\n"


@pytest.mark.parametrize("edits", [
    # a cast of a tensor made for the call is still one
    [("torch.cat([batch.prefix_keys, k], dim=0)", "torch.cat([batch.prefix_keys, k], dim=0).to(torch.bfloat16)")],
    # a cast of the caller's own parameter is that parameter, followed to the caller's calls (an arithmetic result)
    [("out = out + self.ragged_prefill(q, k * self.scale)", "out = out + self._scaled(q, k * self.scale)"),
     ("    def forward(self, q, k, batch):", SCALED + "    def forward(self, q, k, batch):")],
], ids=["made-for-the-call", "callers-parameter"])
def test_a_cast_is_read_as_what_it_was_made_from(tmp_path: Path, edits: list[tuple[str, str]]) -> None:
    kit = _kit(tmp_path, *edits[0])
    pocket = kit / "pocket.py"
    for old, new in edits[1:]:
        assert old in pocket.read_text()
        pocket.write_text(pocket.read_text().replace(old, new, 1))
    f = _cast(_doc(tmp_path, *MODEL, "--kv-cache-dtype", "fp8_e4m3", root=kit))
    assert (f["severity"], f["cost"]["verdict"]) == ("warning", "per-batch"), f["cost"]


def test_a_join_with_a_held_buffer_is_not_made_for_the_batch(tmp_path: Path) -> None:
    kit = _kit(tmp_path, "torch.cat([batch.prefix_keys, k], dim=0)",
               "torch.cat([batch.pool.get_key_buffer(self.layer_id), k], dim=0)")
    f = _cast(_doc(tmp_path, *MODEL, root=kit))
    assert f["severity"] == "error" and f["cost"]["verdict"] == ""
    assert "pocket.py:22 PocketAttention.forward hands joined, the result of a call (.cat)" in f["cost"]["note"]


def test_dtypes_the_bindings_make_equal_are_a_no_op_of_zero_bytes(tmp_path: Path) -> None:
    """The pool holds --kv-cache-dtype (auto: the model's bf16) and the cast goes to the activations' dtype."""
    doc = _doc(tmp_path, *SIZES)
    f = _cast(doc)
    assert (f["severity"], f["cost"]["verdict"], f["cost"]["value"]) == ("info", "no-op", 0)
    assert f["cost"]["note"] == ("no-op with the bound dtypes: kv_cache_dtype == q.dtype (torch.bfloat16); "
                                 "handed to keys by its callers")
    assert (doc["stats"]["step"]["rows"], doc["stats"]["step"]["unnumbered"]) == ([], 0)
    text = runner.invoke(cli.app, ["scan", str(KIT), "--cache-dir", str(tmp_path / "cache"), *SIZES]).stdout
    assert "0 errors, 0 warnings, 1 info" in text and "total 0 B per step over 0 casts\n" in text


def test_without_a_deployment_nothing_changes(tmp_path: Path) -> None:
    f = _cast(_doc(tmp_path))
    assert f["severity"] == "error" and f["cost"] is None
