"""Latency of ``castfind server`` on the real wheels: diagnostics after a save, and go-to-definition, warm.

A benchmark, not a test (CPU-heavy: the first index build of both wheels is a cold scan). It drives the real
server over stdio with pygls's client, on a workspace folder in a temp folder whose ``[tool.castfind] roots``
are a copy of the sglang wheel (hard links, but the edited file, which is a real copy: the corpus is never
written) and the flashinfer wheel:

1. ``initialize``; the first index build runs (its progress notifications are counted); ``--cache-dir`` reuses
   a cache from an earlier run (then the build is warm too);
2. ``didOpen`` of ``sglang/srt/layers/attention/flashinfer_mla_backend.py`` (the file ``scan-edit`` edits);
3. ``--saves`` times: one comment line appended to it, ``didSave``, the time until its diagnostics arrive;
4. ``--definitions`` times: ``textDocument/definition`` on ``flashinfer_cutlass_fused_moe(`` in sglang's
   ``moe_runner/flashinfer_cutlass.py`` (bound by unpacking a loader's result; defined in flashinfer), once the
   diagnostics of opening that file came (the scan the open starts is not timed as part of a lookup). The server
   logs how each answer was had (``answer carried``: read back; ``answer computed``), printed beside it.

Targets (issue 38): a warm save ≤ 1 s, a warm definition ≤ 0.3 s. Prints each time and the medians, and beside
each the CPU seconds the server process spent meanwhile (Linux ``/proc``: the figure a loaded machine inflates
least; wall time on a machine shared by many processes is several times the CPU time).

Usage: python benchmarks/lsp_latency.py --corpus .corpus [--saves 5] [--definitions 5] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient
from pygls.uris import from_fs_path

EDITED = "sglang/srt/layers/attention/flashinfer_mla_backend.py"
DEFINED = "sglang/srt/layers/moe/moe_runner/flashinfer_cutlass.py"
CALL = "flashinfer_cutlass_fused_moe("


def _cpu(pid: int | None) -> float:
    """CPU seconds (user + system) process ``pid`` has used, or NaN where ``/proc`` cannot say."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def _workspace(corpus: Path, into: Path) -> Path:
    """A workspace folder holding both wheels as hard links (``[tool.castfind] roots`` must lie inside it), the
    edited file a real copy."""
    ws = into / "workspace"
    for wheel in ("sglang", "flashinfer"):
        shutil.copytree(corpus / wheel, ws / wheel, copy_function=os.link)
    edited = ws / "sglang" / EDITED
    edited.unlink()
    shutil.copyfile(corpus / "sglang" / EDITED, edited)
    (ws / "pyproject.toml").write_text('[tool.castfind]\nroots = ["sglang", "flashinfer"]\n')
    return ws


