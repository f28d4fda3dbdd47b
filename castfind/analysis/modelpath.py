"""The model's own path: which classes a deployment runs, from ``--model-config``'s ``architectures`` and the
component flags (``--attention-backend``, ``--quantization``), read from the code and the rule files' ``models:``.

Two steps, kept apart so the selection can later restrict the call graph's search:

* :func:`select` computes a :class:`ModelPath`, plain data: the model class (the class an ``EntryClass``-style
  registration names, whose name is an ``architectures`` entry; else any indexed class of that name), its
  **module set** (the classes its methods construct — ``__init__``'s layers, in lambdas and comprehensions too,
  and in helpers of its own module they call — transitively, with their base classes), the **selected**
  components (the classes the flag's registry entry yields, with their bases) and the **excluded** ones
  (every class any entry of that registry yields, less the selected), each with why.
* :func:`off_path` checks one finding against it: the function nearest the cast (the cast's own, then its hot
  path back to the entry) that is a method of a class of the models' packages (those holding a module that
  registers a model) or of a registry's component decides: off when that is an excluded component or a class the
  module set lacks. Classes of neither kind (the runner, the pools, shared layers) and module-level functions decide
  nothing: a path of them only is on every model's path.

What is general is the shape (a registration variable, a decorator that takes the key, a dict keyed by the flag's
spellings, a branch test decided by a config field); the spellings are data (:class:`castfind.core.rules.ModelSpec`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from castfind.analysis.deployment import Deployment
from castfind.analysis.resolve import Resolver, absolute_module
from castfind.core.rules import ModelSpec, Registry
from castfind.core.types import Diagnostic, Finding
from castfind.read.facts import Call, CallSite, Const, Definition, FileFacts, Guard, Seq, dotted, from_dotted
from castfind.store.index import Index
from castfind.store.words import Words

__all__ = ["ModelPath", "off_path", "select"]

#: How deep helpers called from a constructor are followed (``__init__`` → ``self._build`` → ``_layers``).
_HELPER_DEPTH = 3

ClassKey = tuple[str, str]  # (module, class qualname)


@dataclass(frozen=True)
class ModelPath:
    """What the deployment runs, as data. ``model``: the model class's name; ``entry_classes``: the module set
    and the selected components (``module.Class`` labels); ``model_modules``: the modules of the packages that
    hold registered models (``pkg.models.*``: the models and their own helpers); ``excluded``: label → why it is
    off (an unselected component)."""

    model: str
    entry_classes: frozenset[str]
    model_modules: frozenset[str]
    excluded: Mapping[str, str]
    #: The modules the model's and the selected components' modules import, transitively (at any depth, in a
    #: function too); empty: not computed, nothing is judged by it. A finding in a sub-package (the first two
    #: parts of a module name: ``pkg.app``) that none of them lies in is another application's code (a diffusion
    #: server beside the LLM server in one distribution): no import of this deployment's code reaches it. The
    #: engine's own code the model does not import (its runner, its pools) shares the model's sub-package.
    imported: frozenset[str] = frozenset()

    def reaches(self, module: str) -> bool:
        """Is ``module`` in a sub-package the deployment's imports reach (True when none were computed)?"""
        if not self.imported or not module:
            return True
        return _area(module) in self._areas

    @cached_property
    def _areas(self) -> frozenset[str]:
        """The sub-packages of :attr:`imported`, computed once per path (PERF: thousands of modules, asked per
        finding)."""
        return frozenset(_area(m) for m in self.imported)

    def to_dict(self) -> dict[str, object]:
        return {"model": self.model, "entry_classes": sorted(self.entry_classes),
                "model_modules": sorted(self.model_modules), "excluded": dict(sorted(self.excluded.items())),
                "imported": sorted(self.imported)}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> ModelPath:
        """The inverse of :meth:`to_dict`; ValueError on anything else (a damaged stored row)."""
        model, entry, modules, excluded = d.get("model"), d.get("entry_classes"), d.get("model_modules"), d.get("excluded")
        if not (isinstance(model, str) and isinstance(entry, list) and isinstance(modules, list)
                and isinstance(excluded, dict) and all(isinstance(x, str) for x in (*entry, *modules))
                and all(isinstance(k, str) and isinstance(v, str) for k, v in excluded.items())):
            raise ValueError("not a stored model path")
        imported = d.get("imported", [])
        if not isinstance(imported, list) or not all(isinstance(x, str) for x in imported):
            raise ValueError("not a stored model path")
        return cls(model, frozenset(entry), frozenset(modules), excluded, frozenset(imported))

    def verdict(self, label: str) -> str | None:
        """Whose code the function ``label`` (``module.Class.method``) is: "" this deployment's, the reason when it is
        off it (an unselected component, a class of the models' packages the module set lacks), None when neither
        (shared code, or a module-level function of the models' packages)."""
        parts = label.split(".")
        for end in range(len(parts) - 1, 0, -1):
            cls = ".".join(parts[:end])
            if cls in self.excluded:
                return self.excluded[cls]
            if cls in self.entry_classes:
                return ""
            if cls in self.model_modules:  # a module-level function (of a module that is also a package's)
                return None
            if cls.rpartition(".")[0] in self.model_modules:
                return f"model: not on {self.model}'s path"
        return None


