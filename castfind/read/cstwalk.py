"""The one place castfind uses libcst's private code generator (an adapter with its own test).

PERF: libcst's metadata providers (positions, scopes) cost several times the parse, and even a
plain ``CSTVisitor`` walk costs about as much as the parse. Generating code walks the tree once,
in source order, through every node and every token; a ``CodegenState`` subclass that listens to
it gets node starts and ends plus exact positions for the price of the walk. That class and
``Module._codegen`` are libcst internals, so they are used here and nowhere else, under a version
bound in ``pyproject.toml``; ``tests/test_cstwalk.py`` checks the positions against libcst's
public ``PositionProvider`` on real code, so a libcst change that breaks this shows there first.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import libcst as cst
from libcst._nodes.internal import CodegenState

from castfind.core.sourcetext import NEWLINE


class _Null:
    """A reusable no-op context manager for nodes whose position no one asked for."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL = _Null()


class _Span:
    """Reports a node's start (line, 1-based column) on entry and its end line on exit."""

    __slots__ = ("walker", "node", "line")

    def __init__(self, walker: TokenWalker, node: cst.CSTNode) -> None:
        self.walker = walker
        self.node = node
        self.line = 0

    def __enter__(self) -> None:
        w = self.walker
        self.line = w.line
        w.on_start(self.node, w.line, w.column + 1)

    def __exit__(self, *exc: object) -> None:
        w = self.walker
        # The last token of a compound statement is its newline: the node ends on the line before.
        end = w.line - 1 if w.column == 0 and w.line > self.line else w.line
        w.on_end(self.node, self.line, end)


class TokenWalker(CodegenState):
    """Listens to libcst generating a module's code: tracks line and column, hooks nodes.

    Subclasses set :attr:`positioned` (the node types whose span they want) and override
    :meth:`on_start` / :meth:`on_end` (spans) and :meth:`before` / :meth:`after` (every node).
    Tokens are counted, never stored.
    """

    positioned: frozenset[type] = frozenset()

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.line = 1  # 1-based
        self.column = 0  # 0-based, in characters, on the current line
        # PERF: the code generator calls these twice per node; bound here, they skip a call layer.
        self.before_codegen = self.before  # type: ignore[method-assign]
        self.after_codegen = self.after  # type: ignore[method-assign]

    # -- the code generator's callbacks (libcst internals) --------------------------------------
    def add_token(self, value: str) -> None:
        if "\n" in value or "\r" in value:
            parts = NEWLINE.split(value)
            self.line += len(parts) - 1
            self.column = len(parts[-1])
        else:
            self.column += len(value)

    def add_indent_tokens(self) -> None:
        for t in self.indent_tokens:
            self.column += len(t)

    def pop_trailing_newline(self) -> None:
        return None

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.before(node)

    def after_codegen(self, node: cst.CSTNode) -> None:
        self.after(node)

    def record_syntactic_position(  # type: ignore[override]
        self, node: cst.CSTNode, *, start_node: Any = None, end_node: Any = None,
    ) -> AbstractContextManager[None]:
        # PERF: libcst declares a generator context manager; a plain object per node is cheaper.
        return _Span(self, node) if type(node) in self.positioned else _NULL

    # -- for subclasses ---------------------------------------------------------------------------
    def before(self, node: cst.CSTNode) -> None:
        """Every node, in source order, before its first token."""

    def after(self, node: cst.CSTNode) -> None:
        """Every node, after its last token."""

    def on_start(self, node: cst.CSTNode, line: int, column: int) -> None:
        """A positioned node starts at ``line``, ``column`` (both 1-based)."""

    def on_end(self, node: cst.CSTNode, start: int, end: int) -> None:
        """A positioned node spans lines ``start`` to ``end``."""


def parse_module(source: bytes) -> cst.Module:
    """``libcst.parse_module`` without the per-node validation.

    PERF: every node the native parser builds runs ``CSTNode.__post_init__``, which validates it
    (parentheses, required whitespace): about a tenth of the parse. A tree the parser built from source
    needs none of it, and castfind parses only source CPython has already accepted. The hook is
    libcst's internal; it is put back even when the parse raises.
    """
    from libcst._nodes.base import CSTNode

    saved = CSTNode.__post_init__
    CSTNode.__post_init__ = _no_validation  # type: ignore[method-assign]
    try:
        return cst.parse_module(source)
    finally:
        CSTNode.__post_init__ = saved  # type: ignore[method-assign]


def _no_validation(self: cst.CSTNode) -> None:
    return None


class _Parens:
    """``with node._parenthesize(state):`` as a plain object: the node's ``(``, its position, its ``)``.

    PERF: libcst writes it as a generator context manager, entered for every expression (a quarter of
    all nodes); the generator machinery costs about a third of the bare walk.
    """

    __slots__ = ("node", "state", "span")

    def __init__(self, node: Any, state: CodegenState) -> None:
        self.node = node
        self.state = state
        self.span: Any = None

    def __enter__(self) -> None:
        state = self.state
        for lpar in self.node.lpar:
            lpar._codegen(state)
        self.span = state.record_syntactic_position(self.node)
        self.span.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.span.__exit__(*exc)
        state = self.state
        for rpar in self.node.rpar:
            rpar._codegen(state)


def _parenthesize(node: Any, state: CodegenState) -> _Parens:
    return _Parens(node, state)


def walk(module: cst.Module, walker: TokenWalker) -> None:
    """Drive ``walker`` over ``module`` (may raise RecursionError on very deep trees).

    libcst's ``_parenthesize`` is replaced by :class:`_Parens` for the walk and put back after it,
    even when the walk raises.
    """
    from libcst._nodes.expression import _BaseParenthesizedNode

    saved = _BaseParenthesizedNode.__dict__["_parenthesize"]
    _BaseParenthesizedNode._parenthesize = _parenthesize  # type: ignore[method-assign,assignment]
    try:
        module._codegen(walker)
    finally:
        _BaseParenthesizedNode._parenthesize = saved  # type: ignore[method-assign]
