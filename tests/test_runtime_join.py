"""join(): measured casts onto hand-made findings, by module-relative path and line."""

from __future__ import annotations

from dataclasses import replace

from castfind.core.types import Finding, Runtime, TraceSite
from castfind.runtime.join import join, root_holding, severity_for

MIB = 1024 * 1024
ROOT = "/src/sglang"
ATTN = "python/sglang/srt/layers/attention/triton_backend.py"
POOL = "python/sglang/srt/mem_cache/memory_pool.py"
MODULES = {ATTN: "sglang.srt.layers.attention.triton_backend", POOL: "sglang.srt.mem_cache.memory_pool"}


def finding(path: str, line: int, end_line: int | None = None, severity: str = "warning", function: str = "f") -> Finding:
    return Finding(
        rule="CF101", name="whole-buffer-cast", severity=severity, root=ROOT, path=path, line=line,
        end_line=end_line or line, column=13, function=function, expr="k.to(q.dtype)", message="whole KV buffer cast",
        module=MODULES.get(path, ""),
    )  # fmt: skip


def site(path: str, line: int, calls: int = 78, shape: tuple[int, ...] = (61, 1, 576), **kw) -> TraceSite:
    numel = 1
    for d in shape:
        numel *= d
    return TraceSite(
        path=path, line=line, function=kw.pop("function", "forward_decode"), op="aten::_to_copy",
        src_dtype=kw.pop("src_dtype", "float8_e4m3fn"), dst_dtype="bfloat16", shape=shape,
        device=kw.pop("device", "cuda:0"),
        calls=calls, bytes_per_call=kw.pop("bytes_per_call", numel * 3), **kw,
    )  # fmt: skip


def test_site_under_site_packages_attaches_to_the_checkout_finding():
    f = finding(ATTN, 125, 127)
    s = site("/usr/lib/python3/site-packages/sglang/srt/layers/attention/triton_backend.py", 126, steps=13)
    (out,) = join([f], [s], MODULES)
    assert out.rule == "CF101" and out.message == f.message
    assert out.runtime == Runtime(
        calls=78, shape=(61, 1, 576), src_dtype="float8_e4m3fn", dst_dtype="bfloat16", bytes_per_call=61 * 576 * 3,
        bytes_total=78 * 61 * 576 * 3, device="cuda:0", device_time_us=None, calls_per_step=6.0,
    )  # fmt: skip
    assert f.runtime is None  # inputs untouched


def test_profiler_relative_and_checkout_relative_paths_match_too():
    f = finding(ATTN, 125)
    for path in ("sglang/srt/layers/attention/triton_backend.py", ATTN, f"{ROOT}/{ATTN}"):
        (out,) = join([f], [site(path, 125)], MODULES)
        assert out.runtime is not None and out.runtime.calls == 78, path


def test_line_outside_the_range_or_other_file_does_not_attach():
    f = finding(ATTN, 125, 126)
    out = join([f], [site("sglang/srt/layers/attention/triton_backend.py", 127)], MODULES)
    assert [(o.rule, o.line, o.runtime is None) for o in out] == [("CF101", 125, True), ("CF900", 127, False)]


def test_several_shapes_at_one_site_sum_and_keep_the_largest():
    f = finding(ATTN, 125)
    small = site(ATTN, 125, calls=10, shape=(8, 1, 576), device_time_us=5.0)
    large = site(ATTN, 125, calls=3, shape=(4096, 1, 576), device_time_us=30.0)
    (out,) = join([f], [small, large], MODULES)
    assert out.runtime.calls == 13 and out.runtime.shape == (4096, 1, 576)
    assert out.runtime.bytes_per_call == 4096 * 576 * 3
    assert out.runtime.bytes_total == 10 * 8 * 576 * 3 + 3 * 4096 * 576 * 3
    assert out.runtime.device_time_us == 35.0


def test_nested_findings_take_the_innermost():
    outer = finding(ATTN, 120, 130, function="outer")
    inner = finding(ATTN, 125, 125, function="inner")
    out = {o.function: o for o in join([outer, inner], [site(ATTN, 125)], MODULES)}
    assert out["inner"].runtime is not None and out["outer"].runtime is None


