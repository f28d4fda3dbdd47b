"""The JSONL trace format and both readers' handling of bad input: TraceError with a line, nothing else."""

from __future__ import annotations

import gzip
import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from castfind.runtime.chrome import parse_chrome_trace
from castfind.runtime.profiler import import_profile
from castfind.runtime.trace import TraceError, format_bytes, parse_trace, read_trace, write_trace
from castfind.types import TraceSite
from test_runtime_helpers import GPU_PROFILE

HEADER = {"castfind_trace": 1, "torch": "2.13.0", "devices": ["cpu"], "wall_s": 1.5, "steps": 2, "source": "test"}
SITE = TraceSite(
    path="/x/sglang/srt/a.py", line=12, function="A.f", op="aten::_to_copy", src_dtype="float8_e4m3fn",
    dst_dtype="bfloat16", shape=(4, 2), device="cuda:0", calls=6, bytes_per_call=24, device_time_us=1.5, steps=2,
)  # fmt: skip


def _text(*sites: TraceSite) -> str:
    path = os.path.join(tempfile.mkdtemp(), "t.jsonl")
    write_trace(path, HEADER, list(sites))
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def test_round_trip_keeps_sites_and_extra_keys(tmp_path):
    other = TraceSite(**{**SITE.to_dict(), "shape": (1,), "line": 3, "device_time_us": None, "steps": None,
                         "extra": {"line_kind": "def"}})  # fmt: skip
    write_trace(tmp_path / "t.jsonl", HEADER, [SITE, other])
    header, sites = read_trace(tmp_path / "t.jsonl")
    assert header == {**HEADER, "records": 2}
    assert sites == [SITE, other] and sites[1].extra == {"line_kind": "def"}
    first_record = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[1])
    assert first_record == SITE.to_dict()


@pytest.mark.parametrize(
    ("mangle", "line", "reason"),
    [
        (lambda t: "", 1, "empty trace"),
        (lambda t: t.replace('"castfind_trace": 1', '"castfind_trace": 7'), 1, "unsupported trace version 7"),
        (lambda t: '{"hello": 1}\n', 1, "not a castfind trace"),
        (lambda t: t.replace('"calls": 6', '"calls": "6"'), 2, "record field 'calls' has the wrong type"),
        (lambda t: t.replace('"shape": [4, 2]', '"shape": [4, -2]'), 2, "'shape' must list non-negative"),
        (lambda t: t.replace('"line": 12', '"line": true'), 2, "record field 'line' has the wrong type"),
        (lambda t: t.replace(', "op": "aten::_to_copy"', ""), 2, "record lacks 'op'"),
        (lambda t: t[: t.rindex("}")], 3, "not valid JSON"),
        (lambda t: "\n".join(t.splitlines()[:2]) + "\n", 2, "truncated: the header promises 2 records, found 1"),
        (lambda t: t + t.splitlines()[0] + "\n", 4, "a second trace header"),
        (lambda t: t.replace('"devices": ["cpu"]', '"devices": "cpu"'), 1, "header field 'devices'"),
    ],
)
def test_bad_traces_name_the_line(mangle, line, reason):
    text = mangle(_text(SITE, SITE.__class__(**{**SITE.to_dict(), "line": 13, "shape": (4, 2)})))
    with pytest.raises(TraceError) as info:
        parse_trace(text, "t.jsonl")
    assert (info.value.path, info.value.line) == ("t.jsonl", line)
    assert reason in info.value.reason
    assert str(info.value).startswith(f"t.jsonl:{line}: ")


def test_missing_file_is_line_0(tmp_path):
    with pytest.raises(TraceError) as info:
        read_trace(tmp_path / "nope.jsonl")
    assert info.value.line == 0 and "cannot read trace" in info.value.reason
    assert info.value.to_diagnostic().kind == "trace-error"


def test_chrome_trace_errors_point_at_the_event_line():
    text = GPU_PROFILE.read_text().replace('"dur": 37.5', '"dur": "37.5"', 1)
    bad_line = next(i for i, t in enumerate(text.splitlines(), 1) if '"dur": "37.5"' in t)
    with pytest.raises(TraceError) as info:
        parse_chrome_trace(text, "p.json")
    assert (info.value.line, info.value.reason) == (bad_line, "event 'dur' must be a finite number")


def test_truncated_gzip_is_a_trace_error(tmp_path):
    data = gzip.compress(GPU_PROFILE.read_bytes())
    (tmp_path / "p.json.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError) as info:
        import_profile(tmp_path / "p.json.gz")
    assert info.value.line == 0 and "cannot decompress" in info.value.reason


def test_format_bytes():
    assert [format_bytes(n) for n in (0, 1023, 1024, 34 * 1024 * 1024, 3 * 1024**4 * 1024)] == [
        "0 B", "1023 B", "1.0 KiB", "34.0 MiB", "3072.0 TiB",
    ]  # fmt: skip


# --- fuzzing: whatever the input, the readers answer with a result or a TraceError ---------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VALID_JSONL = _text(SITE, TraceSite(**{**SITE.to_dict(), "line": 40, "shape": (3,)}))
CHROME_TEXT = GPU_PROFILE.read_text()


def _only_trace_errors(fn, *args):
    try:
        fn(*args)
    except TraceError as exc:
        assert exc.line >= 0 and exc.reason


def _import_text(text: str, binary: bytes | None = None) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "p.json")
        with open(path, "wb") as fh:
            fh.write(binary if binary is not None else text.encode("utf-8", "surrogatepass"))
        import_profile(path, source_roots=(folder,))


@FUZZ
@given(st.text(max_size=200))
def test_fuzz_random_text(text):
    _only_trace_errors(parse_trace, text, "t")
    _only_trace_errors(_import_text, text)


@FUZZ
@given(st.integers(0, len(VALID_JSONL)), st.integers(0, len(CHROME_TEXT)))
def test_fuzz_truncated(cut_jsonl, cut_chrome):
    _only_trace_errors(parse_trace, VALID_JSONL[:cut_jsonl], "t")
    _only_trace_errors(_import_text, CHROME_TEXT[:cut_chrome])
    data = gzip.compress(CHROME_TEXT.encode())
    _only_trace_errors(_import_text, "", data[: cut_chrome * len(data) // max(len(CHROME_TEXT), 1)])


@FUZZ
@given(st.sampled_from(list(SITE.to_dict()) + list(HEADER)), json_values, st.integers(0, 2))
def test_fuzz_mistyped_jsonl_fields(key, value, which):
    lines = VALID_JSONL.splitlines()
    record = json.loads(lines[which])
    record[key] = value
    lines[which] = json.dumps(record)
    _only_trace_errors(parse_trace, "\n".join(lines), "t")


@FUZZ
@given(st.data())
def test_fuzz_mistyped_chrome_events(data):
    trace = json.loads(CHROME_TEXT)
    events = trace["traceEvents"]
    for _ in range(data.draw(st.integers(1, 3))):
        event = events[data.draw(st.integers(0, len(events) - 1))]
        where = event
        if isinstance(event.get("args"), dict) and data.draw(st.booleans()):
            where = event["args"]
        key = data.draw(st.sampled_from(sorted(where) + ["cat", "ph", "Input Dims", "Input type", "Concrete Inputs"]))
        where[key] = data.draw(json_values)
    _only_trace_errors(_import_text, json.dumps(trace))
