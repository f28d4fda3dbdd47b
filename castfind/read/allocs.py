"""Allocation facts: ``self.X = torch.zeros(shape, dtype=...)`` and the attributes a shape is made of.

One pass over CPython's ``ast`` of a file (the tree :mod:`castfind.read.extract` already builds to judge the
file), class by class, method by method. What is recorded (:class:`~castfind.read.facts.Allocation`):

* ``tensor``: ``self.X = torch.zeros|empty|full|ones|randn|rand(shape..., dtype=...)`` with the shape as
  a tuple argument or as positional sizes; in a list comprehension ``[torch.zeros(...) for _ in range(N)]``
  (a buffer per layer) with ``count = N``;
* ``parameter``: ``self.X = nn.Parameter(torch.empty(...))``, or any ``...Parameter`` class wrapping a tensor
  (``ModelWeightParameter(data=torch.empty(...))``);
* ``linear``: ``self.X = nn.Linear(in, out)`` and the tensor-parallel linears named after it
  (``ColumnParallelLinear(input_size=..., output_size=...)``; its weight: ``[out, in]``), ``nn.Conv1d(in, out, k,
  groups=g)`` (its weight: ``[out, in // g, k]``), ``nn.Embedding(num, dim)`` and the vocabulary-parallel tables
  named after it (``VocabParallelEmbedding``, an output head ``ParallelLMHead(vocab, hidden)``; its weight:
  ``[num, dim]``; kind ``embedding``, which cost reads only when a deployment is described), positional or keyword
  arguments;
* a parameter set on *another object* by a method, as quantized layers' ``create_weights(self, layer, ...)``
  do: ``layer.register_parameter("w", w)``, ``setattr(layer, "w", w)`` or ``layer.w = w`` with ``w`` a
  local holding one of the above: recorded with target ``layer.w`` (the method's parameter name), so a
  sibling method's ``layer.w.to(...)`` finds it;
* ``value``: any other ``self.X = <expr>`` in ``__init__`` or in a method that allocates (as text, so a
  shape written over ``self.kv_cache_dim`` can be substituted).

Everything is source text; nothing here evaluates anything (:mod:`castfind.analysis.cost` does, over bound names).
"""

from __future__ import annotations

import ast

from castfind.read.facts import ALLOC_TEXT_LIMIT, Allocation

#: The ``torch`` functions that allocate a tensor of a given shape.
ALLOCATORS = frozenset({"zeros", "empty", "full", "ones", "randn", "rand"})
_PARAMETER = frozenset({"nn.Parameter", "torch.nn.Parameter", "Parameter"})
_LINEAR = frozenset({"nn.Linear", "torch.nn.Linear"})
_CONV1D = frozenset({"nn.Conv1d", "torch.nn.Conv1d"})


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _text(node: ast.AST) -> str:
    return ast.unparse(node)


def _linear_like(name: str) -> bool:
    """``nn.Linear`` and the tensor-parallel linears named after it (``ColumnParallelLinear``,
    ``RowParallelLinear``, ``ReplicatedLinear``: ``(input_size, output_size, ...)``). The fused projections
    (``QKVParallelLinear``, ``MergedColumnParallelLinear``) take per-part sizes and are not read."""
    last = name.rsplit(".", 1)[-1]
    return name in _LINEAR or (last.endswith("Linear") and "QKV" not in last and not last.startswith("Merged"))


def _embedding_like(name: str) -> bool:
    """``nn.Embedding`` and the tables named after it (``VocabParallelEmbedding``), and an output head that is
    one (``ParallelLMHead``, ``LMHead``): ``(num_embeddings, embedding_dim, ...)``, a ``[num, dim]`` weight."""
    last = name.rsplit(".", 1)[-1]
    return last.endswith("Embedding") or last.endswith("LMHead")


