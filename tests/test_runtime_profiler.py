"""`trace import`: real torch.profiler Chrome traces of the decode loop, and the synthetic GPU one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_runtime_helpers import BYTES_PER_CALL, DECODE_LOOP, FIXTURES, GPU_PROFILE, SHAPE, cast_line

from castfind.runtime.dtypes import CPP_TYPES, ITEMSIZE, SCALAR_TYPES
from castfind.runtime.profiler import import_profile
from castfind.runtime.trace import read_trace

LAYERS, STEPS = 3, 4


@pytest.fixture(scope="module")
def profile_json(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("prof") / "decode.json"
    proc = subprocess.run(
        [sys.executable, str(FIXTURES / "profile_decode.py"), str(out), "--layers", str(LAYERS), "--steps", str(STEPS), "--gzip"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


def test_profile_import_gives_the_recorders_site(profile_json):
    header, sites = import_profile(profile_json, source_roots=(str(FIXTURES),))
    assert header["steps"] == STEPS and header["source"] == "torch.profiler:decode.json"
    (site,) = sites
    # The profiler prints paths relative to sys.path; the recorder absolute ones: same file.
    assert str(DECODE_LOOP).endswith("/" + site.path)
    assert (site.line, site.function) == (cast_line(), "TritonAttnBackend.forward_decode")
    assert (site.op, site.src_dtype, site.dst_dtype) == ("aten::_to_copy", "float8_e4m3fn", "bfloat16")
    assert (site.shape, site.device, site.calls, site.steps) == (SHAPE, "cpu", LAYERS * STEPS, STEPS)
    assert site.bytes_per_call == BYTES_PER_CALL and site.device_time_us is None and site.extra == {}


def test_gzipped_profile_imports_the_same(profile_json):
    plain = import_profile(profile_json, source_roots=(str(FIXTURES),))[1]
    zipped = import_profile(str(profile_json) + ".gz", source_roots=(str(FIXTURES),))[1]
    assert plain == zipped


def test_without_sources_the_site_is_the_functions_first_line(profile_json):
    (site,) = import_profile(profile_json, source_roots=("/nonexistent",))[1]
    def_line = next(i for i, t in enumerate(DECODE_LOOP.read_text().splitlines(), 1) if "def forward_decode" in t)
    if site.extra.get("line_kind") != "def":
        pytest.skip("the test's cwd holds the fixture under the profiled relative path")
    assert (site.line, site.function) == (def_line, "forward_decode")
    assert "pass --src" in site.extra["line_note"]


def test_gpu_fixture_kernel_time_device_and_steps(tmp_path):
    header, sites = import_profile(GPU_PROFILE)
    assert header["devices"] == ["cpu", "cuda:0 NVIDIA H200"] and header["steps"] == 2
    (site,) = sites
    assert (site.path, site.line, site.function) == ("sglang/srt/layers/attention/triton_backend.py", 120, "forward_decode")
    assert (site.shape, site.device, site.calls, site.steps) == ((4096, 1, 576), "cuda:0", 4, 2)
    assert site.bytes_per_call == 4096 * 576 * 3
    assert site.device_time_us == 4 * 37.5  # the gemm kernels are not the cast's
    assert site.extra["kernels"][0].startswith("void at::native::unrolled_elementwise_kernel")
    assert site.extra["line_kind"] == "def"


def test_gpu_fixture_with_source_places_the_line(tmp_path):
    src = tmp_path / "sglang/srt/layers/attention/triton_backend.py"
    src.parent.mkdir(parents=True)
    lines = ["# filler"] * 130
    lines[119] = "    def forward_decode(self, q, layer):"
    lines[124] = "        k = self.pool.get_key_buffer(layer.layer_id).to(q.dtype)"
    lines[0] = "class TritonAttnBackend:"
    src.write_text("\n".join(lines) + "\n")
    (site,) = import_profile(GPU_PROFILE, source_roots=(str(tmp_path),))[1]
    assert (site.line, site.function) == (125, "TritonAttnBackend.forward_decode")


def test_import_writes_a_trace_the_reader_accepts(tmp_path):
    from castfind.runtime.trace import write_trace

    header, sites = import_profile(GPU_PROFILE)
    write_trace(tmp_path / "g.jsonl", header, sites)
    again_header, again = read_trace(tmp_path / "g.jsonl")
    assert again == sites and again_header["records"] == 1
    assert again[0].extra["kernels"] == sites[0].extra["kernels"]


def test_dtype_tables_match_the_installed_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    names = {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}
    assert {n: d.itemsize for n, d in names.items() if n in ITEMSIZE} == {n: ITEMSIZE[n] for n in names if n in ITEMSIZE}
    x = torch.zeros(2)
    checked = {"float32"}
    for name in SCALAR_TYPES:
        if name not in names or name == "float32":
            continue
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            try:
                y = torch.ops.aten._to_copy(x, dtype=names[name])
                y.clone()
            except (RuntimeError, NotImplementedError):
                continue
        prof.export_chrome_trace(str(tmp_path / "d.json"))
        events = json.loads((tmp_path / "d.json").read_text())["traceEvents"]
        (to_copy,) = [e for e in events if e.get("name") == "aten::_to_copy"]
        (clone,) = [e for e in events if e.get("name") == "aten::clone"]
        assert SCALAR_TYPES[int(to_copy["args"]["Concrete Inputs"][1])] == name
        assert CPP_TYPES[clone["args"]["Input type"][0]] == name
        checked.add(name)
    assert {"bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "int8", "uint8"} <= checked


def test_source_index_keeps_relative_profile_paths_inside_their_root(tmp_path):
    from castfind.runtime.source import SourceIndex

    root, outside = tmp_path / "src", tmp_path / "outside.py"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("def f(x):\n    return x.float()\n")
    outside.write_text("def f(x):\n    return x.float()\n")
    (root / "pkg" / "link.py").symlink_to(outside)
    index = SourceIndex((str(root),))
    assert index.resolve("pkg/mod.py") == str(root / "pkg" / "mod.py")
    assert index.resolve("../outside.py") is None and index.resolve("pkg/../../outside.py") is None
    assert index.resolve("pkg/link.py") is None
    assert index.locate("../outside.py", 1, "f", "aten::_to_copy", "float").line is None
    assert index.locate("pkg/mod.py", 1, "f", "aten::_to_copy", "float").line == 2
