"""The Markdown report for a pull request (issue 37, item 6): top-down charts with short names and labelled
lanes, ``file:line`` on the cast, each error in a ``<details>`` block, the static cost and the measured bytes
in the table. The charts are rendered by the real Mermaid library in tests/test_mermaid_render.py."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from castfind import api, cli
from castfind.core.types import Cost, CostCheck
from castfind.report import ScanReport, display_path, markdown
from tests.support import REPO
from tests.test_ci_formats import FIX, NASTY, WARN

runner = CliRunner()
_BLOCK = re.compile(r"```mermaid\n(.*?)\n```", re.DOTALL)
_DETAILS = re.compile(r"<details><summary>(.*?)</summary>\n(.*?)\n</details>", re.DOTALL)

# Every name of the minisrv fixture's cost formulas bound: 4 layers × 1000 tokens × 576 × (1 + 2 bytes).
BOUND = ["--set", "layers=4", "--set", "tokens=1000", "--set", "dim=576", "--set", "dtype=torch.float8_e4m3fn",
         "--set", "activation_dtype=torch.bfloat16"]
COST = Cost(shape=("size", "1", "576"), src_dtype="torch.float8_e4m3fn", dst_dtype="torch.bfloat16",
            bytes_per_call="size * 1 * 576 * (1 + 2)", per_step="layer_num * size * 1 * 576 * (1 + 2)",
            holder="MLAPool.kv_buffer", declared="mem/pool.py:41", unbound=("layer_num", "size"))


def _cells(doc: str, rule: str) -> list[list[str]]:
    rows = [line for line in doc.splitlines() if line.startswith(f"| {rule} ")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]


def test_short_names_drop_the_module() -> None:
    assert markdown.short_name("minisrv.backend.DecodeBackend.forward_decode") == (
        "DecodeBackend.forward_decode", "minisrv.backend")
    assert markdown.short_name("pkg.layers.run_layer") == ("run_layer", "pkg.layers")
    assert markdown.short_name("main") == ("main", "")
    # The finding's own module splits its function exactly, whatever the capitals say.
    assert markdown.short_name("pkg.Mod.helper", "pkg.Mod", "helper") == ("helper", "pkg.Mod")
    assert markdown.short_name("pkg.Mod.helper") == ("Mod.helper", "pkg")


def test_the_chart_is_top_down_in_two_labelled_lanes_into_the_cast() -> None:
    f = replace(NASTY, cost=COST)
    chart = markdown.flowchart(f).splitlines()
    where = f"{display_path(f.root, f.path)}:{f.line}"
    assert [line.replace("<wbr>", "") for line in chart] == [
        "flowchart TD",
        '  subgraph hot["hot path"]',
        '    h0(["Model.forward_decode<br>pkg"])',
        '    h1["Attn[#quot;x#quot;].run<br>pkg"]',
        '    h2["Pool.get#lt;T#gt;<br>pkg"]',
        "    h0 --> h1",
        "    h1 --> h2",
        "  end",
        '  subgraph src["where the buffer comes from"]',
        f'    p0[/"allocated as MLAPool.kv_buffer<br>{display_path(f.root, "mem/pool.py")}:41"/]',  # as every file is named
        '    p1[/".kv_buffer is a kv-cache buffer"/]',
        '    p2[/"[i] keeps it whole"/]',
        "    p0 -.-> p1",
        "    p1 -.-> p2",
        "  end",
        f'  cast["cast buf[#quot;k|v#quot;].to(#35;dtype)<br>{where}"]',
        "  h2 --> cast",
        "  p2 -.-> cast",
    ]
    # A dotted name or a path may break after each dot, slash, parenthesis or comma (Mermaid wraps a label
    # at about 200 px, at the places it may break): never before a space or a ")".
    assert chart[3] == '    h1["Attn[#quot;x#quot;].<wbr>run<br>pkg"]'
    assert chart[15] == f'  cast["cast buf[#quot;k|v#quot;].<wbr>to(<wbr>#35;dtype)<br>{_breaks(where)}"]'
    assert markdown.flowchart(replace(NASTY, provenance=("f(x, y) = g() (line 3)",))).count(
        'p0[/"f(<wbr>x, y) = g() (<wbr>') == 1


def _breaks(text: str) -> str:
    return re.sub(r"([./(,])(?=[^)\s])", r"\1<wbr>", text)


def test_each_provenance_step_with_a_line_names_its_file() -> None:
    """``(line N)`` gets the file the walk was in: the cast's, then each caller's after a step that crosses
    into it. Checked against the files: the line named holds the assignment the step quotes."""
    root = REPO / "fixtures" / "calls"
    found = api.scan([str(root)], use_cache=False, jobs=1).report.findings
    f = next(f for f in found if (f.path, f.line) == ("callpkg/kernels.py", 13))
    assert markdown.provenance_steps(f) == [
        "flat = pages.view(pages.shape[0], -1) (callpkg/kernels.py:12)",
        ".view() is a view",
        "callpkg/backend.py:15 Backend.forward_decode passes cache as pages of attend",
        "cache = self.pool.get_kv_buffer(layer.layer_id) (callpkg/backend.py:14)",
        "get_kv_buffer() returns the whole kv-cache",
    ]
    checked = 0
    for g in found:
        for step in markdown.provenance_steps(g):
            m = re.fullmatch(r"(\w+) = .* \((.+):(\d+)\)", step)
            if m is not None:
                lines = (root / m.group(2)).read_text(encoding="utf-8").splitlines()
                assert lines[int(m.group(3)) - 1].strip().startswith(f"{m.group(1)} ="), (step, g.path, g.line)
                checked += 1
        assert not any("(line " in step for step in markdown.provenance_steps(g))
    assert checked >= 4


def test_a_chart_without_provenance_or_hot_path_has_only_its_lane() -> None:
    chart = markdown.flowchart(replace(NASTY, provenance=()))
    assert 'subgraph hot["hot path"]' in chart and "subgraph src" not in chart and "-.->" not in chart
    chart = markdown.flowchart(replace(WARN, provenance=("x is a weight",)))
    assert "subgraph hot" not in chart and "-->" not in chart.replace("-.->", "")
    assert chart.endswith("p0 -.-> cast")


def test_cost_column_static_and_measured() -> None:
    # The static formula when names are unbound, with them; the device time a trace measured beside it.
    assert markdown.cost_cell(replace(NASTY, cost=COST)) == (
        "`layer_num * size * 1 * 576 * (1 + 2)`/step (unbound: layer\\_num, size); 1.23 ms")
    bound = replace(COST, value=6_912_000.0, unbound=(), verdict="tiny")
    assert markdown.cost_cell(replace(NASTY, cost=bound, runtime=None)) == "6.6 MiB/step (tiny)"
    assert markdown.cost_cell(replace(NASTY, runtime=None)) == "—"
    assert markdown.measured_cell(replace(NASTY, runtime=None)) == "—"
    checked = replace(COST, check=CostCheck("mismatch", ("axis 0: 61 vs 64",)))
    assert markdown.measured_cell(replace(NASTY, cost=checked)) == "2.6 GiB (78 × 34.0 MiB); static MISMATCH"


def _bound_report(tmp_path: Path) -> str:
    """The Markdown report of a scan of the fixture with its sizes bound (``BOUND``): exit 1, its findings."""
    out = tmp_path / "report.md"
    r = runner.invoke(cli.app, ["scan", str(FIX), "--no-cache", "-j", "1", *BOUND, "--format", "markdown",
                                "--output", str(out)])
    assert r.exit_code == 1, r.output
    return out.read_text(encoding="utf-8")


def test_a_scan_with_bound_names_shows_its_cost_per_step(tmp_path: Path) -> None:
    doc = _bound_report(tmp_path)
    cf101 = _cells(doc, "CF101")
    assert [row[2] for row in cf101] == [f"`{display_path(str(FIX), 'minisrv/backend.py')}:{n}`" for n in (14, 16)]
    assert [row[5] for row in cf101] == ["6.6 MiB/step", "6.6 MiB/step"]  # 4 × 1000 × 576 × (1 + 2) B
    assert [row[5] for row in _cells(doc, "CF102")] == ["—"]  # a weight castfind read no allocation of


def test_each_error_is_one_details_block(tmp_path: Path) -> None:
    doc = _bound_report(tmp_path)
    blocks = _DETAILS.findall(doc)
    backend = display_path(str(FIX), "minisrv/backend.py")
    assert [summary for summary, _ in blocks] == [
        f"CF101 at <code>{backend}:14</code> in <code>DecodeBackend.forward_decode</code> (6.6 MiB/step)",
        f"CF101 at <code>{backend}:16</code> in <code>DecodeBackend.forward_decode</code> (6.6 MiB/step)",
        f"CF102 at <code>{backend}:30</code> in <code>DecodeBackend._project</code>",
    ]
    for _, body in blocks:
        assert len(_BLOCK.findall(body)) == 1
        assert body.startswith("\n")  # a blank line after <summary>: GitHub renders the Markdown inside
    assert len(_BLOCK.findall(doc)) == 3  # every chart is inside a block, warnings and info get none


def test_a_summary_escapes_html() -> None:
    doc = markdown.render(ScanReport(findings=(NASTY,)))
    summary = _DETAILS.findall(doc)[0][0]
    assert summary == "CF101 at <code>src/pkg/a, b:c.py:7</code> in <code>Pool.get&lt;T&gt;</code>"
