"""The JSONL trace format and both readers' handling of bad input: TraceError with a line, nothing else."""

from __future__ import annotations

import gzip
import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_runtime_helpers import GPU_PROFILE

from castfind.core.types import TraceSite
from castfind.runtime.chrome import parse_chrome_trace
from castfind.runtime.profiler import import_profile
from castfind.runtime.trace import TraceError, format_bytes, parse_trace, read_trace, write_trace

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


# --- out-of-range numbers, non-finite numbers, gzip, control characters ---------------------------

HUGE = "1" + "0" * 400


@pytest.mark.parametrize(
    ("old", "new", "line", "reason"),
    [
        ('"calls": 6', f'"calls": {HUGE}', 2, "calls out of range"),
        ('"calls": 6', '"calls": 1e400', 2, "calls out of range"),
        ('"bytes_per_call": 24', f'"bytes_per_call": {HUGE}', 2, "bytes_per_call out of range"),
        ('"line": 12', f'"line": {HUGE}', 2, "line out of range"),
        ('"steps": 2}', f'"steps": {HUGE}}}', 2, "steps out of range"),
        ('"shape": [4, 2]', f'"shape": [4, {HUGE}]', 2, "shape out of range"),
        ('"device_time_us": 1.5', '"device_time_us": 1e400', 2, "device_time_us out of range"),
        ('"wall_s": 1.5', '"wall_s": 1e400', 1, "wall_s out of range"),
        ('"steps": 2,', f'"steps": {HUGE},', 1, "steps out of range"),
    ],
)
def test_numbers_out_of_range_are_positioned_trace_errors(old, new, line, reason):
    text = _text(SITE)
    assert old in text
    text = text.replace(old, new, 1)
    with pytest.raises(TraceError) as info:
        parse_trace(text, "t.jsonl")
    assert str(info.value).startswith(f"t.jsonl:{line}: {reason}")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_literals_are_rejected_where_they_stand(constant):
    text = _text(SITE).replace('"wall_s": 1.5', f'"wall_s": {constant}')
    with pytest.raises(TraceError) as info:
        parse_trace(text, "t.jsonl")
    assert info.value.line == 1 and constant.lstrip("-") in info.value.reason
    extra = _text(SITE).replace('"calls": 6', f'"calls": 6, "note": [{constant}]')
    with pytest.raises(TraceError) as info:
        parse_trace(extra, "t.jsonl")
    assert info.value.line == 2


def test_gzipped_trace_is_read_by_its_magic_bytes_not_its_name(tmp_path):
    text = _text(SITE)
    for name in ("t.jsonl.gz", "t.jsonl"):
        (tmp_path / name).write_bytes(gzip.compress(text.encode()))
        assert read_trace(tmp_path / name) == parse_trace(text, name)


def test_truncated_gzipped_trace_is_a_trace_error(tmp_path):
    data = gzip.compress(_text(SITE).encode())
    for cut in (3, len(data) // 2, len(data) - 4):
        (tmp_path / "t.jsonl.gz").write_bytes(data[:cut])
        with pytest.raises(TraceError) as info:
            read_trace(tmp_path / "t.jsonl.gz")
        assert info.value.line == 0 and "cannot decompress" in info.value.reason


def test_control_characters_from_a_trace_never_come_back_raw():
    nasty = "\x1b[2J\x1b]0;owned\x07\r\x9b31m\u202e"
    site = TraceSite(**{**SITE.to_dict(), "path": f"/x/{nasty}a.py", "function": f"f{nasty}", "op": f"aten{nasty}",
                        "src_dtype": f"fp8{nasty}", "dst_dtype": f"bf16{nasty}", "device": f"cuda{nasty}",
                        "extra": {"note": f"n{nasty}"}})  # fmt: skip
    header = {**HEADER, "torch": f"2.13{nasty}", "devices": [f"cpu{nasty}"], "source": f"s{nasty}"}
    path = os.path.join(tempfile.mkdtemp(), "t.jsonl")
    write_trace(path, header, [site])
    got_header, (got,) = read_trace(path)
    strings = [got.path, got.function, got.op, got.src_dtype, got.dst_dtype, got.device, got.extra["note"],
               got_header["torch"], got_header["source"], *got_header["devices"]]  # fmt: skip
    for text in strings:
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c == "\u202e" for c in text), repr(text)
        assert "\\x1b" in text  # escaped, so the reader still sees what was there
    assert got.path == "/x/\\x1b[2J\\x1b]0;owned\\x07\\x0d\\x9b31m\\u202ea.py"


def test_clean_text_is_idempotent_and_leaves_printable_text_alone():
    from castfind.runtime.trace import clean_text

    assert clean_text("sglang/srt/é→x.py") == "sglang/srt/é→x.py"
    once = clean_text("a\x00b\tc\x1bd\x85")
    assert once == "a\\x00b\\x09c\\x1bd\\x85" and clean_text(once) == once


TO_COPY_DIMS = '"Input Dims": [[4096, 1, 576], [], [], [], [], [], []]'  # the first aten::_to_copy's


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ('"dur": 37.5', f'"dur": {HUGE}', "event 'dur' out of range"),
        ('"ts": ', f'"ts": {HUGE}, "x": ', "event 'ts' out of range"),
        (TO_COPY_DIMS, TO_COPY_DIMS.replace("4096, 1, 576", HUGE), "args['Input Dims'] out of range"),
        (TO_COPY_DIMS, TO_COPY_DIMS.replace("4096, 1, 576", "4611686018427387904, 4"),
         "args['Input Dims'] out of range"),
        ("triton_backend.py(120)", f"triton_backend.py({HUGE}0000)", "frame line out of range"),
    ],
)
def test_chrome_trace_numbers_out_of_range_are_positioned(old, new, reason):
    text = CHROME_TEXT.replace(old, new, 1)
    assert text != CHROME_TEXT
    bad_line = next(i for i, t in enumerate(text.splitlines(), 1) if HUGE in t or "4611686018427387904" in t)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "p.json")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        with pytest.raises(TraceError) as info:
            import_profile(path)
    assert (info.value.line, info.value.reason) == (bad_line, reason)
