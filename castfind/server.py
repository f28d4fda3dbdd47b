"""``castfind server``: the language server (LSP over stdio, built on pygls and lsprotocol).

What an editor gets:

* **diagnostics** for a file when it is opened or saved: a scan with ``only`` (the whole root is indexed,
  findings are reported on that file; the cache and the carried results make it warm), each finding with
  its rule id, severity and message, and its hot path, provenance and the buffer's declaration as related
  information; a file castfind cannot parse gets one diagnostic saying why;
* a **quick fix** per finding that adds ``# castfind: ignore[ID]`` (to an ignore comment already on the line
  when there is one);
* **hover** on a flagged cast: the finding, its provenance, hot path and cost (:mod:`castfind.report.text`'s
  lines);
* **go to definition**: ``where --at`` on the dotted name under the cursor (the chain's final definitions,
  across the configured roots); nothing, not an error, when it does not resolve.

The roots and ``[tool.castfind]`` come from the client's workspace folders (each folder's ``roots``, else the
folder itself). The first scan of a folder (the index build, started when the client is initialized) reports
its progress. What the server analyses is the file as saved: the index reads files from disk.

Scans run one at a time in a worker thread; a request superseded by a newer one for the same file before it
started is dropped, so a burst of saves costs one or two scans. Bad input (a broken rule file or
``[tool.castfind]``, a file outside every root) is a logged message and, where it has a file, a diagnostic;
an unexpected exception in a scan is logged and the server goes on.
"""

from __future__ import annotations

import asyncio
import os
import re
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from castfind import __version__, api, pipeline
from castfind.core.config import Config, ConfigError, discover_config
from castfind.core.crash import debug
from castfind.core.heap import freeze_all, settle
from castfind.core.rules import UNUSED_SUPPRESSION, RuleError
from castfind.core.types import Finding
from castfind.report.text import format_cost
from castfind.store.discover import DiscoveryError
from castfind.store.index import Index
from castfind.where.answer import WhereError

__all__ = ["Analysis", "CastfindServer", "Folder", "analyse", "build_server", "definitions", "hover_text", "ignore_edit",
           "name_at", "parse_errors", "serve"]

_SEVERITY = {"error": lsp.DiagnosticSeverity.Error, "warning": lsp.DiagnosticSeverity.Warning,
             "info": lsp.DiagnosticSeverity.Information}
_SOURCE = "castfind"
#: Seconds without a scan before the carried results of the last ones are written to the cache.
PERSIST_IDLE_S = 2.0
#: A dotted name as Python spells it (PEP 3131 identifiers).
_DOTTED = re.compile(r"[^\W\d]\w*(?:\s*\.\s*[^\W\d]\w*)*")
#: An ignore comment already on the line, as :mod:`castfind.analysis.findings` reads it.
_IGNORE_LIST = re.compile(r"(#\s*castfind:\s*ignore\b\s*\[)([^\]]*)(\])", re.IGNORECASE)
_IGNORE_BARE = re.compile(r"#\s*castfind:\s*ignore\b(?!\s*\[)", re.IGNORECASE)


@dataclass(frozen=True)
class Folder:
    """A workspace folder: its roots (``[tool.castfind] roots``, else the folder) and its configuration."""

    path: str
    roots: tuple[str, ...]
    config: Config = field(default_factory=Config)

    @classmethod
    def of(cls, path: str) -> tuple[Folder, str | None]:
        """The folder with its configuration, and the problem with that configuration if any (then defaults)."""
        try:
            config = discover_config(path)
        except ConfigError as exc:
            return cls(path, (path,)), f"castfind: {exc}; using the defaults until it is fixed"
        roots = tuple(str(r) for r in config.roots) or (path,)
        return cls(path, roots, config), None

    def holds(self, file: str) -> bool:
        """Is ``file`` under one of the roots?"""
        return any(file == r or file.startswith(r.rstrip(os.sep) + os.sep) for r in map(os.path.abspath, self.roots))

    def request(self, file: str, cache_dir: str | None, progress: Callable[[int, int], None] | None) -> pipeline.ScanRequest:
        """The scan that reports on ``file`` (the whole roots indexed)."""
        c = self.config
        return pipeline.ScanRequest(
            paths=(file,), roots=self.roots, only=True, rules=tuple(str(r) for r in c.rules), exclude=c.exclude,
            entry_points=c.entry_points,
            index=pipeline.IndexOptions(cache_dir=cache_dir, progress=progress))


