"""``castfind server`` end to end: a real LSP client (pytest-lsp) drives the server over stdio.

The workspace is a copy of ``fixtures/lsp/workspace`` (two roots, ``serving`` and ``kernels``, named by its
``[tool.castfind]``), so edits are written to the copy; the cache is the test's own (``initializationOptions``).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls")
pytest_lsp = pytest.importorskip("pytest_lsp")

from lsprotocol import types as lsp  # noqa: E402
from pygls.uris import from_fs_path  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "lsp" / "workspace"
CAST = "        k = self.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q.dtype)\n"
QUIET = "        k = self.token_to_kv_pool.get_key_buffer(layer.layer_id)\n"


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "castfind", "server"]))
async def client(lsp_client: LanguageClient, tmp_path: Path):
    """The server on a fresh copy of the workspace, initialized."""
    ws = tmp_path / "workspace"
    shutil.copytree(FIXTURE, ws)
    params = lsp.InitializeParams(
        capabilities=lsp.ClientCapabilities(window=lsp.WindowClientCapabilities(work_done_progress=True)),
        workspace_folders=[lsp.WorkspaceFolder(uri=from_fs_path(str(ws)), name="workspace")],
        initialization_options={"cacheDir": str(tmp_path / "cache")})
    await lsp_client.initialize_session(params)
    lsp_client.workspace_path = ws  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


def _file(client: LanguageClient, rel: str) -> tuple[Path, str]:
    path = client.workspace_path / rel  # type: ignore[attr-defined]
    return path, from_fs_path(str(path))


async def _diagnostics(client: LanguageClient, uri: str, timeout: float = 60) -> list[lsp.Diagnostic]:
    """Wait for the next diagnostics published for ``uri``."""
    client.diagnostics.pop(uri, None)
    async with asyncio.timeout(timeout):
        while uri not in client.diagnostics:
            await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    return list(client.diagnostics[uri])


def _open(client: LanguageClient, path: Path, uri: str) -> None:
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=path.read_text())))


def _save(client: LanguageClient, path: Path, uri: str, text: str, version: int) -> None:
    """An edit of the whole buffer, written to disk and saved, as an editor does on save."""
    path.write_text(text)
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
        [lsp.TextDocumentContentChangeWholeDocument(text=text)]))
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(uri=uri)))


def _summary(diags: list[lsp.Diagnostic]) -> list[tuple[str | int | None, int, int]]:
    return [(d.code, d.range.start.line + 1, d.range.start.character + 1) for d in diags]


@pytest.mark.asyncio
async def test_diagnostics_on_open_then_after_an_edit_that_removes_and_adds_the_cast(client: LanguageClient) -> None:
    path, uri = _file(client, "serving/serving/decode.py")
    _open(client, path, uri)
    diags = await _diagnostics(client, uri)
    assert _summary(diags) == [("CF101", 13, 13)]
    d = diags[0]
    assert d.source == "castfind" and d.severity == lsp.DiagnosticSeverity.Error
    assert "casts the whole kv-cache to q.dtype" in d.message
    related = {r.message for r in d.related_information or []}
    assert "hot path: serving.decode.Decoder.forward_decode" in related
    assert "provenance: get_key_buffer() returns the whole kv-cache" in related
    allocated = [r for r in d.related_information or [] if "allocated here" in r.message]
    assert [(r.location.uri.endswith("serving/serving/cache.py"), r.location.range.start.line) for r in allocated] \
        == [(True, 8)]
    # The progress of the first index build: created, begun, ended.
    reports = [v for values in client.progress_reports.values() for v in values]
    assert reports and isinstance(reports[0], lsp.WorkDoneProgressBegin) and isinstance(reports[-1], lsp.WorkDoneProgressEnd)

    original = path.read_text()
    assert CAST in original
    _save(client, path, uri, original.replace(CAST, QUIET), 2)
    assert await _diagnostics(client, uri) == []
    _save(client, path, uri, original, 3)
    assert _summary(await _diagnostics(client, uri)) == [("CF101", 13, 13)]


@pytest.mark.asyncio
async def test_quick_fix_adds_the_ignore_comment_and_hover_shows_provenance_hot_path_and_cost(
        client: LanguageClient) -> None:
    path, uri = _file(client, "serving/serving/decode.py")
    _open(client, path, uri)
    diags = await _diagnostics(client, uri)
    actions = await client.text_document_code_action_async(lsp.CodeActionParams(
        lsp.TextDocumentIdentifier(uri=uri), diags[0].range, lsp.CodeActionContext(diagnostics=diags)))
    assert actions is not None and len(actions) == 1
    action = actions[0]
    assert isinstance(action, lsp.CodeAction) and action.kind == lsp.CodeActionKind.QuickFix
    assert action.edit is not None and action.edit.changes is not None
    (edit,) = action.edit.changes[uri]
    end = len(CAST.rstrip("\n"))
    assert (edit.range.start.line, edit.range.start.character, edit.range.end.character, edit.new_text) \
        == (12, end, end, "  # castfind: ignore[CF101]")
    # Applied and saved, the finding is gone (and the comment is not reported as unused).
    lines = path.read_text().splitlines(keepends=True)
    lines[12] = lines[12].rstrip("\n") + edit.new_text + "\n"
    _save(client, path, uri, "".join(lines), 2)
    assert await _diagnostics(client, uri) == []
    _save(client, path, uri, FIXTURE.joinpath("serving/serving/decode.py").read_text(), 3)
    await _diagnostics(client, uri)

    hover = await client.text_document_hover_async(lsp.HoverParams(
        lsp.TextDocumentIdentifier(uri=uri), lsp.Position(12, 40)))
    assert hover is not None and isinstance(hover.contents, lsp.MarkupContent)
    text = hover.contents.value
    assert text.startswith("**CF101** (")
    assert "provenance: get_key_buffer() returns the whole kv-cache" in text
    assert "hot path: serving.decode.Decoder.forward_decode" in text
    assert "cost: [tokens, width] torch.float8_e4m3fn→" in text and "KeyCache.k_buffer" in text
    # Off the cast: no hover.
    assert await client.text_document_hover_async(lsp.HoverParams(
        lsp.TextDocumentIdentifier(uri=uri), lsp.Position(0, 2))) is None


@pytest.mark.asyncio
async def test_definition_follows_the_alias_and_the_re_export_into_the_other_package(client: LanguageClient) -> None:
    path, uri = _file(client, "serving/serving/decode.py")
    _open(client, path, uri)
    await _diagnostics(client, uri)
    line = path.read_text().splitlines().index("        out = run_decode(q, k, picked)")
    got = await client.text_document_definition_async(lsp.DefinitionParams(
        lsp.TextDocumentIdentifier(uri=uri), lsp.Position(line, 16)))
    assert isinstance(got, list) and len(got) == 1
    target = got[0]
    assert isinstance(target, lsp.Location)
    assert target.uri == _file(client, "kernels/kernels/paged.py")[1] and target.range.start.line == 3
    # The same request again reads its stored answer back (the server logs how each answer was had).
    again = await client.text_document_definition_async(lsp.DefinitionParams(
        lsp.TextDocumentIdentifier(uri=uri), lsp.Position(line, 16)))
    assert again == got
    said = [m.message.rsplit(": ", 1)[-1] for m in client.log_messages
            if m.message.startswith("castfind: definition of run_decode at ")]
    assert len(said) == 2 and said[0].startswith("answer computed (") and said[1] == "answer carried", said
    assert not [m.message for m in client.log_messages if "cache" in m.message and "cannot" in m.message]
    # A name nothing defines: an empty answer, not an error.
    line = path.read_text().splitlines().index("        return missing_kernel(out)")
    assert await client.text_document_definition_async(lsp.DefinitionParams(
        lsp.TextDocumentIdentifier(uri=uri), lsp.Position(line, 18))) == []


@pytest.mark.asyncio
async def test_bad_input_is_a_diagnostic_or_a_message_and_the_server_goes_on(client: LanguageClient) -> None:
    ws: Path = client.workspace_path  # type: ignore[attr-defined]
    # A file that does not parse: one diagnostic on its line.
    broken, broken_uri = _file(client, "serving/serving/broken.py")
    broken.write_text("def f(:\n    pass\n")
    _open(client, broken, broken_uri)
    diags = await _diagnostics(client, broken_uri)
    assert [(d.range.start.line, d.severity) for d in diags] == [(0, lsp.DiagnosticSeverity.Error)]
    assert diags[0].message.startswith("castfind cannot analyse this file: ")
    # One the scan parses (it holds a cast of a buffer): the scan's own parse diagnostic.
    candidate, candidate_uri = _file(client, "serving/serving/broken_cast.py")
    candidate.write_text("def g(self:\n    return self.token_to_kv_pool.get_key_buffer(0).to(x)\n")
    _open(client, candidate, candidate_uri)
    diags = await _diagnostics(client, candidate_uri)
    assert [(d.range.start.line, d.severity) for d in diags] == [(0, lsp.DiagnosticSeverity.Error)]
    assert diags[0].message.startswith("syntax error: '(' was never closed")
    # A file outside every root: a logged message, no diagnostics.
    outside = ws / "notes.py"
    outside.write_text("x = 1\n")
    outside_uri = from_fs_path(str(outside))
    _open(client, outside, outside_uri)
    assert await _diagnostics(client, outside_uri) == []
    assert any(f"{outside} is outside every root" in m.message for m in client.log_messages)
    # A broken rule file named by [tool.castfind]: a diagnostic on the rule file, a logged message.
    rules = ws / "bad_rules.yaml"
    rules.write_text("rules:\n  - id: CF999\n    severity: fatal\n")
    (ws / "pyproject.toml").write_text('[tool.castfind]\nroots = ["serving", "kernels"]\nrules = ["bad_rules.yaml"]\n')
    client.workspace_did_change_workspace_folders(lsp.DidChangeWorkspaceFoldersParams(lsp.WorkspaceFoldersChangeEvent(
        added=[lsp.WorkspaceFolder(uri=from_fs_path(str(ws)), name="workspace")],
        removed=[lsp.WorkspaceFolder(uri=from_fs_path(str(ws)), name="workspace")])))
    path, uri = _file(client, "serving/serving/decode.py")
    _open(client, path, uri)
    rules_uri = from_fs_path(str(rules))
    rule_diags = await _diagnostics(client, rules_uri)
    assert len(rule_diags) == 1 and rule_diags[0].severity == lsp.DiagnosticSeverity.Error
    assert any("bad_rules.yaml" in m.message and "fix the rule file" in m.message for m in client.log_messages)
    # Still serving: the rule file fixed, the file's finding is back.
    rules.unlink()
    (ws / "pyproject.toml").write_text('[tool.castfind]\nroots = ["serving", "kernels"]\n')
    client.workspace_did_change_workspace_folders(lsp.DidChangeWorkspaceFoldersParams(lsp.WorkspaceFoldersChangeEvent(
        added=[lsp.WorkspaceFolder(uri=from_fs_path(str(ws)), name="workspace")],
        removed=[lsp.WorkspaceFolder(uri=from_fs_path(str(ws)), name="workspace")])))
    client.diagnostics.pop(rules_uri)
    _save(client, path, uri, path.read_text(), 2)
    assert _summary(await _diagnostics(client, uri)) == [("CF101", 13, 13)]
    assert list(client.diagnostics[rules_uri]) == []  # the rule file's diagnostic cleared


@pytest.mark.asyncio
async def test_the_server_survives_100_rapid_edits_and_reports_on_the_last(client: LanguageClient) -> None:
    path, uri = _file(client, "serving/serving/decode.py")
    _open(client, path, uri)
    await _diagnostics(client, uri)
    original = path.read_text()
    quiet = original.replace(CAST, QUIET)
    for version in range(2, 102):
        _save(client, path, uri, quiet if version % 2 == 0 else original, version)
    # The 100th edit (version 101) restored the cast: the diagnostics the server settles on have it.
    async with asyncio.timeout(120):
        while True:
            diags = await _diagnostics(client, uri)
            if _summary(diags) == [("CF101", 13, 13)]:
                break
    hover = await client.text_document_hover_async(lsp.HoverParams(
        lsp.TextDocumentIdentifier(uri=uri), lsp.Position(12, 40)))
    assert hover is not None
    assert client.error is None


def test_the_ignore_edit_joins_an_ignore_list_or_appends_or_goes_above_a_continued_line() -> None:
    from castfind.server import ignore_edit

    line = "        k = pool.get().to(q.dtype)  # castfind: ignore[CF102]\n"
    edit = ignore_edit(line, 4, "CF101")
    start = line.index("CF102")
    assert (edit.range.start.line, edit.range.start.character, edit.range.end.character, edit.new_text) \
        == (4, start, start + len("CF102"), "CF102, CF101")
    edit = ignore_edit("    x = a.to(b)   \n", 0, "CF101")
    assert (edit.range.start.character, edit.range.end.character, edit.new_text) == (15, 18, "  # castfind: ignore[CF101]")
    edit = ignore_edit("    x = a.to(b) + \\\n", 7, "CF101")
    assert (edit.range.start.line, edit.range.start.character, edit.range.end.character, edit.new_text) \
        == (7, 0, 0, "    # castfind: ignore[CF101]\n")


def test_the_name_under_the_cursor_ends_with_the_identifier_it_is_on() -> None:
    from castfind.server import name_at

    line = "    out = kf.cutlass_like_moe(x, self.pool . get)"
    assert name_at(line, line.index("kf") + 1) == "kf"
    assert name_at(line, line.index("cutlass") + 3) == "kf.cutlass_like_moe"
    assert name_at(line, line.index("get")) == "self.pool.get"
    assert name_at(line, line.index("(")) == "kf.cutlass_like_moe"  # just past its end: the name before
    assert name_at(line, 1) is None


def _cli_only(ws: Path, rel: str, cache: Path) -> list[dict]:
    """``castfind scan --only REL`` from the workspace folder, as a person runs it (its own cache)."""
    import json
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run([sys.executable, "-m", "castfind", "scan", "--only", rel, "--format", "json",
                           "--cache-dir", str(cache), "--exit-zero"],
                          cwd=ws, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [{k: v for k, v in f.items() if k not in ("file", "root")} for f in json.loads(done.stdout)["findings"]]


def test_the_warm_server_reports_what_scan_only_reports_after_each_edit(tmp_path: Path) -> None:
    """The server's save handler (:func:`castfind.server.analyse` on the folder's warm :class:`castfind.api.Session`)
    against ``castfind scan --only`` after edits of the reported file and of another file it depends on (the
    buffer's allocation, which decides the cost and the severity); the answers must change along the way."""
    from castfind import api
    from castfind.server import Folder, analyse

    ws = tmp_path / "workspace"
    shutil.copytree(FIXTURE, ws)
    folder, problem = Folder.of(str(ws))
    assert problem is None
    session = api.Session()
    warm_cache, cli_cache = str(tmp_path / "warm"), tmp_path / "cli"
    session.scan(replace_request(folder, warm_cache))  # the first index build, as the server runs it
    session.persist()
    decode, cache = ws / "serving/serving/decode.py", ws / "serving/serving/cache.py"
    original, allocation = decode.read_text(), cache.read_text()
    small = allocation.replace("torch.zeros(tokens, width, dtype", "torch.zeros(4, dtype")
    edits = [(decode, original), (decode, original.replace(CAST, QUIET)), (decode, original), (cache, small),
             (cache, allocation), (decode, original.replace("def forward_decode", "def prepare"))]
    seen = []
    for path, text in edits:
        path.write_text(text)
        served = analyse(folder, str(decode), decode.read_text().splitlines(True), warm_cache, session=session)
        session.persist()
        assert not served.failed
        got = [{k: v for k, v in f.to_dict().items() if k != "root"} for f in served.findings]  # the root as typed
        assert got == _cli_only(ws, "serving/serving/decode.py", cli_cache), path.name
        seen.append([(f["rule"], f["line"], f["severity"]) for f in got])
    assert seen[0] == seen[2] == seen[4] == [("CF101", 13, "error")]
    assert seen[1] == []  # the cast removed
    assert seen[3] == [("CF101", 13, "warning")]  # the buffer small by construction: a warning
    assert seen[5] != seen[0]  # no longer on a hot path


def replace_request(folder, cache_dir: str):
    """The server's first index build of ``folder`` (every file reported on)."""
    from castfind import pipeline

    c = folder.config
    return pipeline.ScanRequest(paths=folder.roots, rules=tuple(str(r) for r in c.rules), exclude=c.exclude,
                                entry_points=c.entry_points, index=pipeline.IndexOptions(cache_dir=cache_dir))