def test_unmatched_sites_become_cf900_with_severity_by_bytes_per_call():
    big = site("/venv/site-packages/sglang/srt/mem_cache/memory_pool.py", 300, calls=2, shape=(64 * MIB,))  # 192 MiB
    mid = site("/elsewhere/other/lib.py", 7, calls=5, shape=(MIB // 2,), function="g")  # 1.5 MiB
    tiny = site(POOL, 10, calls=1, shape=(4,))
    out = join([], [tiny, mid, big], MODULES)
    assert [(o.rule, o.name, o.severity, o.path, o.line) for o in out] == [
        ("CF900", "measured-cast-without-rule", "error", POOL, 300),
        ("CF900", "measured-cast-without-rule", "warning", "/elsewhere/other/lib.py", 7),
        ("CF900", "measured-cast-without-rule", "info", POOL, 10),
    ]
    assert out[0].message == "measured: 2 calls of float8_e4m3fn→bfloat16 [67108864], 192.0 MiB per call"
    assert out[0].module == "sglang.srt.mem_cache.memory_pool" and out[1].module == "" and out[1].root == ""
    assert out[0].runtime.bytes_total == 2 * 192 * MIB


def test_unmatched_records_at_one_site_are_one_finding():
    out = join([], [site(POOL, 5, calls=2, shape=(2,)), site(POOL, 5, calls=3, shape=(9,))], MODULES)
    (only,) = out
    assert only.runtime.calls == 5 and only.runtime.shape == (9,)
    assert only.message == "measured: 5 calls of float8_e4m3fn→bfloat16 [9], 27 B per call"


def test_ranking_is_severity_then_measured_bytes_then_path_and_line():
    a = finding(ATTN, 10, severity="warning")
    b = finding(ATTN, 20, severity="warning")
    c = finding(POOL, 5, severity="error")
    d = finding(ATTN, 5, severity="info")
    out = join([a, b, c, d], [site(ATTN, 20, calls=1000), site(ATTN, 10, calls=1)], MODULES)
    assert [(o.path, o.line) for o in out] == [(POOL, 5), (ATTN, 20), (ATTN, 10), (ATTN, 5)]


def test_def_line_site_attaches_when_the_function_has_one_finding():
    f = finding(ATTN, 125, function="TritonAttnBackend.forward_decode")
    s = site("sglang/srt/layers/attention/triton_backend.py", 120, extra={"line_kind": "def"})
    (out,) = join([f], [s], MODULES)
    assert out.rule == "CF101" and out.runtime.calls == 78
    two = [f, finding(ATTN, 128, function="TritonAttnBackend.forward_decode")]
    # Two findings in the function: ambiguous, so the site stays a (103 KiB: info) CF900 of its own.
    assert [(o.rule, o.line) for o in join(two, [s], MODULES)] == [("CF101", 125), ("CF101", 128), ("CF900", 120)]


def test_severity_thresholds():
    assert [severity_for(n) for n in (64 * MIB, 64 * MIB - 1, MIB, MIB - 1, 0)] == [
        "error", "warning", "warning", "info", "info",
    ]  # fmt: skip


def test_cf900_in_a_scanned_file_gets_the_root_that_really_holds_it(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    (second / "python/sglang/srt/mem_cache").mkdir(parents=True)
    (second / POOL).write_text("x = 1\n")
    first.mkdir()
    elsewhere = replace(finding(ATTN, 5), root=str(first))
    out = join([elsewhere], [site(POOL, 1)], MODULES, roots=[str(first), str(second)])
    assert [(o.rule, o.root) for o in out if o.rule == "CF900"] == [("CF900", str(second))]
    # Without roots, those of the findings are tried: none holds the file, so no root (no source is read).
    (cf900,) = [o for o in join([elsewhere], [site(POOL, 1)], MODULES) if o.rule == "CF900"]
    assert (cf900.root, cf900.path) == ("", POOL)


def test_scanned_name_whose_real_path_leaves_the_root_gets_no_root(tmp_path):
    root = tmp_path / "root"
    (root / "python/sglang/srt/mem_cache").mkdir(parents=True)
    (tmp_path / "secret.py").write_text("secret = 1\n")
    (root / POOL).symlink_to(tmp_path / "secret.py")
    (out,) = join([], [site(POOL, 1)], MODULES, roots=[str(root)])
    assert (out.rule, out.root, out.path) == ("CF900", "", POOL)
    assert root_holding(POOL, [str(root)]) == "" and root_holding("../secret.py", [str(root)]) == ""


def test_sites_outside_the_roots_keep_their_path_without_a_root_and_are_escaped():
    s = site("../../../../etc/passwd\x1b[2J", 1, function="f\r", src_dtype="fp8\x9b", device="cpu\x07")
    (out,) = [o for o in join([finding(ATTN, 5)], [s], MODULES, roots=["/"]) if o.rule == "CF900"]
    assert (out.root, out.path, out.function) == ("", "../../../../etc/passwd\\x1b[2J", "f\\x0d")
    assert out.runtime.src_dtype == "fp8\\x9b" and out.runtime.device == "cpu\\x07"
    assert "\x9b" not in out.message