@dataclass(frozen=True)
class Analysis:
    """One scan's answer for a file: its findings and the diagnostics to publish (findings first)."""

    findings: tuple[Finding, ...] = ()
    diagnostics: tuple[lsp.Diagnostic, ...] = ()
    logged: tuple[str, ...] = ()
    #: No scan ran (bad configuration or rules): the file's last diagnostics stand until one does.
    failed: bool = False
    #: Diagnostics for another file (a broken rule file): uri → diagnostics.
    elsewhere: dict[str, list[lsp.Diagnostic]] = field(default_factory=dict)


def name_at(line: str, character: int) -> str | None:
    """The dotted name under the cursor, up to the end of the identifier the cursor is on
    (``kf.cutlass_like_moe(x)`` with the cursor on ``kf`` is ``kf``); None when the cursor is on no name."""
    for m in _DOTTED.finditer(line):
        if m.start() <= character <= m.end():
            end = m.end()
            for part in re.finditer(r"\w+", m.group()):
                if m.start() + part.start() <= character <= m.start() + part.end():
                    end = m.start() + part.end()
                    break
            return re.sub(r"\s+", "", line[m.start():end])
    return None


def ignore_edit(line: str, line_no: int, rule: str) -> lsp.TextEdit:
    """The edit that makes ``# castfind: ignore[RULE]`` silence a finding on ``line`` (0-based ``line_no``):
    the id added to an ignore list already there, else the comment appended (above the line, alone,
    when the line continues with a backslash)."""
    listed = _IGNORE_LIST.search(line)
    if listed is not None:
        codes = [c.strip() for c in listed.group(2).split(",") if c.strip()]
        new = ", ".join([*codes, rule])
        start, end = listed.start(2), listed.end(2)
        return lsp.TextEdit(lsp.Range(lsp.Position(line_no, start), lsp.Position(line_no, end)), new)
    comment = f"# castfind: ignore[{rule}]"
    body = line.rstrip("\r\n")
    if body.rstrip().endswith("\\"):
        indent = body[:len(body) - len(body.lstrip())]
        return lsp.TextEdit(lsp.Range(lsp.Position(line_no, 0), lsp.Position(line_no, 0)), f"{indent}{comment}\n")
    kept = body.rstrip()
    return lsp.TextEdit(lsp.Range(lsp.Position(line_no, len(kept)), lsp.Position(line_no, len(body))), f"  {comment}")


def _range(f: Finding, lines: Sequence[str]) -> lsp.Range:
    start = lsp.Position(max(f.line - 1, 0), max(f.column - 1, 0))
    if f.end_line <= f.line:
        return lsp.Range(start, lsp.Position(start.line, start.character + max(len(f.expr), 1)))
    last = lines[f.end_line - 1] if f.end_line <= len(lines) else ""
    return lsp.Range(start, lsp.Position(f.end_line - 1, len(last.rstrip("\r\n"))))


def hover_text(f: Finding) -> str:
    """The hover of a flagged cast (Markdown): the finding, then provenance, hot path and cost."""
    parts = [f"**{f.rule}** ({f.name}, {f.severity}): {f.message}"]
    if f.provenance:
        parts.append("provenance: " + " → ".join(f.provenance))
    parts.append("hot path: " + (" → ".join(f.hot_path) if f.hot_path else "none found"))
    parts.append("cost: " + (format_cost(f.cost) if f.cost is not None else "unknown (no allocation found)"))
    if f.fix:
        parts.append("fix: " + f.fix)
    return "\n\n".join(parts)