def off_path(path: ModelPath, finding: Finding) -> str:
    """Why ``finding`` is off the model's path (``"model: ..."``), or "" when it is on it.

    The function nearest the cast on its hot path (the cast's own first) that is a model's or a component's decides:
    the call graph chose one path before the model was known, and another model's class that reaches this
    model's code (a subclass calling an inherited method) must not hide the model's own cast. Shared code decides
    nothing; a path of shared code only is on every model's path."""
    if not path.reaches(finding.module):
        return f"model: no import of {path.model}'s code or its components reaches {_area(finding.module)}"
    own = f"{finding.module}.{finding.function}" if finding.module and finding.function else ""
    for label in reversed((*finding.hot_path, own)):
        why = path.verdict(label) if label else None
        if why is not None:
            return why
    return ""


# --------------------------------------------------------------------------- selection


class _Selector:
    def __init__(self, index: Index, resolver: Resolver, spec: ModelSpec, config: Mapping[str, object],
                 deployment: Deployment | None = None) -> None:
        self.index, self.r, self.spec, self.config = index, resolver, spec, config
        self.deployment = deployment
        self.words = Words(index)
        self._calls: dict[str, dict[str, list[CallSite]]] = {}

    # -- helpers -------------------------------------------------------------------------------
    def facts(self, module: str) -> FileFacts | None:
        return self.r.modules.facts(module)

    def calls_in(self, module: str, scope: str) -> list[CallSite]:
        """The calls of ``scope`` and of the lambdas, comprehensions and functions nested in it."""
        by_scope = self._calls.get(module)
        if by_scope is None:
            by_scope = {}
            facts = self.facts(module)
            for c in facts.calls if facts is not None else ():
                by_scope.setdefault(c.scope, []).append(c)
            self._calls[module] = by_scope
        return [c for s, calls in by_scope.items() if s == scope or s.startswith(scope + ".") for c in calls]

    def classes(self, module: str, scope: str, text: str) -> list[tuple[ClassKey, Definition]]:
        out = []
        for res in self.r.resolve_expr(module, scope, from_dotted(text)):
            t = res.target
            if t.is_class and t.definition is not None:
                out.append(((t.module, t.definition.qualname), t.definition))
        return out

    def with_bases(self, found: Iterable[tuple[ClassKey, Definition]]) -> dict[ClassKey, Definition]:
        out: dict[ClassKey, Definition] = {}
        work = list(found)
        while work:
            key, d = work.pop()
            if key in out:
                continue
            out[key] = d
            work += [((b.target.module, b.target.definition.qualname), b.target.definition)
                     for b in self.r.bases(key[0], d) if b.target.definition is not None]
        return out

    def imported(self, seeds: Iterable[str]) -> frozenset[str]:
        """The indexed modules ``seeds`` import, transitively, with the seeds: ``import a.b`` and ``from a.b import
        c`` reach ``a.b`` (and ``a.b.c`` when it is a module) and the packages above it, relative imports
        resolved; each level's files loaded in one batch."""
        known = {sf.module: sf for sf in self.index.files}
        out: set[str] = set()
        level = {m for m in seeds if m in known}
        while level:
            out |= level
            nxt: set[str] = set()
            for facts in self.index.load_files(known[m] for m in sorted(level)):
                if facts.error is not None:
                    continue
                sf = known.get(facts.module)
                package = sf is not None and sf.is_package
                for imp in facts.imports:
                    base = absolute_module(facts.module, package, imp)
                    names = [base, f"{base}.{imp.name}"] if imp.name else [base]
                    parts = base.split(".")
                    names += [".".join(parts[:i]) for i in range(1, len(parts))]
                    nxt.update(n for n in names if n in known and n not in out)
            level = nxt
        return frozenset(out)

    def files_with(self, names: Sequence[str]) -> list[FileFacts]:
        return [f for f in self.index.load_files(self.words.containing(names)) if f.error is None]

    # -- the model -----------------------------------------------------------------------------
    def registered(self) -> tuple[dict[str, list[tuple[ClassKey, Definition]]], set[str]]:
        """Model classes by name, from every registration variable; and the modules that register one."""
        by_name: dict[str, list[tuple[ClassKey, Definition]]] = {}
        modules: set[str] = set()
        names = self.spec.entry_variables
        for facts in self.files_with(names):
            for a in facts.assigns:
                if a.scope or a.target not in names:
                    continue
                modules.add(facts.module)
                values = a.value.elts if isinstance(a.value, Seq) else (a.value,)
                for v in values:
                    for res in self.r.resolve_expr(facts.module, "", v):
                        t = res.target
                        if t.is_class and t.definition is not None:
                            by_name.setdefault(t.definition.name, []).append(((t.module, t.definition.qualname),
                                                                              t.definition))
                            modules.add(t.module)
        return by_name, modules

    def module_set(self, start: list[tuple[ClassKey, Definition]]) -> dict[ClassKey, Definition]:
        """The classes ``start`` constructs in its methods (and the helpers of its module they call), transitively,
        with bases."""
        out: dict[ClassKey, Definition] = {}
        work = list(start)
        while work:
            key, d = work.pop()
            if key in out:
                continue
            out[key] = d
            module = key[0]
            work += [((b.target.module, b.target.definition.qualname), b.target.definition)
                     for b in self.r.bases(module, d) if b.target.definition is not None]
            defs = self.r.definitions(module)
            # Every method: a class built per call (a forward's output record) is the model's too.
            scopes = [(q, 0) for q, m in defs.items() if m.parent == d.qualname and m.kind != "class"]
            seen: set[str] = set()
            while scopes:
                scope, depth = scopes.pop()
                if scope in seen or scope not in defs:
                    continue
                seen.add(scope)
                for call in self.calls_in(module, scope):
                    if call.func.startswith("self.") and call.func.count(".") == 1:
                        if depth < _HELPER_DEPTH:
                            scopes.append((f"{d.qualname}.{call.func[5:]}", depth + 1))
                        continue
                    for res in self.r.resolve_expr(module, call.scope, from_dotted(call.func)):
                        t = res.target
                        if t.definition is None:
                            continue
                        if t.is_class:
                            work.append(((t.module, t.definition.qualname), t.definition))
                        elif t.module == module and t.definition.kind == "function" and depth < _HELPER_DEPTH:
                            scopes.append((t.definition.qualname, depth + 1))
        return out

    # -- the components ------------------------------------------------------------------------
    def holds(self, guards: Sequence[Guard], tests: Mapping[str, str]) -> str:
        """Why a factory's branch never runs ("" when it may): a guard's test the config decides (the ``tests``
        data) and fails, or one the deployment's bindings evaluate false (``if not _is_musa:`` on
        ``--platform musa``: :meth:`Deployment.holds`, the one evaluator); tests neither decides hold."""
        for g in guards:
            test, value = g.test.strip(), True
            while test.startswith("not "):
                test, value = test[4:].strip(), not value
            field = tests.get(test.rsplit(".", 1)[-1])
            if field is not None:
                if (field in self.config) is not (value ^ g.negated):
                    return "the model config rules it out"
                continue
            if self.deployment is not None and self.deployment.holds(g) is False:
                _, used = self.deployment.evaluate(g.test)
                return f"{', '.join(used)} rules it out"
        return ""

    def entries(self, reg: Registry) -> dict[str, list[tuple[ClassKey, Definition, str]]]:
        """Each key of the registry → the classes its entry yields, each with why the config or the deployment
        rules it out ("" when neither does: a factory's branch test the ``tests`` data or the bindings decide)."""
        out: dict[str, list[tuple[ClassKey, Definition, str]]] = {}
        tests = dict(reg.tests)
        for facts in self.files_with(reg.decorators) if reg.decorators else ():
            functions = sorted((d for d in facts.definitions if d.kind == "function"), key=lambda d: d.line)
            for call in facts.calls:
                name = call.func.rsplit(".", 1)[-1]
                if call.scope or name not in reg.decorators or not call.args:
                    continue
                first = call.args[0]
                key = _literal(first.text) if isinstance(first, Const) else None
                fn = next((d for d in functions if d.line > call.line and any(
                    x.rsplit(".", 1)[-1] == name for x in d.decorators)), None)
                if not isinstance(key, str) or fn is None:
                    continue
                for c in self.calls_in(facts.module, fn.qualname):
                    why = self.holds(c.guards, tests)
                    out.setdefault(key, []).extend((k, d, why) for k, d in self.classes(facts.module, c.scope, c.func))
        for facts in self.files_with(reg.tables) if reg.tables else ():
            sf = self.r.modules.file(facts.module)
            if sf is None:
                continue
            for key, text in _table_entries(self.index.data(sf), reg.tables):
                out.setdefault(key, []).extend((k, d, "") for k, d in self.classes(facts.module, "", text))
        if reg.returns:
            for key, found in out.items():
                out[key] = found + [(*c, why) for k, d, why in found for c in self.returned(k, d)]
        return out

    def returned(self, key: ClassKey, d: Definition) -> list[tuple[ClassKey, Definition]]:
        facts = self.facts(key[0])
        out = []
        for ret in facts.returns if facts is not None else ():
            name = dotted(ret.value.func) if isinstance(ret.value, Call) else None
            if ret.scope.startswith(d.qualname + ".") and name:
                out += self.classes(key[0], ret.scope, name)
        return out


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, RecursionError):
        return None


