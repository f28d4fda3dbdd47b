"""The libcst adapter: positions from one codegen walk equal libcst's public PositionProvider."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from castfind.read.cstwalk import TokenWalker, walk

REPO = Path(__file__).resolve().parent.parent

TRICKY = [
    "x = f(a)(b)\n",
    "y = (buf).to(torch.float)  # parenthesised receiver\n",
    "out = kv + kv.float()\n",
    "s = 'é' * 3; t = w.half()\n",
    "\tz = g(\n\t\t1,\n\t\th(2),\n\t)\n".replace("\t", "", 1),
    'doc = """\nline\n""" + str(k.to(d))\n',
    "if a:\n    b = c.to(\n        d)\n",
    "v = x \\\n    .to(y)\n",
    "def f():\n    return [q.float() for q in qs]\n\nclass C:\n    def m(self):\n        pass\n",
]


class _Spans(TokenWalker):
    positioned = frozenset({cst.Call, cst.FunctionDef, cst.ClassDef})

    def __init__(self, module: cst.Module) -> None:
        super().__init__(module)
        self.starts: dict[int, tuple[int, int]] = {}

    def on_start(self, node: cst.CSTNode, line: int, column: int) -> None:
        self.starts[id(node)] = (line, column)


def _compare(source: str | bytes) -> int:
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    w = _Spans(module)
    walk(module, w)
    n = 0
    for node, rng in positions.items():
        if type(node) in _Spans.positioned:
            assert w.starts[id(node)] == (rng.start.line, rng.start.column + 1), cst.Module([]).code_for_node(node)
            n += 1
    return n


@pytest.mark.parametrize("source", TRICKY)
def test_positions_match_libcst_on_tricky_lines(source: str) -> None:
    assert _compare(source) >= 1


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_positions_match_under_every_newline_style(newline: str) -> None:
    src = "import torch\n\ndef f(kv):\n    a = 1\n    return kv.to(torch.float) + g(a)\n".replace("\n", newline)
    assert _compare(src) == 3


def test_positions_match_libcst_on_the_project_sources() -> None:
    files = sorted((REPO / "castfind").rglob("*.py")) + sorted((REPO / "fixtures").rglob("*.py"))
    checked = 0
    for p in files:
        try:
            checked += _compare(p.read_bytes())
        except cst.ParserSyntaxError:
            assert "broken" in p.as_posix()  # the where fixtures hold one unparsable file on purpose
    assert checked > 500


def test_the_unvalidated_parse_builds_the_same_tree_as_libcst() -> None:
    from castfind.read.cstwalk import parse_module

    files = sorted((REPO / "castfind").rglob("*.py")) + sorted((REPO / "fixtures").rglob("*.py"))
    same = 0
    for p in files:
        data = p.read_bytes()
        try:
            want = cst.parse_module(data)
        except cst.ParserSyntaxError:
            with pytest.raises(cst.ParserSyntaxError):
                parse_module(data)
            continue
        got = parse_module(data)
        assert got.deep_equals(want) and got.code == want.code, p
        same += 1
    assert same > 100


def test_validation_is_back_after_an_unvalidated_parse_even_one_that_failed() -> None:
    from castfind.read.cstwalk import parse_module

    with pytest.raises(cst.ParserSyntaxError):
        parse_module(b"def f(:\n")
    parse_module(b"x = 1\n")
    with pytest.raises(cst.CSTValidationError):  # libcst's own check still guards nodes built by hand
        cst.Name("not a name")


def test_libcst_parenthesize_is_back_after_a_walk_even_one_that_raised() -> None:
    from libcst._nodes.expression import _BaseParenthesizedNode

    saved = _BaseParenthesizedNode.__dict__["_parenthesize"]

    class Boom(TokenWalker):
        def before(self, node: cst.CSTNode) -> None:
            if isinstance(node, cst.Call):
                raise RuntimeError("boom")

    module = cst.parse_module("x = (f(1))\n")
    with pytest.raises(RuntimeError):
        walk(module, Boom(module))
    assert _BaseParenthesizedNode.__dict__["_parenthesize"] is saved
    # libcst's own code generation (parentheses included) still works afterwards.
    assert module.code == "x = (f(1))\n"
