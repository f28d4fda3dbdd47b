"""``castfind where``: every definition a symbol resolves to, the hops that lead there, its call sites.

Demand-driven: candidate files are found by their text (the symbol's name as an identifier);
only those, and the modules a resolution reaches, are parsed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable

from castfind.analysis.receivers import Receivers, receiver_of
from castfind.analysis.resolve import Clock, Resolved, Resolver, Target, written_module
from castfind.core.scope import DEFAULT_REPORT_EXCLUDE, in_scope
from castfind.core.sourcetext import CALL_GAP, TextTest
from castfind.core.types import Hop
from castfind.read.facts import Attr, Call, Const, Expr, FileFacts, Name, Seq, from_dotted
from castfind.store.discover import SourceFile, package_roots
from castfind.store.index import Index
from castfind.store.memo import Tracker
from castfind.store.modules import OutOfTime
from castfind.store.words import Words, names_asked
from castfind.where.answer import (
    DEFAULT_PARSE_BUDGET,
    Location,
    Unresolved,
    WhereDefinition,
    WhereError,
    WhereResult,
    answer_key,
    carried_answer,
    check_symbol,
    cuts_before,
    load_answer,
    store_answer,
    time_budget,
)

__all__ = ["DEFAULT_PARSE_BUDGET", "Location", "Unresolved", "WhereDefinition", "WhereError", "WhereResult",
           "carried_answer", "where"]

#: Bytes of source parsed a second before a lookup has measured its own rate: libcst extracts ~130 KB a
#: second on an idle core; a loaded one does about half.
_PARSE_RATE_GUESS = 65_000.0
#: How much slower than the rate seen so far one module may parse (:meth:`_Query._no_time_for`).
_DENSE = 2.0

_DEF_NAME = re.compile(rb"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.M)


def _alternation(names: list[str]) -> bytes:
    return b"|".join(re.escape(n.encode()) for n in sorted(names, key=lambda n: (-len(n), n)))


def _call_text(names: list[str]) -> TextTest:
    """Does the text hold a call of one of ``names`` as written (``name(``, ``x.name (``, a comment or a
    line continuation before the ``(``: :data:`castfind.core.sourcetext.CALL_GAP`)? A file without one has no
    call site of them, whatever else it says."""
    pattern = re.compile(rb"(?<![A-Za-z0-9_])(?:%s)%s\(" % (_alternation(names), CALL_GAP))
    return TextTest(pattern, tuple(n.encode() for n in names), lines=False)


def _binding_text(name: str) -> TextTest:
    """Text that looks like a binding of ``name``: ``def``/``class``, an assignment or annotation, an
    import line, ``as name``, a line of a parenthesised import list, a tuple target, a string key."""
    n = re.escape(name.encode())
    b = rb"(?<![A-Za-z0-9_])" + n + rb"(?![A-Za-z0-9_])"
    pattern = re.compile(rb"(?m)^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+" + n + rb"(?![A-Za-z0-9_])"
                         + rb"|" + b + rb"[ \t]*(?::[^\n=]*)?=(?!=)"
                         + rb"|\bimport\b[^\n]*" + b + rb"|\bas[ \t]+" + b
                         + rb"|^[ \t]*" + b + rb"[ \t]*,?[ \t]*(?:#[^\n]*)?$"
                         + rb"|" + b + rb"[ \t]*,[^\n]*=(?!=)|[\"']" + n + rb"[\"']")
    return TextTest(pattern, (name.encode(),), lines=True)


def _alias_text(names: list[str]) -> TextTest:
    """Text an alias of one of ``names`` needs: an import line or a line of a parenthesised import
    list, the name (or a tuple of names ending in it) right after ``=`` or ``return``, or the name as a
    string (a lazy table, a ``getattr`` by name). A file without any has no alias of them castfind would follow."""
    alt = _alternation(names)
    pattern = re.compile(rb"(?m)\bimport\b[^\n]*\b(?:%s)\b|^[ \t]*(?:%s)\b[ \t]*(?:as[ \t]+\w+[ \t]*)?,?[ \t]*(?:#[^\n]*)?$"
                         rb"|(?:(?<![=!<>])=(?!=)|\breturn\b)[ \t(\[]*(?:[\w.]+[ \t]*,[ \t]*)*[\w.]*\b(?:%s)\b"
                         rb"|[\"'](?:%s)[\"']" % (alt, alt, alt, alt))
    # Every branch matches on one line that holds one of the names.
    return TextTest(pattern, tuple(n.encode() for n in names), lines=True)


_FROM_IMPORT = re.compile(rb"from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]*(\([^)]*\)|[^\n]*)")


def _imports_from(sf: SourceFile, data: bytes, homes: frozenset[str], names: re.Pattern[bytes]) -> bool:
    """Does the file hold ``from M import ... name`` (a parenthesised list too) with ``M`` one of
    ``homes`` (relative imports resolved against the file's package)? A file that imports the name
    from where it is defined or re-exported is the likeliest to call it: the budget takes it first."""
    for m in _FROM_IMPORT.finditer(data):
        line_start = data.rfind(b"\n", 0, m.start()) + 1
        if data[line_start:m.start()].strip(b" \t"):
            continue  # `from` inside a line (a word of a comment or string)
        if names.search(m.group(2)) is None:
            continue
        written = m.group(1).decode("ascii", "replace")
        dots = len(written) - len(written.lstrip("."))
        if dots - 1 > sf.module.count(".") + sf.is_package:
            continue  # above the top-level package (Python refuses it)
        if written_module(sf.module, sf.is_package, written) in homes:
            return True
    return False


def _kind_rank(d: WhereDefinition) -> tuple[int, int]:
    nested = "<locals>" in d.qualname
    base = {"function": 0, "class": 0, "method": 1, "module": 2, "alias": 3, "variable": 4}.get(d.kind, 5)
    return (0 if d.exact else 1, base + (3 if nested else 0))


class _Query:
    def __init__(self, index: Index, symbol: str, report_exclude: tuple[str, ...] = (),
                 budget: int | None = DEFAULT_PARSE_BUDGET, clock: Clock | None = None) -> None:
        self.index = index
        self.budget = budget
        self.clock = clock if clock is not None else Clock(None)
        self.spent = 0  # bytes parsed under the budget
        #: The index's parse counters as this lookup began: its rate is measured on its own parses (a kept
        #: index's earlier scan parsed in a pool of workers, at a rate a lookup's parses do not reach).
        self._parsed_before = (index.parsed_bytes, index.parse_seconds)
        #: What each budgeted search left unparsed: (which budget, its description) → files.
        self.unsearched: dict[tuple[str, str], dict[str, SourceFile]] = {}
        #: The files discovery found under the roots, and the installed top-level packages the
        #: definitions found lie in (:meth:`collect`): the files searched for aliases and calls.
        self.discovered = {sf.abspath for sf in index.files}
        self.entered: frozenset[str] = frozenset()
        self.report_exclude = report_exclude
        self.r = Resolver(index)
        self.r.clock = self.clock
        # Past the time budget no module is parsed any more, nor one whose parse would end past it; what is
        # parsed is still read.
        self.r.modules.guard = self._no_time_for
        #: Whether a module's own parse time is weighed against the clock (:meth:`_no_time_for`): once the
        #: definitions are found, for their aliases and call sites.
        self.sized = False
        self.receivers = Receivers(self.r)
        self.words = Words(index)
        self.symbol = symbol
        self.name = symbol.rsplit(".", 1)[-1]
        self.results: list[Resolved] = []
        self.dynamic_receiver: str | None = None  # `--at` on `recv.m` with `recv` of unknown type
        #: Modules that define or re-export the definitions found (:meth:`collect`): a file importing
        #: the name from one of them is searched first under the budget.
        self.homes: frozenset[str] = frozenset()

    # -- entry points -------------------------------------------------------------------------
    def at(self, path: str, line: int) -> None:
        sf = self.index.file_for_path(path)
        if sf is None:
            raise WhereError(f"--at {path}:{line}: no indexed file at that path; pass a file inside a --root")
        facts = self.index.facts_of(sf)
        scope = self.r.scope_of_line(facts, line)
        # A name used inside a def's body is looked up in that def, as Python would.
        found = self.r.resolve_expr(sf.module, scope, from_dotted(self.symbol))
        self.results += found
        recv = receiver_of(self.symbol)
        if recv is not None and scope and not any(x.target.kind == "def" for x in found):
            # `self.token_to_kv_pool.get_key_buffer`: the attribute's declared or assigned type.
            self.results = [x for x in self.results if x.target.kind != "unresolved"]
            types = self.receivers.types_of((sf.module, scope), recv)
            if types is None:
                self.dynamic_receiver = recv
                return
            for cls in sorted(types):
                d = self.r.definitions(cls[0]).get(cls[1])
                if d is not None:
                    self.results += self.r.class_member(cls[0], d, self.name)

    def candidates(self) -> list[WhereDefinition]:
        """Every method named like the last attribute, for a receiver of unknown type: marked
        dynamic, most likely first (methods of classes whose instances are assigned to an attribute
        of the receiver's name somewhere in the roots, then their bases and subclasses)."""
        recv = self.dynamic_receiver
        assert recv is not None
        holder = recv.rsplit(".", 1)[-1]
        assigned: dict[tuple[str, str], tuple[str, int]] = {}  # class → (path, line) of one assignment
        for facts in self.index.load_files(self.words.containing([holder])):
            sf = self.r.modules.file(facts.module)
            if sf is None:
                continue
            for a in facts.assigns:
                if a.target.rsplit(".", 1)[-1] == holder and a.index is None:
                    for cls in self.receivers.value_types(facts.module, a.scope, a.value) or ():
                        assigned.setdefault(cls, (sf.path, a.line))
        out: list[tuple[int, WhereDefinition]] = []
        for facts in self.index.load_files(self.words.containing([self.name])):
            sf = self.r.modules.file(facts.module)
            if sf is None:
                continue
            for d in facts.definitions:
                if d.name != self.name or d.kind != "method":
                    continue
                cls = (facts.module, d.parent)
                if cls in assigned:
                    rank, why = 0, "{}:{} assigns a {} to .{}".format(*assigned[cls], d.parent, holder)
                elif any(self.receivers.related(cls, frozenset({c})) for c in assigned):
                    other = next(c for c in assigned if self.receivers.related(cls, frozenset({c})))
                    rank, why = 1, "{}:{} assigns a {} (related to {}) to .{}".format(
                        *assigned[other], other[1], d.parent, holder)
                else:
                    rank, why = 2, f"a method named {self.name}; no {d.parent} is seen assigned to .{holder}"
                reason = f"the type of {recv} is not known here; {why}"
                out.append((rank, WhereDefinition(f"{facts.module}.{d.qualname}", "method", sf.root, sf.path,
                                                  d.line, (), True, dynamic=True, reason=reason)))
        out.sort(key=lambda x: (x[0], x[1].path, x[1].line))
        return [w for _, w in out]

    def dotted(self) -> bool:
        parts = self.symbol.split(".")
        for i in range(len(parts), 0, -1):
            mod = ".".join(parts[:i])
            if self.r.modules.has(mod):
                cur = [Resolved(Target("module", mod, name=parts[i - 1]), ())]
                for attr in parts[i:]:
                    cur = [Resolved(m.target, (*c.chain, *m.chain)) for c in cur for m in self.r.member(c.target, attr)]
                self.results += cur
                return True
        return False

    def class_member(self) -> None:
        parts = self.symbol.split(".")
        cls_name = parts[0]
        for sf in self.words.containing([cls_name]):
            facts = self.index.facts_of(sf)
            for d in facts.definitions:
                if d.kind == "class" and d.name == cls_name:
                    cur = [Resolved(Target("def", facts.module, d, d.line, name=cls_name), ())]
                    for attr in parts[1:]:
                        cur = [Resolved(m.target, (*c.chain, *m.chain)) for c in cur for m in self.r.member(c.target, attr)]
                    self.results += cur

    def bare(self) -> None:
        files = self.words.containing([self.name])
        binds = _binding_text(self.name)
        facts = self._load(files, f"mentioning {self.name} without an evident binding of it",
                           must=lambda sf: binds(self.index.data(sf)))
        for f in facts:
            self._bindings(f)

    # -- parsing under the budget ------------------------------------------------------------------
    def _load(self, files: list[SourceFile], what: str, must: Callable[[SourceFile], bool] | None = None,
              cap: int | None = None, first: Callable[[SourceFile], bool] | None = None) -> list[FileFacts]:
        """The facts of ``files``: those cached, those ``must`` selects, and the others while the byte budget
        lasts (and the bytes spent stay within ``cap``): those ``first`` selects (a direct import of the
        definition), then the rest, each group smallest first; the files left go to :attr:`unsearched`.
        ``first`` files may spend the whole budget, past ``cap``: they are the likeliest hits. Files are
        parsed in that order while the time budget lasts; those it leaves go to :attr:`unsearched` too."""
        misses = self.index.load_known(self._searchable(files))
        left: set[str] = {sf.abspath for sf in files} - {sf.abspath for sf in self._searchable(files)}
        if misses:
            data = self.index.data
            take = [sf for sf in misses if must is not None and must(sf)]
            forced = {sf.abspath for sf in take}
            ahead = {sf.abspath for sf in misses if first is not None and sf.abspath not in forced and first(sf)}
            rest = sorted((sf for sf in misses if sf.abspath not in forced),
                          key=lambda sf: (sf.abspath not in ahead, len(data(sf)), sf.path))
            for sf in rest:
                size = len(data(sf))
                limit = None if self.budget is None else (
                    self.budget if cap is None or sf.abspath in ahead else min(cap, self.budget))
                if limit is None or self.spent + size <= limit:
                    self.spent += size
                    take.append(sf)
                else:
                    left.add(sf.abspath)
                    self.unsearched.setdefault(("parse budget", what), {})[sf.abspath] = sf
            cut = self._parse_in_time(take, what)
            # Bytes the clock left unparsed are not spent: the byte budget names only what it left itself.
            self.spent -= sum(len(data(sf)) for sf in take if sf.abspath in cut and sf.abspath not in forced)
            left |= cut
        return self.index.load_files([sf for sf in files if sf.abspath not in left])

    def _parse_in_time(self, files: list[SourceFile], what: str) -> set[str]:
        """Parse ``files`` in order, a batch at a time, while the time budget lasts; the files it leaves
        go to :attr:`unsearched` (their abspaths are returned)."""
        i = 0
        while i < len(files):
            batch: list[SourceFile] = []
            size = 0
            # PERF: a batch as big as a parse pool is worth (and ~1 s of parsing on one core at most), so
            # the clock is read often enough to hold the budget without giving up the pool.
            while i < len(files) and len(batch) < 24 and size < 128 * 1024:
                batch.append(files[i])
                size += len(self.index.data(files[i]))
                i += 1
            # A parse cannot be stopped halfway: a batch that would end past the budget at the rate seen
            # so far (a 350 KB file takes seconds on a loaded machine) is not started; the files before
            # the one that would overrun it are (files come smallest first: small ones would otherwise be
            # left for a large one behind them).
            while len(batch) > 1 and not self.clock.fits(size / self.rate()):
                size -= len(self.index.data(batch.pop()))
                i -= 1
            if self.clock.spent() or not self.clock.fits(size / self.rate()):
                self.clock.stop()  # the answer is cut: from here on nothing more is parsed or resolved
                left = files[i - len(batch):]
                for sf in left:
                    self.unsearched.setdefault(("time budget", what), {})[sf.abspath] = sf
                return {sf.abspath for sf in left}
            self.index.load_files(batch)
        return set()

    def _no_time_for(self, sf: SourceFile) -> bool:
        """May ``sf`` not be parsed (to resolve a name through it)? Not once the clock is spent, nor when its
        parse could end past the budget: a parse cannot be stopped halfway. One module is not a batch whose
        rate evens out: a dense one parses at half the rate seen so far (jax's ``lax.py``, 380 KB: 3.8 s where
        the lookup's smaller files went at 170 KB/s, and it ended the lookup 1.5 s past its budget), so it is
        begun only with twice its time at that rate left. Refusing cuts the answer (smaller modules may still be
        parsed), and the module is named among what the time budget left. Before the definitions are found
        (:attr:`sized` false) only the spent clock refuses: a bare name's definition is worth the overrun."""
        if not self.clock.spent():
            if not self.sized or self.clock.fits(_DENSE * len(self.index.data(sf)) / self.rate()):
                return False
            self.clock.skip()
        self.unsearched.setdefault(("time budget", "needed to resolve a name"), {})[sf.abspath] = sf
        return True

    def rate(self) -> float:
        """Bytes of source this lookup parses a second, as measured so far by the index (every extraction: the
        batches searched under the budget and the modules the resolver parsed); before that, a cautious guess."""
        seconds = self.index.parse_seconds - self._parsed_before[1]
        if seconds < 0.2:
            return _PARSE_RATE_GUESS
        return max((self.index.parsed_bytes - self._parsed_before[0]) / seconds, 1.0)

    def _searchable(self, files: list[SourceFile]) -> list[SourceFile]:
        """``files`` less those of installed packages that no definition found lies in: an installed package
        is searched for aliases and calls only when the symbol's own chain enters it."""
        return [sf for sf in files if sf.abspath in self.discovered or sf.module.split(".")[0] in self.entered]

    def budget_unresolved(self) -> list[Unresolved]:
        """One entry per budgeted search that left files unparsed."""
        out = []
        for (why, what), left in self.unsearched.items():
            files = sorted(left.values(), key=lambda sf: (sf.root, sf.path))
            count = f"1 file {what} (this one)" if len(files) == 1 else f"{len(files)} files {what}, this one first"
            if why == "parse budget":
                limit = (f"a lookup parses at most {self.budget:,} bytes of uncached source, "
                         "--parse-budget 0 searches them all")
            else:
                limit = (f"a lookup stops parsing after {self.clock.seconds:g} s, "
                         "--time-budget 0 searches them all")
            out.append(Unresolved(files[0].root, files[0].path, 0, f"not searched ({why}): {count}; {limit}"))
        return out

    def _bindings(self, facts: FileFacts) -> None:
        name, r, module = self.name, self.r, facts.module
        for d in facts.definitions:
            if d.name == name:
                self.results.append(Resolved(Target("def", module, d, d.line, name=name), ()))
        for a in facts.assigns:
            if a.target == name:
                self.results += r.resolve_binding(facts, a)
        for imp in facts.imports:
            if imp.name != "*" and imp.bound == name:
                self.results += r.resolve_binding(facts, imp)
        for dyn in facts.dynamic:
            if dyn.target == name:
                self.results.append(Resolved(Target("unresolved", module, line=dyn.line, name=name, reason=dyn.reason), ()))

    # -- results ------------------------------------------------------------------------------
    def collect(self) -> tuple[list[WhereDefinition], list[Unresolved], set[tuple[str, str]]]:
        defs: dict[tuple[str, str, int], WhereDefinition] = {}
        unresolved: dict[tuple[str, int, str], Unresolved] = {}
        keys: set[tuple[str, str]] = set()
        for res in self.results:
            t = res.target
            sf = self.r.modules.file(t.module)
            if sf is None:
                continue
            if t.kind == "unresolved":
                unresolved.setdefault((sf.path, t.line, t.reason), Unresolved(sf.root, sf.path, t.line, t.reason))
                continue
            if t.kind == "def" and t.definition is not None:
                d = t.definition
                wd = WhereDefinition(f"{t.module}.{d.qualname}", d.kind, sf.root, sf.path, d.line,
                                     self._chain(res.chain, t), d.name == self.name)
                keys.add((t.module, d.qualname))
                for alias in self._aliases_on(res.chain, wd.qualname):
                    k = (alias.root, alias.path, alias.line)
                    if k not in defs or len(alias.chain) < len(defs[k].chain):
                        defs[k] = alias
            elif t.kind == "module":
                wd = WhereDefinition(t.module, "module", sf.root, sf.path, 1, res.chain, t.module.endswith(self.name))
            elif t.kind in ("alias", "variable"):
                scope_name = t.name
                wd = WhereDefinition(f"{t.module}.{scope_name}", t.kind, sf.root, sf.path, t.line,
                                     res.chain, t.name == self.name)
            else:
                continue
            k = (wd.root, wd.path, wd.line)
            old = defs.get(k)
            # Keep the shortest chain to a definition (an exact def beats the same def via an alias).
            if old is None or len(wd.chain) < len(old.chain):
                defs[k] = wd
        ranked = sorted(defs.values(), key=lambda d: (*_kind_rank(d), d.path, d.line))
        modules = {(sf.root, sf.path): sf.module for sf in self.index.files}
        self.entered = frozenset(m.split(".")[0] for m, _ in keys)
        self.homes = frozenset({m for m, _ in keys} | {modules[(h.root, h.path)] for d in ranked for h in d.chain
                                                      if h.kind == "import" and (h.root, h.path) in modules})
        return ranked, sorted(unresolved.values(), key=lambda u: (u.path, u.line)), keys

    def _aliases_on(self, chain: tuple[Hop, ...], target: str) -> list[WhereDefinition]:
        """The module-level ``Name = OtherName`` bindings the chain goes through: each is a definition of
        ``Name`` as much as the definition it stands for (``target``) is."""
        out = []
        for i, h in enumerate(chain):
            sf = self.index.file_for_path(f"{h.root}/{h.path}") if h.kind == "alias" and h.root else None
            if sf is None:
                continue
            for a in self.index.facts_of(sf).assigns:
                if a.line == h.line and a.scope == "" and a.index is None and "." not in a.target \
                        and isinstance(a.value, (Name, Attr)):
                    out.append(WhereDefinition(f"{sf.module}.{a.target}", "alias", sf.root, sf.path, a.line,
                                               chain[: i + 1], a.target == self.name, target=target))
        return out

    def _chain(self, chain: tuple[Hop, ...], t: Target) -> tuple[Hop, ...]:
        if not chain:
            return ()
        d = t.definition
        assert d is not None
        last = self.r.hop(t.module, d.line, "def")
        return (*chain, last) if chain[-1] != last else chain

    def _classes_of(self, keys: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """The classes holding the methods among the found definitions."""
        out: set[tuple[str, str]] = set()
        for module, qualname in keys:
            d = self.r.definitions(module).get(qualname)
            if d is not None and d.kind == "method":
                out.add((module, d.parent))
        return out

    def _hits(self, res: list[Resolved], keys: set[tuple[str, str]]) -> bool:
        return any(x.target.kind == "def" and x.target.definition is not None
                   and (x.target.module, x.target.definition.qualname) in keys for x in res)

    def alias_names(self, names: set[str], keys: set[tuple[str, str]]) -> set[str]:
        """Grow ``names`` with every name bound to the definitions elsewhere (imports, aliases,
        results of functions that return them), until no file adds a new one."""
        done: set[str] = set()
        returners: set[str] = set()
        # A closure a factory returns is a new function object per call: two names bound to two calls of
        # the factory share its definition, not its calls. A binding of a call's result is an alias only
        # when it reaches a definition that is one object (not nested in a function); a binding of the
        # name itself (an import, `x = name`) always is.
        shared = {k for k in keys if ".<locals>." in k[1]}
        own = keys - shared
        while True:
            todo = sorted((names | returners) - done)
            if not todo:
                return names
            done.update(todo)
            text = _alias_text(todo)
            files = [sf for sf in self.words.containing(todo) if text(self.index.data(sf))]
            # Half the budget at most: the call sites need the rest.
            cap = None if self.budget is None else self.budget // 2
            for facts in self._load(files, f"with a possible alias of {self.name}", cap=cap, first=self._direct(todo)):
                for ret in facts.returns:
                    # `return fn` / `return fn, X` hands the callable out; `return fn(...)` does not,
                    # but `return helper(...)` of a helper that hands it out does.
                    value = ret.value
                    if ret.scope and (_refers(value, names)
                                      or (isinstance(value, Call) and _refers(value.func, returners))):
                        returners.add(ret.scope.rsplit(".", 1)[-1])
                for a in facts.assigns:
                    value = a.value
                    called = isinstance(value, Call) and (_refers(value.func, returners) or _names_string(value, names))
                    target = a.target.rsplit(".", 1)[-1]
                    # `_` is the conventional discard: calls through it are not worth reading every file.
                    if target != "_" and (_refers(value, names) or called) and self._hits(
                            self.r.resolve_binding(facts, a), keys if _refers(value, names) else own):
                        names.add(target)
                for imp in facts.imports:
                    if imp.name in names and self._hits(self.r.resolve_binding(facts, imp), keys):
                        names.add(imp.bound)
                for lz in facts.lazy:
                    # A lazily provided name (`__getattr__` tables, deprecated aliases) for the definition.
                    if lz.attr in names and lz.name not in names and self._hits(self.r.lookup(facts.module, lz.name), keys):
                        names.add(lz.name)

    def call_sites(self, defs: list[WhereDefinition], keys: set[tuple[str, str]]) -> list[Location]:
        # The definitions' own names are searched too, but not a factory's closure's: every binding of
        # the factory's result would become a call site of this one.
        names = self.alias_names({self.name} | {d.qualname.rsplit(".", 1)[-1] for d in defs
                                                if ".<locals>." not in d.qualname}, keys)
        methods_only = bool(defs) and all(d.kind == "method" for d in defs)
        classes = self._classes_of(keys)
        out: dict[tuple[str, int], Location] = {}
        calls = _call_text(sorted(names))
        files = [sf for sf in self.words.containing(sorted(names)) if calls(self.index.data(sf))]
        for facts in self._load(files, f"with a call of a name like {self.name}", first=self._direct(sorted(names))):
            sf = self.r.modules.file(facts.module)
            if sf is None:
                continue
            for cs in facts.calls:
                last = cs.func.rsplit(".", 1)[-1]
                if last not in names or cs.func.startswith("super()"):
                    continue
                res = self.r.resolve_expr(facts.module, cs.scope, from_dotted(cs.func))
                hit = any(x.target.definition is not None and (x.target.module, x.target.definition.qualname) in keys
                          for x in res if x.target.kind == "def")
                weak = methods_only and "." in cs.func and not res
                recv = receiver_of(cs.func) if not any(x.target.kind == "def" for x in res) else None
                # Typed dispatch matters only for methods: a receiver of any type cannot make a call of a
                # function (no class holds the definitions) a call site, nor stop one being one.
                try:
                    types = self.receivers.types_of((facts.module, cs.scope), recv) if recv and cs.scope and classes else None
                except OutOfTime:
                    types = None  # the clock says the answer is cut
                if types is not None:
                    # Typed dispatch: `self.quant_method.apply(...)` with the receiver declared as a base
                    # of the class holding this `apply` (or the class itself, or a subclass) calls it; a
                    # receiver typed as an unrelated class does not.
                    hit, weak = any(self.receivers.related(c, types) for c in classes), False
                if hit or weak:
                    out[(sf.path, cs.line)] = Location(sf.root, sf.path, cs.line,
                                                       not in_scope(sf.path, self.report_exclude))
        return sorted(out.values(), key=lambda c: (c.path, c.line))

    def _direct(self, names: list[str]) -> Callable[[SourceFile], bool]:
        """Does a file import one of ``names`` from a module that defines or re-exports the definitions?"""
        pattern = re.compile(rb"(?<![\w.])(?:%s)(?!\w)" % _alternation(names))
        return lambda sf: _imports_from(sf, self.index.data(sf), self.homes, pattern)

    def suggestions(self) -> list[str]:
        names: set[str] = set()
        for sf in self.index.files:
            names.update(m.decode() for m in _DEF_NAME.findall(self.index.data(sf)))
        return difflib.get_close_matches(self.name, sorted(names), n=5, cutoff=0.6)


def _refers(expr: Expr, names: set[str]) -> bool:
    """Is the expression (or a tuple element of it) a name or attribute ending in one of ``names``?"""
    if isinstance(expr, Seq):
        return any(_refers(e, names) for e in expr.elts)
    if isinstance(expr, Name):
        return expr.id in names
    if isinstance(expr, Attr):
        return expr.attr in names
    return False


def _names_string(call: Call, names: set[str]) -> bool:
    """Does the call pass one of ``names`` as a string literal (``lazy("pkg.sub", "fn")``)?"""
    return any(isinstance(a, Const) and a.text.strip("'\"") in names for a in (*call.args, *(v for _, v in call.kwargs)))


def where(index: Index, symbol: str, at: tuple[str, int] | None = None,
          report_exclude: tuple[str, ...] = DEFAULT_REPORT_EXCLUDE,
          budget: int | None = DEFAULT_PARSE_BUDGET, seconds: float | None = None,
          started: float | None = None) -> WhereResult:
    """Resolve ``symbol`` over ``index``. Raises :class:`WhereError` for a malformed query.

    Call sites in files ``report_exclude`` matches are marked ``test``; the top-level packages
    found under the roots come back in ``packages``. With a cache, the answer is carried: the same
    query on the same tree (every file's content key, and the installed packages it looked for
    found where they were) is read back instead of resolved again (``stats["outcome"]``).
    ``budget``: :data:`DEFAULT_PARSE_BUDGET` (None: no limit). ``seconds``: the time budget
    (:func:`~castfind.where.answer.time_budget`: None is the default, 0 none); an answer it cut
    (``stats["time_out"]``) is stored with that budget; cut twice in a row
    (:data:`~castfind.where.answer.REPLAY_AFTER_CUTS`), it is carried to lookups given no more time (PERF: a
    warm lookup on a loaded machine replays it instead of being cut again, whole seconds each time); a
    lookup with more time, or none, computes the whole answer and stores it over the cut one. ``started``:
    when the lookup began (a :func:`time.monotonic` reading taken before its index was opened, as
    :func:`castfind.api.where` does; default now): the time budget covers the index too. The definition
    is resolved first and whole, whatever the clock says; the clock then bounds the aliases and call
    sites, and what it leaves is named in ``unresolved``."""
    check_symbol(symbol)
    clock = Clock(time_budget(seconds), started)
    key = answer_key(index, symbol, at, report_exclude, budget) if index.cache is not None else None
    if key is not None:
        got = load_answer(index, key, clock.seconds, report_exclude)
        if got is not None:
            return got
    tracker = Tracker.of(index)
    # What the answer is carried by: the files it read (their facts or text), the modules it did not find, and
    # the names it looked for in the text of the rest (castfind.store.memo.store_for_reads).
    with tracker.recording() as reads, names_asked(index) as names:
        result, installed = _resolve_where(index, symbol, at, report_exclude, budget, clock)
    if clock.out:
        tracker.forget()  # values memoised past the deadline are cut short
    if key is not None:
        cuts = cuts_before(index, key, clock.seconds) + 1 if clock.out else 0
        store_answer(index, key, result, installed, cut=clock.seconds if clock.out else None, cuts=cuts,
                     reads=reads, names=names, report_exclude=report_exclude)
    return result


def _resolve_where(index: Index, symbol: str, at: tuple[str, int] | None,
                   report_exclude: tuple[str, ...], budget: int | None,
                   clock: Clock) -> tuple[WhereResult, dict[str, bool]]:
    """The answer, and the installed packages looked for (top-level name → found)."""
    packages = package_roots(index.files, report_exclude)
    q = _Query(index, symbol, report_exclude, budget, clock)
    try:
        if at is not None or "." in symbol:
            # The definition first and whole: its chain parses the modules it goes through (a few; the
            # step budget bounds it) past the clock, which then bounds the aliases and call sites. A bare
            # name's bindings are a search of the files that mention it: the clock bounds that one.
            guard, q.r.modules.guard = q.r.modules.guard, None
            try:
                if at is not None:
                    q.at(*at)
                elif not q.dotted():
                    q.class_member()
            finally:
                q.r.modules.guard = guard
        else:
            q.bare()
    except OutOfTime:
        pass  # the bindings found so far; the clock says the answer is cut
    defs, unresolved, keys = q.collect()
    q.sized = True
    try:
        sites = q.call_sites(defs, keys) if defs else []
    except OutOfTime:
        sites = []
    if q.dynamic_receiver is not None and not defs:
        defs = q.candidates()  # candidates only: their call sites would be every call of the name
    unresolved += q.budget_unresolved()
    sugg = q.suggestions() if not defs and not unresolved else []
    stats = {"files": len(index.files), "parsed": index.parsed, "loaded": index.loaded, "steps": q.r.steps,
             "outcome": "computed", "unsearched": sum(len(v) for v in q.unsearched.values()),
             "time_out": clock.out}
    return (WhereResult(symbol, tuple(defs), tuple(sites), tuple(unresolved), tuple(sugg),
                        tuple(index.diagnostics), stats, packages), q.r.modules.installed_looked_for())