def _diagnostic(f: Finding, lines: Sequence[str], uri: str) -> lsp.Diagnostic:
    rng = _range(f, lines)
    related = []
    if f.hot_path:
        related.append(lsp.DiagnosticRelatedInformation(lsp.Location(uri, rng), "hot path: " + " → ".join(f.hot_path)))
    if f.provenance:
        related.append(lsp.DiagnosticRelatedInformation(lsp.Location(uri, rng), "provenance: " + " → ".join(f.provenance)))
    where = f.cost.declared_at() if f.cost is not None else None
    if f.cost is not None and where is not None:
        declared = os.path.join(f.root, where[0])
        if os.path.isfile(declared):
            at = lsp.Position(max(where[1] - 1, 0), 0)
            related.append(lsp.DiagnosticRelatedInformation(
                lsp.Location(from_fs_path(os.path.abspath(declared)) or uri, lsp.Range(at, at)),
                f"the buffer ({f.cost.holder}) is allocated here"))
    return lsp.Diagnostic(range=rng, message=f.message, severity=_SEVERITY.get(f.severity), code=f.rule,
                          source=_SOURCE, related_information=related or None,
                          data={"rule": f.rule, "line": f.line})


def internal(what: str, exc: BaseException) -> str:
    """The logged line for an unexpected exception (the server goes on); ``CASTFIND_DEBUG=1`` adds the traceback."""
    line = f"castfind: internal error in {what}: {type(exc).__name__}: {exc}"
    return line + "\n" + "".join(traceback.format_exception(exc)) if debug() else line


def _error_diagnostic(line: int, message: str) -> lsp.Diagnostic:
    at = lsp.Position(max(line - 1, 0), 0)
    return lsp.Diagnostic(range=lsp.Range(at, lsp.Position(at.line, 10_000)), message=message,
                          severity=lsp.DiagnosticSeverity.Error, source=_SOURCE)


def analyse(folder: Folder, file: str, lines: Sequence[str], cache_dir: str | None,
            progress: Callable[[int, int], None] | None = None, session: api.Session | None = None) -> Analysis:
    """Scan ``folder``'s roots and report on ``file`` (never raises for bad input: it becomes the answer).
    ``session``: the folder's warm scans (:class:`castfind.api.Session`; the caller persists them), else a
    scan of its own, as ``castfind scan --only FILE`` runs it."""
    uri = from_fs_path(file) or file
    request = folder.request(file, cache_dir, progress)
    try:
        run = session.scan(request) if session is not None else api.scan(request)
    except RuleError as exc:
        rule_uri = from_fs_path(os.path.abspath(exc.path)) or exc.path
        return Analysis(logged=(f"castfind: {exc}; fix the rule file, then save again",), failed=True,
                        elsewhere={rule_uri: [_error_diagnostic(exc.line, f"{exc.key}: {exc.reason}")]})
    except (ConfigError, DiscoveryError, ValueError, OSError) as exc:
        return Analysis(logged=(f"castfind: {exc}",), failed=True)
    mine = tuple(f for f in run.report.findings if os.path.abspath(os.path.join(f.root, f.path)) == file)
    diags = [_diagnostic(f, lines, uri) for f in mine]
    problems = [(d.line, d.message) for d in run.report.diagnostics
                if any(os.path.abspath(os.path.join(r, d.path)) == file for r in folder.roots)]
    # PERF: a file the scan parsed (it has findings, or its problem is among the scan's diagnostics) is not
    # looked at again; only a file the scan had no reason to parse is asked for its facts.
    if not mine and not problems:
        problems = parse_errors(folder, file, cache_dir, session.index if session is not None else None)
    diags += [_error_diagnostic(line, message) for line, message in problems]
    return Analysis(mine, tuple(diags))