def _arg(call: ast.Call, index: int, *names: str) -> ast.expr | None:
    """The argument at position ``index``, or the keyword argument named one of ``names``."""
    for n in names:
        got = _kwarg(call, n)
        if got is not None:
            return got
    return call.args[index] if len(call.args) > index and not any(isinstance(a, ast.Starred) for a in call.args[:index + 1]) else None


def _kwarg(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _tensor_call(node: ast.AST) -> tuple[tuple[str, ...] | None, str | None] | None:
    """``(shape, dtype)`` of ``torch.zeros(...)`` and its kin, else None (not an allocation)."""
    if not isinstance(node, ast.Call):
        return None
    name = _dotted(node.func)
    if name is None or not name.startswith("torch.") or name[6:] not in ALLOCATORS:
        return None
    dtype = _kwarg(node, "dtype")
    dt = _text(dtype) if dtype is not None else None
    args: list[ast.expr] = list(node.args)
    if name == "torch.full":
        args = args[:1]  # (size, fill_value)
    size = _kwarg(node, "size")
    if size is not None:
        args = [size]
    if any(isinstance(a, ast.Starred) for a in args) or not args:
        return None, dt
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        elts = args[0].elts
        if any(isinstance(e, ast.Starred) for e in elts):
            return None, dt
        return tuple(_text(e) for e in elts), dt
    if len(args) == 1 and not isinstance(args[0], (ast.Constant, ast.BinOp)):
        return None, dt  # `torch.zeros(shape)`: a tuple held elsewhere, or one size; not known which
    return tuple(_text(a) for a in args), dt


def _classify(value: ast.AST) -> Allocation | None:
    """The allocation ``value`` is (target, scope and line filled in later), or None."""
    got = _tensor_call(value)
    if got is not None:
        return Allocation("", "", 0, "tensor", got[0], got[1])
    if isinstance(value, ast.ListComp) and len(value.generators) == 1:
        gen = value.generators[0]
        inner = _tensor_call(value.elt)
        it = gen.iter
        if (inner is not None and not gen.ifs and isinstance(it, ast.Call) and _dotted(it.func) == "range"
                and len(it.args) == 1 and not it.keywords):
            return Allocation("", "", 0, "tensor", inner[0], inner[1], _text(it.args[0]))
        return None
    if isinstance(value, ast.Call):
        name = _dotted(value.func)
        if name is not None and (name in _PARAMETER or name.endswith("Parameter")):
            data = _kwarg(value, "data") or (value.args[0] if value.args else None)
            inner = _tensor_call(data) if data is not None else None
            if inner is not None:
                return Allocation("", "", 0, "parameter", inner[0], inner[1])
        dtype = _kwarg(value, "dtype")
        dt = _text(dtype) if dtype is not None else None
        if name is not None and _linear_like(name):
            c_in = _arg(value, 0, "in_features", "input_size")
            c_out = _arg(value, 1, "out_features", "output_size")
            if c_in is not None and c_out is not None and not isinstance(c_out, (ast.List, ast.Tuple, ast.ListComp)):
                return Allocation("", "", 0, "linear", (_text(c_out), _text(c_in)), dt)
        if name is not None and _embedding_like(name):
            num = _arg(value, 0, "num_embeddings")
            dim = _arg(value, 1, "embedding_dim")
            if num is not None and dim is not None:
                return Allocation("", "", 0, "embedding", (_text(num), _text(dim)), dt)
        if name in _CONV1D:
            c_in = _arg(value, 0, "in_channels")
            c_out = _arg(value, 1, "out_channels")
            taps = _arg(value, 2, "kernel_size")
            if c_in is not None and c_out is not None and taps is not None:
                groups = _arg(value, 6, "groups")
                rows = _text(c_in)
                if groups is not None:  # depthwise (groups == in_channels): one input channel per filter
                    rows = "1" if _text(groups) == rows else f"({rows}) // ({_text(groups)})"
                return Allocation("", "", 0, "linear", (_text(c_out), rows, _text(taps)), dt)
    return None


class _Method:
    """The ``self.X = ...`` assignments of one method, with the test of their innermost ``if``."""

    def __init__(self, qualname: str, params: tuple[str, ...] = ()) -> None:
        self.qualname = qualname
        self.params = params  # the method's parameters but ``self``: objects it may set parameters on
        self.found: list[Allocation] = []
        self.values: list[Allocation] = []
        self.locals: dict[str, Allocation] = {}  # local name -> the allocation it holds

    def block(self, body: list[ast.stmt], when: str | None) -> None:
        for st in body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue  # a nested def runs later, if ever
            if isinstance(st, ast.If):
                test = _text(st.test)
                self.block(st.body, test)
                self.block(st.orelse, f"not ({test})")
            elif isinstance(st, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
                self.block(st.body, when)
                self.block(getattr(st, "orelse", []), when)
            elif isinstance(st, ast.Try):
                for part in (st.body, *(h.body for h in st.handlers), st.orelse, st.finalbody):
                    self.block(part, when)
            elif isinstance(st, ast.Assign):
                for t in st.targets:
                    self.assign(t, st.value, st.lineno, when)
            elif isinstance(st, ast.AnnAssign) and st.value is not None:
                self.assign(st.target, st.value, st.lineno, when)
            elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
                self.register(st.value, st.lineno, when)

    def register(self, call: ast.Call, line: int, when: str | None) -> None:
        """``obj.register_parameter("X", v)`` / ``setattr(obj, "X", v)`` with ``obj`` a parameter of the method."""
        name = _dotted(call.func)
        if name is None or len(call.args) < 2:
            return
        if name == "setattr" and len(call.args) == 3:
            obj, key, value = call.args
        elif name.endswith(".register_parameter") and name.count(".") == 1:
            obj, key, value = ast.Name(name.split(".")[0]), call.args[0], call.args[1]
        else:
            return
        if isinstance(obj, ast.Name) and isinstance(key, ast.Constant) and isinstance(key.value, str):
            self.assign(ast.Attribute(value=obj, attr=key.value), value, line, when)

    def assign(self, target: ast.AST, value: ast.AST, line: int, when: str | None) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts, strict=True):
                    self.assign(t, v, line, when)
            return
        if isinstance(target, ast.Name):
            held = _classify(value)
            if held is not None:
                self.locals[target.id] = held
            else:
                self.locals.pop(target.id, None)
            return
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
            return
        owner = target.value.id
        if owner != "self":
            got = self.locals.get(value.id) if isinstance(value, ast.Name) else _classify(value)
            if owner in self.params and got is not None and got.kind == "parameter":
                self.found.append(Allocation(f"{owner}.{target.attr}", self.qualname, line, got.kind, got.shape,
                                             got.dtype, got.count, "", when))
            return
        name = f"self.{target.attr}"
        got = _classify(value)
        if got is not None:
            self.found.append(Allocation(name, self.qualname, line, got.kind, got.shape, got.dtype, got.count,
                                         "", when))
            return
        text = _text(value)
        if len(text) <= ALLOC_TEXT_LIMIT:
            self.values.append(Allocation(name, self.qualname, line, "value", text=text, when=when))


def allocations(tree: ast.Module) -> tuple[Allocation, ...]:
    """Every allocation and attribute value set in the methods of the module's classes (nested classes too)."""
    out: list[Allocation] = []
    stack: list[tuple[str, ast.ClassDef]] = [(n.name, n) for n in tree.body if isinstance(n, ast.ClassDef)]
    while stack:
        qual, cls = stack.pop()
        for st in cls.body:
            if isinstance(st, ast.ClassDef):
                stack.append((f"{qual}.{st.name}", st))
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = st.args
                params = tuple(p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs))[1:]
                m = _Method(f"{qual}.{st.name}", params)
                m.block(st.body, None)
                out += m.found
                if st.name == "__init__" or m.found:
                    out += m.values
    return tuple(sorted(out, key=lambda a: (a.line, a.target)))
