"""The Markdown report's Mermaid charts rendered by the real Mermaid library (npm ``mermaid``, pinned in
tests/mermaid/package.json) in headless Chromium (Debian's ``chromium``): every chart renders, and its SVG
holds every node of the hot path, the cast and the buffer's provenance, and its text stays legible at a
pull-request comment's width: each chart is laid out 800 px wide (``useMaxWidth``: an SVG wider than its box
is scaled down to fit) and the smallest label's font size, times the scale (the rendered width over the
viewBox's width), must be at least 10 px.

Never skipped: ``.ci/run`` installs both (``apt-get install chromium``, ``npm ci --prefix tests/mermaid``);
where either is missing the test fails and says how to install it.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from castfind import api
from castfind.report import ScanReport, display_path, markdown
from tests.support import REPO
from tests.test_ci_formats import FIX, NASTY, TWIN

MERMAID_JS = REPO / "tests" / "mermaid" / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--virtual-time-budget=60000", "--window-size=1280,1024"]
_BLOCK = re.compile(r"```mermaid\n(.*?)\n```", re.DOTALL)

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><script src="{script}"></script></head>
<body style="margin: 0"><div id="charts" style="width: {width}px"></div><script>
const charts = {charts};
mermaid.initialize({{startOnLoad: false, securityLevel: "strict"}});
(async () => {{
  for (let i = 0; i < charts.length; i++) {{
    const out = document.createElement("div");
    out.id = "chart-" + i;
    document.getElementById("charts").appendChild(out);
    try {{
      out.innerHTML = (await mermaid.render("svg" + i, charts[i])).svg;
      // The text as a reader sees it: each label's font size scaled as the SVG is (rendered width / viewBox).
      const svg = out.querySelector("svg");
      const width = svg.getBoundingClientRect().width;
      const scale = width / svg.viewBox.baseVal.width;
      let least = Infinity;
      for (const el of svg.querySelectorAll(".nodeLabel, .cluster-label, .edgeLabel, text")) {{
        if (el.textContent.trim()) least = Math.min(least, parseFloat(getComputedStyle(el).fontSize));
      }}
      out.dataset.width = width.toFixed(1);
      out.dataset.font = (least * scale).toFixed(2);
    }} catch (e) {{
      out.className = "failed";
      out.textContent = String(e && e.message || e);
    }}
  }}
  const done = document.createElement("div");
  done.id = "done";
  document.body.appendChild(done);
}})();
</script></body></html>
"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("chromium is not installed: apt-get install -y chromium (.ci/run does)")


class _Charts(HTMLParser):
    """The text of each ``<div id="chart-N">`` (the SVG's labels), whether it failed, and its rendered width
    and smallest font size in px (``data-width``, ``data-font``, written by the page)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: dict[int, list[str]] = {}
        self.failed: set[int] = set()
        self.width: dict[int, float] = {}
        self.font: dict[int, float] = {}
        self.done = False
        self._open: int | None = None
        self._depth = 0
        self._style = False  # inside the SVG's <style>: CSS, not labels
        self._glue = False  # after a <wbr>: the text goes on in the same word

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "div" and (a.get("id") or "").startswith("chart-") and self._open is None:
            self._open, self._depth = int((a["id"] or "").split("-")[1]), 0
            self.text[self._open] = []
            if a.get("class") == "failed":
                self.failed.add(self._open)
            else:
                self.width[self._open] = float(a.get("data-width") or "nan")
                self.font[self._open] = float(a.get("data-font") or "nan")
        elif tag == "div" and a.get("id") == "done":
            self.done = True
        if self._open is not None and tag == "div":
            self._depth += 1
        self._style = self._style or tag == "style"
        self._glue = tag == "wbr" and self._open is not None

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._style = False
        if self._open is not None and tag == "div":
            self._depth -= 1
            if self._depth == 0:
                self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None and not self._style:
            words = self.text[self._open]
            if self._glue and words:
                words[-1] += data
            else:
                words.append(data)
        self._glue = False


WIDTH = 800  # px: about a pull-request comment's width on GitHub
LEGIBLE = 10.0  # px: the smallest text height a reader can read without zooming


def render(charts: list[str], tmp_path: Path) -> _Charts:
    if not MERMAID_JS.is_file():
        pytest.fail(f"{MERMAID_JS} is missing: npm ci --prefix tests/mermaid (.ci/run does)")
    page = tmp_path / "charts.html"
    page.write_text(PAGE.format(script=MERMAID_JS.as_uri(), width=WIDTH, charts=json.dumps(charts).replace("</", "<\\/")),
                    encoding="utf-8")
    done = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           page.as_uri()], capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = _Charts()
    parsed.feed(done.stdout)
    assert parsed.done, f"the page did not finish rendering: {done.stdout[-2000:]}"
    return parsed


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_every_chart_renders_with_every_node(tmp_path: Path) -> None:
    scanned = api.scan([str(FIX)], use_cache=False, jobs=1).report
    report = ScanReport(findings=(*scanned.findings, NASTY, TWIN))
    errors = [f for f in report.findings if f.severity == "error"]
    charts = _BLOCK.findall(markdown.render(report))
    assert len(charts) == len(errors) == 5
    parsed = render(charts, tmp_path)
    assert not parsed.failed, {i: "".join(parsed.text[i]) for i in parsed.failed}
    for i, f in enumerate(errors):
        shown = _flat(" ".join(parsed.text[i]))
        assert "<svg" not in shown
        where = f"{display_path(f.root, f.path)}:{f.line}"
        wanted = ["hot path", "where the buffer comes from", *(markdown.short_name(h, f.module, f.function)[0]
                  for h in f.hot_path), *markdown.provenance_steps(f), f.expr[:40], where]
        missing = [label for label in wanted if _flat(label) not in shown]
        assert missing == [], (html.unescape(shown), charts[i])
        assert parsed.width[i] <= WIDTH, charts[i]
        assert parsed.font[i] >= LEGIBLE, (parsed.font[i], charts[i])


def test_a_long_hot_path_stays_legible_at_a_comments_width(tmp_path: Path) -> None:
    """Eight functions deep, long names, long provenance steps: drawn top-down, the chart grows down, not
    across, so the text keeps its size. A chart drawn left to right is the control: the measure sees it
    shrink below legible (as castfind's charts did before they were drawn top-down)."""
    deep = replace(NASTY, hot_path=tuple(f"serving.layers.block_{i}.TransformerBlockNumber{i}.forward_decode_step"
                                         for i in range(8)),
                   provenance=tuple(f"kv_{i} = self.memory_pool_for_layers.get_whole_key_value_buffer(layer_{i}) "
                                    f"(line {100 + i})" for i in range(5)))
    chart = markdown.flowchart(deep)
    across = chart.replace("flowchart TD", "flowchart LR", 1)
    parsed = render([chart, across], tmp_path)
    assert not parsed.failed, {i: "".join(parsed.text[i]) for i in parsed.failed}
    assert parsed.font[0] >= LEGIBLE, (parsed.font[0], chart)
    assert parsed.font[1] < LEGIBLE, parsed.font[1]