def _table_entries(source: bytes, tables: Sequence[str]) -> list[tuple[str, str]]:
    """``(key, dotted value)`` of each module-level ``NAME = {"key": Class, ...}`` (annotated too), ``NAME.update({...})``
    and ``NAME["key"] = Class`` whose NAME is one of ``tables``, inside ``if``/``try`` too."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    out: list[tuple[str, str]] = []

    def add(d: ast.AST) -> None:
        if isinstance(d, ast.Dict):
            for k, v in zip(d.keys, d.values, strict=True):
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, (ast.Name, ast.Attribute)):
                    out.append((k.value, ast.unparse(v)))

    stack: list[ast.stmt] = list(tree.body)
    while stack:
        st = stack.pop(0)
        if isinstance(st, (ast.If, ast.Try)):
            stack[:0] = [*st.body, *st.orelse, *getattr(st, "finalbody", []),
                         *(s for h in getattr(st, "handlers", []) for s in h.body)]
        elif isinstance(st, ast.Assign) and len(st.targets) == 1 or isinstance(st, ast.AnnAssign):
            target = st.targets[0] if isinstance(st, ast.Assign) else st.target
            if isinstance(target, ast.Name) and target.id in tables and st.value is not None:
                add(st.value)
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                    and target.value.id in tables and isinstance(target.slice, ast.Constant) \
                    and isinstance(target.slice.value, str) and isinstance(st.value, (ast.Name, ast.Attribute)):
                out.append((target.slice.value, ast.unparse(st.value)))
        elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute) \
                and st.value.func.attr == "update" and isinstance(st.value.func.value, ast.Name) \
                and st.value.func.value.id in tables and st.value.args:
            add(st.value.args[0])
    return out


def _area(module: str) -> str:
    """The sub-package a module lies in: its first two name parts (``sglang.multimodal_gen``)."""
    return ".".join(module.split(".")[:2])


def _label(key: ClassKey) -> str:
    return f"{key[0]}.{key[1]}"


def select(index: Index, resolver: Resolver, spec: ModelSpec, config: Mapping[str, object], config_file: str,
           flags: Mapping[str, str | None], deployment: Deployment | None = None
           ) -> tuple[ModelPath | None, list[Diagnostic]]:
    """The model path of ``config`` (a Hugging Face ``config.json``'s fields) and the component ``flags``
    (``attention_backend`` → ``"flashinfer"``; None: not given); None (with a diagnostic) when no class is
    named by its ``architectures``. ``deployment``'s bindings decide a registry factory's branch tests the
    ``tests`` data does not (a platform subclass under ``if _is_musa:`` is no selected component on cuda)."""
    archs = config.get("architectures")
    names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    if not names:
        return None, []
    s = _Selector(index, resolver, spec, config, deployment)
    by_name, model_modules = s.registered()
    start = [c for n in names for c in by_name.get(n, [])]
    if not start:  # not registered: any indexed class of that name
        for facts in s.files_with(names):
            start += [((facts.module, d.qualname), d) for d in facts.definitions
                      if d.kind == "class" and d.name in names and not d.parent]
    if not start:
        return None, [Diagnostic(config_file, 0, f"--model-config: architectures {', '.join(names)}: no class of that "
                                                 "name in the roots; scanning as without a model", "config")]
    model = start[0][1].name
    members = s.module_set(start)
    entry = {_label(k) for k in members}
    excluded: dict[str, str] = {}
    diags: list[Diagnostic] = []
    seeds = {k[0] for k in members}  # the modules whose imports are this deployment's code (see `imported`)
    for reg in spec.registries:
        value = flags.get(reg.flag)
        entries = s.entries(reg)
        if not value:  # any of the registry's components may run: each one's module is the deployment's code
            seeds |= {k[0] for found in entries.values() for k, _, _ in found}
            continue
        flag = "--" + reg.flag.replace("_", "-")
        if value not in entries:
            seeds |= {k[0] for found in entries.values() for k, _, _ in found}
            known = ", ".join(sorted(entries)) or "none found"
            diags.append(Diagnostic(flag, 0, f"{value}: no registered entry (known: {known}); its components are "
                                             "not selected", "config"))
            continue
        chosen = s.with_bases((k, d) for k, d, why in entries[value] if not why)
        ruled = {k: why for k, _, why in entries[value] if why}
        entry |= {_label(k) for k in chosen}
        seeds |= {k[0] for k in chosen}
        what = reg.flag.replace("_", " ")
        for key, found in entries.items():
            for k, d, _ in found:
                label = _label(k)
                if k not in chosen and label not in entry:
                    by = f": {ruled[k]}" if key == value and k in ruled else ""
                    excluded[label] = f"model: {d.name} is not the selected {what} ({value}{by})"
    packages = tuple(m.rpartition(".")[0] + "." for m in model_modules)
    modules = {sf.module for sf in index.files if sf.module.startswith(packages)} if packages else set()
    return ModelPath(model, frozenset(entry), frozenset(modules), excluded, s.imported(seeds)), diags
