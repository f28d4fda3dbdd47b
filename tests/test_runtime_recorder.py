"""The in-process recorder: what it catches, where it says the cast is, and that it always writes."""

from __future__ import annotations

import runpy
import sys

import pytest

torch = pytest.importorskip("torch")

from test_runtime_helpers import BYTES_PER_CALL, DECODE_LOOP, SHAPE, cast_line  # noqa: E402

import castfind  # noqa: E402
from castfind.runtime.trace import read_trace  # noqa: E402


def _run_decode(monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    monkeypatch.setattr(sys, "argv", [str(DECODE_LOOP), *args])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(DECODE_LOOP), run_name="__main__")
    assert exit_info.value.code == 0


def test_decode_loop_cast_is_recorded_at_its_line(tmp_path, monkeypatch):
    out = tmp_path / "t.jsonl"
    with castfind.record(out):
        _run_decode(monkeypatch, "--layers", "3", "--steps", "5")
    header, sites = read_trace(out)
    assert header["castfind_trace"] == 1 and header["torch"] == torch.__version__
    assert header["devices"] == ["cpu"] and header["steps"] == 0 and header["records"] == 1
    (site,) = sites
    assert (site.path, site.line, site.function) == (str(DECODE_LOOP), cast_line(), "TritonAttnBackend.forward_decode")
    assert (site.op, site.src_dtype, site.dst_dtype) == ("aten::_to_copy", "float8_e4m3fn", "bfloat16")
    assert (site.shape, site.device, site.calls, site.bytes_per_call) == (SHAPE, "cpu", 15, BYTES_PER_CALL)
    assert site.steps is None


def test_every_cast_spelling_is_caught_and_same_dtype_copies_are_not(tmp_path):
    x = torch.ones(4, 3)
    fp8 = torch.zeros(4, 3, dtype=torch.float8_e4m3fn)
    out_bf16 = torch.empty(4, 3, dtype=torch.bfloat16)
    out_f32 = torch.empty(4, 3)
    path = tmp_path / "t.jsonl"
    with castfind.record(path):
        first = sys._getframe().f_lineno + 1
        x.half()
        x.bfloat16()
        x.double()
        x.type(torch.int32)
        fp8.float()
        out_bf16.copy_(x)
        torch.ops.aten._to_copy.out(x, out=out_bf16)
        torch.ops.aten.copy.default(out_bf16, x)
        out_bf16[:] = x
        # not casts: same dtype, or device-only
        x.float()
        x.to(torch.float32, copy=True)
        out_f32.copy_(x)
        x.to("cpu")
    _, sites = read_trace(path)
    got = sorted((s.line - first, s.op, s.src_dtype, s.dst_dtype, s.calls) for s in sites)
    assert got == [
        (0, "aten::_to_copy", "float32", "float16", 1),
        (1, "aten::_to_copy", "float32", "bfloat16", 1),
        (2, "aten::_to_copy", "float32", "float64", 1),
        (3, "aten::_to_copy", "float32", "int32", 1),
        (4, "aten::_to_copy", "float8_e4m3fn", "float32", 1),
        (5, "aten::copy_", "float32", "bfloat16", 1),
        (6, "aten::_to_copy", "float32", "bfloat16", 1),
        (7, "aten::copy", "float32", "bfloat16", 1),
        (8, "aten::copy_", "float32", "bfloat16", 1),
    ]
    assert {s.bytes_per_call for s in sites if s.src_dtype == "float32" and s.dst_dtype == "float16"} == {12 * 6}


def test_multi_line_expression_reports_the_line_of_the_cast(tmp_path):
    pool = [torch.zeros(2, dtype=torch.float8_e4m3fn)]
    path = tmp_path / "t.jsonl"
    with castfind.record(path):
        start = sys._getframe().f_lineno
        y = (
            pool[
                0
            ]
            .to(
                torch.bfloat16
            )
        )
    assert y.dtype == torch.bfloat16
    (site,) = read_trace(path)[1]
    assert site.line == start + 5


def test_casts_inside_torch_are_charged_to_the_callers_line(tmp_path):
    model = torch.nn.Linear(3, 2)
    path = tmp_path / "t.jsonl"
    with castfind.record(path):
        line = sys._getframe().f_lineno + 1
        model.half()
    sites = read_trace(path)[1]
    assert {(s.line, s.function, s.shape) for s in sites} == {(line, _qualname(), (2, 3)), (line, _qualname(), (2,))}


def _qualname() -> str:
    return "test_casts_inside_torch_are_charged_to_the_callers_line"


def test_steps_are_counted_in_header_and_records(tmp_path):
    x = torch.ones(2)
    path = tmp_path / "t.jsonl"
    with castfind.record(path):
        x.half()  # before the first step: step 0
        for _ in range(3):
            for _ in range(2):
                x.double()  # one site, two calls per step
            castfind.step()
    header, sites = read_trace(path)
    assert header["steps"] == 3
    assert {(s.dst_dtype, s.calls, s.steps) for s in sites} == {("float16", 1, 1), ("float64", 6, 3)}


def test_step_outside_record_is_a_no_op(tmp_path):
    for _ in range(3):
        assert castfind.step() is None  # no recording: nothing to count, nothing raised
    path = tmp_path / "t.jsonl"
    with castfind.record(path):
        torch.ones(2).half()
    header, sites = read_trace(path)
    assert header["steps"] == 0  # the steps marked before the block did not leak into it
    assert [(s.dst_dtype, s.calls) for s in sites] == [("float16", 1)]


def test_trace_is_written_when_the_block_raises(tmp_path):
    path = tmp_path / "t.jsonl"
    with pytest.raises(ValueError, match="boom"), castfind.record(path):
        torch.ones(2).half()
        raise ValueError("boom")
    (site,) = read_trace(path)[1]
    assert site.calls == 1 and site.dst_dtype == "float16"


def test_trace_is_written_on_keyboard_interrupt(tmp_path):
    path = tmp_path / "t.jsonl"
    with pytest.raises(KeyboardInterrupt), castfind.record(path):
        torch.ones(2).half()
        raise KeyboardInterrupt
    assert read_trace(path)[1][0].calls == 1


def test_nested_record_is_refused(tmp_path):
    with (castfind.record(tmp_path / "outer.jsonl"), pytest.raises(RuntimeError, match="already active"),
          castfind.record(tmp_path / "inner.jsonl")):
        pass
    assert not (tmp_path / "inner.jsonl").exists()