def parse_errors(folder: Folder, file: str, cache_dir: str | None,
                 warm: Index | None = None) -> list[tuple[int, str]]:
    """Why castfind cannot analyse ``file`` (its facts' error: a syntax error, too deep), as (line, message).
    ``warm``: the index the scan just used (:attr:`castfind.api.Session.index`; its session saves it), else one of
    its own."""
    if warm is not None:
        sf = warm.file_for_path(file)
        error = warm.facts_of(sf).error if sf is not None else None
        return [(error[0], f"castfind cannot analyse this file: {error[1]}")] if error else []
    index = api.open_index(list(folder.roots), exclude=folder.config.exclude, cache_dir=cache_dir, jobs=1)
    try:
        sf = index.file_for_path(file)
        if sf is None:
            return []
        error = index.facts_of(sf).error
        return [(error[0], f"castfind cannot analyse this file: {error[1]}")] if error else []
    finally:
        index.save()
        if index.cache is not None:
            index.cache.close()


class CastfindServer(LanguageServer):
    """The server's state: workspace folders, the last findings per file, one scan at a time."""

    def __init__(self, cache_dir: str | None = None) -> None:
        super().__init__("castfind", __version__)
        self.cache_dir = cache_dir
        self.folders: list[Folder] = []
        self.findings: dict[str, tuple[Finding, ...]] = {}
        self.generation: dict[str, int] = {}
        self.elsewhere: set[str] = set()  # rule files with a diagnostic published, cleared by the next good scan
        self.builds: dict[str, asyncio.Task[None]] = {}  # folder → its first index build
        #: folder → its scans, kept warm in this process (the index and carried results stay in memory).
        self.sessions: dict[str, api.Session] = {}
        self.quiet = 0  # requests begun so far: a persist waits until none came for a while (idle)
        self.pending: set[asyncio.Task[None]] = set()
        self.unsaved: dict[str, tuple[Folder, api.Session]] = {}  # folder → its session, not yet persisted
        self.lock = asyncio.Lock()  # scans and persists, one at a time
        self.where_lock = asyncio.Lock()  # definitions, one at a time

    def log(self, message: str, kind: lsp.MessageType = lsp.MessageType.Warning) -> None:
        self.window_log_message(lsp.LogMessageParams(kind, message))

    def set_folders(self, paths: Sequence[str]) -> None:
        """Read each folder's configuration (a broken one is logged; its defaults apply)."""
        self.folders = []
        for p in paths:
            folder, problem = Folder.of(os.path.abspath(p))
            if problem:
                self.log(problem)
            self.folders.append(folder)

    def folder_of(self, file: str) -> Folder | None:
        return next((f for f in self.folders if f.holds(file)), None)

    def session(self, folder: Folder) -> api.Session:
        """``folder``'s warm scans (a folder whose roots changed starts cold: the session checks the roots)."""
        return self.sessions.setdefault(folder.path, api.Session())

    def built(self, folder: Folder) -> asyncio.Task[None]:
        """The first index build of ``folder`` (started on first need, run once)."""
        task = self.builds.get(folder.path)
        if task is None:
            task = self.builds[folder.path] = asyncio.ensure_future(self.build(folder))
        return task

    async def build(self, folder: Folder) -> None:
        """The first index build of ``folder``, with a progress notification (when the client takes one)."""
        token = f"castfind-index-{len(self.builds)}"
        caps = self.client_capabilities.window
        progress = bool(caps and caps.work_done_progress)
        loop = asyncio.get_running_loop()
        if progress:
            await self.work_done_progress.create_async(token)
            self.work_done_progress.begin(token, lsp.WorkDoneProgressBegin(
                title="castfind: indexing", message=folder.path, percentage=0))

        def report(done: int, total: int) -> None:
            if progress:
                value = lsp.WorkDoneProgressReport(message=f"{done}/{total} files", percentage=100 * done // max(total, 1))
                loop.call_soon_threadsafe(self.work_done_progress.report, token, value)

        def whole() -> list[str]:
            request = pipeline.ScanRequest(
                paths=folder.roots, rules=tuple(str(r) for r in folder.config.rules), exclude=folder.config.exclude,
                entry_points=folder.config.entry_points, index=pipeline.IndexOptions(cache_dir=self.cache_dir, progress=report))
            session = self.session(folder)
            session.scan(request)
            notices = session.persist()
            settle()  # PERF: the warm state out of the collector's walks (castfind.core.heap)
            # PERF: a save re-extracts its file in this process (one file: no worker); libcst and the extractor
            # are imported now, not on the first save (half a second).
            import castfind.read.extract  # noqa: F401
            return notices

        try:
            async with self.lock:
                for notice in await asyncio.to_thread(whole):
                    self.log(f"castfind: {notice}")
        except (RuleError, ConfigError, DiscoveryError, ValueError, OSError) as exc:
            self.log(f"castfind: {exc}")
        except Exception as exc:  # noqa: BLE001 - the server must survive; the message names it
            self.log(internal(f"indexing {folder.path}", exc), lsp.MessageType.Error)
        finally:
            if progress:
                self.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message="indexed"))

    async def refresh(self, uri: str) -> None:
        """Scan and publish the diagnostics of ``uri``, unless a newer refresh of it came first."""
        generation = self.generation[uri] = self.generation.get(uri, 0) + 1
        self.quiet += 1  # a persist waiting for quiet waits for this refresh too
        file = to_fs_path(uri)
        if file is None:
            return
        file = os.path.abspath(file)
        folder = self.folder_of(file)
        if folder is None:
            roots = ", ".join(r for f in self.folders for r in f.roots) or "none: the client sent no workspace folder"
            self.log(f"castfind: {file} is outside every root ({roots}); add its folder to [tool.castfind] roots",
                     lsp.MessageType.Info)
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri, []))
            return
        await self.built(folder)
        async with self.lock:
            if self.generation.get(uri) != generation:
                return  # a newer save of the same file: that one publishes
            lines = self.workspace.get_text_document(uri).lines
            session = self.session(folder)
            try:
                answer = await asyncio.to_thread(analyse, folder, file, list(lines), self.cache_dir, None, session)
            except Exception as exc:  # noqa: BLE001 - the server must survive; the message names it
                answer = Analysis(logged=(internal(file, exc),), failed=True)
            self.publish(uri, generation, answer)
            freeze_all()  # PERF: what the scan left out of the collector's walks until the next settle
        self.persist_later(folder, session)

    def persist_later(self, folder: Folder, session: api.Session) -> None:
        """Write what ``session`` carries once no request came for :data:`PERSIST_IDLE_S` seconds (PERF: not
        between a save and the next one's diagnostics, nor beside a definition; the next scan starts from it in
        memory anyway)."""
        self.unsaved[folder.path] = (folder, session)
        self.idle()

    def idle(self) -> None:
        """A request ended: when none comes for :data:`PERSIST_IDLE_S` seconds, write what the sessions carry."""
        if not self.unsaved:
            return
        mark = self.quiet

        async def later() -> None:
            await asyncio.sleep(PERSIST_IDLE_S)
            if self.quiet != mark:
                return  # a newer request: it starts the wait again when it ends
            async with self.lock:
                if self.quiet != mark:
                    return
                unsaved, self.unsaved = self.unsaved, {}
                for folder, session in unsaved.values():
                    await self.persist(folder, session)
                await asyncio.to_thread(settle)  # PERF: the warm state out of the collector's walks (castfind.core.heap)

        self.pending.add(task := asyncio.ensure_future(later()))
        task.add_done_callback(self.pending.discard)

    async def persist(self, folder: Folder, session: api.Session) -> None:
        """Write what ``session`` carries now (a failure is logged; the server goes on)."""
        try:
            for notice in await asyncio.to_thread(session.persist):
                self.log(f"castfind: {notice}")
        except Exception as exc:  # noqa: BLE001 - the server must survive; the message names it
            self.log(internal(f"saving the carried results of {folder.path}", exc), lsp.MessageType.Error)

    def publish(self, uri: str, generation: int, answer: Analysis) -> None:
        """Publish ``answer`` (the diagnostics of ``uri`` unless a newer refresh of it came since, and those of
        the rule files it names)."""
        for message in answer.logged:
            self.log(message)
        for other, diags in answer.elsewhere.items():
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(other, diags))
        if not answer.failed:
            for fixed in sorted(self.elsewhere - set(answer.elsewhere)):
                self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(fixed, []))
        self.elsewhere = set(answer.elsewhere) | (self.elsewhere if answer.failed else set())
        if answer.failed or self.generation.get(uri) != generation:
            return
        self.findings[uri] = answer.findings
        self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri, list(answer.diagnostics)))

    async def definition(self, uri: str, position: lsp.Position) -> list[lsp.Location]:
        """``where --at`` on the name under the cursor; empty when it does not resolve."""
        file = to_fs_path(uri)
        folder = self.folder_of(os.path.abspath(file)) if file else None
        lines = self.workspace.get_text_document(uri).lines
        if folder is None or file is None or position.line >= len(lines):
            return []
        symbol = name_at(lines[position.line], position.character)
        if symbol is None:
            return []
        self.quiet += 1  # no persist beside a lookup
        try:
            return await self.lookup(folder, symbol, os.path.abspath(file), position)
        finally:
            self.idle()

    async def lookup(self, folder: Folder, symbol: str, file: str, position: lsp.Position) -> list[lsp.Location]:
        """The locations :func:`definitions` answers (a problem logged)."""
        async with self.where_lock:  # not behind a scan's or persist's lock: a lookup uses an index of its own
            try:
                found, notes = await asyncio.to_thread(definitions, folder, symbol, file, position.line + 1,
                                                       self.cache_dir, self.session(folder))
            except Exception as exc:  # noqa: BLE001 - the server must survive; the message names it
                found, notes = [], [(internal(f"definition of {symbol}", exc), lsp.MessageType.Info)]
            freeze_all()  # PERF: as after a scan
        for message, kind in notes:
            self.log(message, kind)
        return found