async def _run(args: argparse.Namespace, ws: Path, cache: str) -> int:
    client = LanguageClient("castfind-lsp-latency", "1")
    diagnostics: dict[str, asyncio.Event] = {}
    progress: list[str] = []
    built = asyncio.Event()

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def published(params: lsp.PublishDiagnosticsParams) -> None:
        diagnostics.setdefault(params.uri, asyncio.Event()).set()

    @client.feature(lsp.WINDOW_WORK_DONE_PROGRESS_CREATE)
    def create(params: lsp.WorkDoneProgressCreateParams) -> None:
        return None

    @client.feature(lsp.PROGRESS)
    def on_progress(params: lsp.ProgressParams) -> None:
        kind = params.value.get("kind") if isinstance(params.value, dict) else getattr(params.value, "kind", None)
        progress.append(str(kind))
        if kind == "end":
            built.set()

    @client.feature(lsp.WINDOW_LOG_MESSAGE)
    def logged(params: lsp.LogMessageParams) -> None:
        print(f"  server: {params.message}", file=sys.stderr)

    await client.start_io(sys.executable, "-m", "castfind", "server")
    server = getattr(client, "_server", None)  # pygls keeps the subprocess there
    pid = getattr(server, "pid", None)
    start = time.perf_counter()
    await client.initialize_async(lsp.InitializeParams(
        capabilities=lsp.ClientCapabilities(window=lsp.WindowClientCapabilities(work_done_progress=True)),
        workspace_folders=[lsp.WorkspaceFolder(uri=from_fs_path(str(ws)), name="workspace")],
        initialization_options={"cacheDir": cache}))
    client.initialized(lsp.InitializedParams())
    await built.wait()
    print(f"first index build: {time.perf_counter() - start:.1f} s ({progress.count('report')} progress reports)")

    edited = ws / "sglang" / EDITED
    uri = from_fs_path(str(edited))
    event = diagnostics.setdefault(uri, asyncio.Event())
    event.clear()
    start = time.perf_counter()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=edited.read_text())))
    await event.wait()
    print(f"diagnostics on open: {time.perf_counter() - start:.2f} s")

    saves, save_cpu = [], []
    for n in range(args.saves):
        with edited.open("a") as fh:
            fh.write(f"# castfind lsp latency edit {n}\n")
        event.clear()
        start, cpu = time.perf_counter(), _cpu(pid)
        client.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(uri=uri)))
        await event.wait()
        saves.append(time.perf_counter() - start)
        save_cpu.append(_cpu(pid) - cpu)
        print(f"  save {n + 1}: diagnostics after {saves[-1]:.2f} s (server CPU {save_cpu[-1]:.2f} s)")

    target = ws / "sglang" / DEFINED
    text = target.read_text()
    call = re.compile(r"=\s*(?<!\w)" + re.escape(CALL))
    line_no, found_at = next((i, m.end() - len(CALL)) for i, t in enumerate(text.splitlines()) if (m := call.search(t)))
    position = lsp.Position(line_no, found_at + 3)
    target_uri = from_fs_path(str(target))
    opened = diagnostics.setdefault(target_uri, asyncio.Event())
    opened.clear()
    start = time.perf_counter()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        lsp.TextDocumentItem(uri=target_uri, language_id="python", version=1, text=text)))
    # The scan the open starts runs beside a lookup by design; it is waited for here so that a definition's time
    # (and the server CPU beside it) is the lookup's own, not a share of that scan's.
    await opened.wait()
    print(f"diagnostics on opening {DEFINED}: {time.perf_counter() - start:.2f} s")
    defs, def_cpu = [], []
    found: object = None
    for n in range(args.definitions):
        start, cpu = time.perf_counter(), _cpu(pid)
        found = await client.text_document_definition_async(lsp.DefinitionParams(
            lsp.TextDocumentIdentifier(uri=target_uri), position))
        defs.append(time.perf_counter() - start)
        def_cpu.append(_cpu(pid) - cpu)
        print(f"  definition {n + 1}: {defs[-1]:.3f} s (server CPU {def_cpu[-1]:.3f} s)")
    where = [f"{loc.uri.rsplit('/', 3)[-3:]}:{loc.range.start.line + 1}" for loc in found or []  # type: ignore[union-attr]
             if isinstance(loc, lsp.Location)]
    print(f"definition of {CALL[:-1]} at {DEFINED}:{line_no + 1}: {where}")

    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    warm_save = statistics.median(saves[1:] or saves) if saves else float("nan")
    warm_def = statistics.median(defs[1:] or defs) if defs else float("nan")
    cpu_save = statistics.median(save_cpu[1:] or save_cpu) if save_cpu else float("nan")
    cpu_def = statistics.median(def_cpu[1:] or def_cpu) if def_cpu else float("nan")
    print(f"median warm save → diagnostics: {warm_save:.2f} s (target ≤ 1 s; server CPU {cpu_save:.2f} s); "
          f"median warm definition: {warm_def:.3f} s (target ≤ 0.3 s; server CPU {cpu_def:.3f} s)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="the folder scripts/fetch_corpus.py unpacked the wheels into")
    parser.add_argument("--saves", type=int, default=5)
    parser.add_argument("--definitions", type=int, default=5)
    parser.add_argument("--cache-dir", default=None, help="a cache to reuse (default: a fresh one, so the build is cold)")
    args = parser.parse_args()
    corpus = Path(args.corpus)
    if not (corpus / "sglang" / EDITED).is_file() or not (corpus / "flashinfer").is_dir():
        print(f"lsp_latency: {corpus} holds no sglang/flashinfer wheels; run scripts/fetch_corpus.py", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="castfind-lsp-") as tmp:
        ws = _workspace(corpus, Path(tmp))
        cache = args.cache_dir or str(Path(tmp) / "cache")
        return asyncio.run(_run(args, ws, cache))


if __name__ == "__main__":
    sys.exit(main())
