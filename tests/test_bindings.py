"""Cost bindings are sizes and counts: finite, non-negative and at most 2**63-1. A huge, infinite or negative
``--set``, ``--kv-tokens`` or model-config value is a one-line usage error (exit 2), never an OverflowError,
and JSON output stays strict JSON (no Infinity or NaN)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import REPO, run_castfind

FIX = REPO / "fixtures" / "cost"
SETS = ["--set", "head_num=8", "--set", "head_dim=128"]


def _strict(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _one_line_usage_error(r, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("castfind: ") and "internal error" not in line and len(line) < 300, line
    for n in needles:
        assert n in line, line


@pytest.mark.parametrize("value", ["0x" + "f" * 300, "9" * 400, "1e308", "1e999", "-1", "-0.5", "inf", "nan"])
def test_a_set_value_out_of_range_is_a_usage_error(value: str) -> None:
    r = run_castfind("scan", str(FIX), "--no-cache", "--set", f"layer_num={value}", *SETS, "--kv-tokens", "1000")
    _one_line_usage_error(r, "--set layer_num")


def test_a_huge_kv_tokens_is_a_usage_error() -> None:
    r = run_castfind("scan", str(FIX), "--no-cache", "--set", "layer_num=2", *SETS, "--kv-tokens", "9" * 400)
    _one_line_usage_error(r, "--kv-tokens")


def test_a_huge_or_negative_model_config_field_is_a_usage_error(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    for bad in ("9" * 4000, "-61", "1e400"):
        cfg.write_text('{"num_hidden_layers": ' + bad + ', "pad_token_id": -1}')
        r = run_castfind("scan", str(FIX), "--no-cache", "--model-config", str(cfg), "--kv-tokens", "1000")
        _one_line_usage_error(r, "num_hidden_layers")


def test_valid_bindings_give_strict_json_with_a_value() -> None:
    r = run_castfind("scan", str(FIX), "--no-cache", "--json", "--set", "layer_num=32", *SETS, "--kv-tokens", "1000",
                     "--kv-cache-dtype", "fp8_e5m2")
    assert r.returncode == 1, r.stderr
    doc = _strict(r.stdout)
    assert isinstance(doc, dict)
    values = [f["cost"]["value"] for f in doc["findings"] if f.get("cost") and f["cost"]["value"] is not None]
    assert values and all(v >= 0 for v in values)
    assert 32 * (1000 + 1) * 8 * 128 * (1 + 4) in values