def definitions(folder: Folder, symbol: str, file: str, line: int, cache_dir: str | None,
                session: api.Session | None = None) -> tuple[list[lsp.Location], list[tuple[str, lsp.MessageType]]]:
    """Where ``symbol`` as used at ``file:line`` is defined (the chain's final definitions; resolved ones first,
    a dynamic receiver's candidates only when nothing resolved), and the messages to log: how the answer was
    had (``carried``: the stored answer read back; ``computed``, with the files parsed), what the cache noticed
    (one that cannot be written stores no answer: every lookup computes), or the problem that stopped the lookup.
    ``session``: the folder's warm state (:meth:`castfind.api.Session.where`)."""
    lookup = session.where if session is not None else api.where
    try:
        res = lookup(symbol, list(folder.roots), (file, line), exclude=folder.config.exclude, cache_dir=cache_dir)
    except (WhereError, ConfigError, DiscoveryError, OSError) as exc:
        return [], [(f"castfind: definition of {symbol}: {exc}", lsp.MessageType.Info)]
    outcome = res.stats.get("outcome", "computed")
    how = "answer carried" if outcome == "carried" else f"answer {outcome} ({res.stats.get('parsed', 0)} files parsed)"
    notes = [(f"castfind: definition of {symbol} at {file}:{line}: {how}", lsp.MessageType.Log)]
    notes += [(f"castfind: {d}", lsp.MessageType.Warning) for d in res.diagnostics if d.kind == "cache"]
    found = [d for d in res.definitions if not d.dynamic] or list(res.definitions)
    out = []
    for d in found:
        target = os.path.abspath(os.path.join(d.root, d.path))
        at = lsp.Position(max(d.line - 1, 0), 0)
        out.append(lsp.Location(from_fs_path(target) or target, lsp.Range(at, at)))
    return out, notes


def _folders_of(params: lsp.InitializeParams) -> list[str]:
    if params.workspace_folders:
        return [p for p in (to_fs_path(f.uri) for f in params.workspace_folders) if p]
    if params.root_uri:
        root = to_fs_path(params.root_uri)
        return [root] if root else []
    return [params.root_path] if params.root_path else []


def build_server(cache_dir: str | None = None) -> CastfindServer:
    """The server with its features registered."""
    server = CastfindServer(cache_dir)

    @server.feature(lsp.INITIALIZE)
    def initialize(ls: CastfindServer, params: lsp.InitializeParams) -> None:
        options = params.initialization_options
        if isinstance(options, dict) and isinstance(options.get("cacheDir"), str):
            ls.cache_dir = options["cacheDir"]  # the client's setting wins over --cache-dir
        ls.set_folders(_folders_of(params))

    @server.feature(lsp.INITIALIZED)
    async def initialized(ls: CastfindServer, params: lsp.InitializedParams) -> None:
        for folder in list(ls.folders):
            ls.built(folder)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def folders_changed(ls: CastfindServer, params: lsp.DidChangeWorkspaceFoldersParams) -> None:
        gone = {to_fs_path(f.uri) for f in params.event.removed}
        kept = [f.path for f in ls.folders if f.path not in gone]
        ls.set_folders(kept + [p for p in (to_fs_path(f.uri) for f in params.event.added) if p])

    @server.feature(lsp.SHUTDOWN)
    async def shutdown(ls: CastfindServer, params: None) -> None:
        async with ls.lock:  # what the last scans carry, for the next server's first save
            for path, session in ls.sessions.items():
                folder = next((f for f in ls.folders if f.path == path), None)
                await ls.persist(folder or Folder(path, (path,)), session)

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls: CastfindServer, params: lsp.DidOpenTextDocumentParams) -> None:
        await ls.refresh(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls: CastfindServer, params: lsp.DidSaveTextDocumentParams) -> None:
        await ls.refresh(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: CastfindServer, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.findings.pop(params.text_document.uri, None)
        ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(params.text_document.uri, []))

    @server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION,
                    lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix]))
    def code_action(ls: CastfindServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
        uri = params.text_document.uri
        lines = ls.workspace.get_text_document(uri).lines
        actions = []
        for diag in params.context.diagnostics:
            if (diag.source != _SOURCE or not isinstance(diag.code, str) or diag.code == UNUSED_SUPPRESSION.id
                    or diag.range.start.line >= len(lines)):
                continue  # an unused ignore comment is fixed by deleting it, not by another one
            line_no = diag.range.start.line
            edit = ignore_edit(lines[line_no], line_no, diag.code)
            actions.append(lsp.CodeAction(
                title=f"Ignore {diag.code} on this line (# castfind: ignore[{diag.code}])",
                kind=lsp.CodeActionKind.QuickFix, diagnostics=[diag],
                edit=lsp.WorkspaceEdit(changes={uri: [edit]})))
        return actions

    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(ls: CastfindServer, params: lsp.HoverParams) -> lsp.Hover | None:
        lines = ls.workspace.get_text_document(params.text_document.uri).lines
        pos = params.position
        for f in ls.findings.get(params.text_document.uri, ()):
            rng = _range(f, lines)
            if (rng.start.line, rng.start.character) <= (pos.line, pos.character) <= (rng.end.line, rng.end.character):
                return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, hover_text(f)), rng)
        return None

    @server.feature(lsp.TEXT_DOCUMENT_DEFINITION)
    async def definition(ls: CastfindServer, params: lsp.DefinitionParams) -> list[lsp.Location]:
        return await ls.definition(params.text_document.uri, params.position)

    return server


def serve(cache_dir: str | None = None) -> None:
    """Run the server on standard input and output until the client ends it."""
    build_server(cache_dir).start_io()
