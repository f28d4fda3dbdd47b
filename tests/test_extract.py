"""Extract: one file's facts — positions, guards, loop depth — and the same facts from any worker count."""

from __future__ import annotations

import ast

import pytest

from castfind.read.extract import MAX_DEPTH, extract_source
from castfind.read.facts import Attr, Cast, Name, Other
from castfind.store.discover import discover
from castfind.store.index import Index


def _casts(src: str) -> tuple[Cast, ...]:
    return extract_source(src.encode(), "m", "m.py", False).casts


def _by_text(src: str) -> dict[str, Cast]:
    """The casts of ``src`` by their text (each text once in the source)."""
    casts = _casts(src)
    out = {c.text: c for c in casts}
    assert len(out) == len(casts), [c.text for c in casts]
    return out


def test_column_is_the_cast_receivers_start_even_when_its_text_appears_earlier() -> None:
    (c,) = _casts("def f(kv):\n    out = kv + kv.float()\n")
    assert (c.line, c.column) == (2, 16)
    (c,) = _casts("x = 1; y = (a + b).to(t)\n")
    assert c.column == 12  # the parenthesised receiver starts at its "("


def test_column_counts_characters_after_non_ascii_text() -> None:
    (c,) = _casts("s = 'ééé'; t = w.half()\n")
    assert c.column == 16


def test_cast_spanning_lines_has_its_end_line() -> None:
    (c,) = _casts("def f(w):\n    return w.to(\n        dtype,\n    )\n")
    assert (c.line, c.end_line, c.column) == (2, 4, 12)


def test_lines_under_cr_only_and_crlf_newlines() -> None:
    for nl in ("\r", "\r\n"):
        (c,) = _casts("import torch\n\ndef f(kv):\n    return kv.to(torch.float)\n".replace("\n", nl))
        assert (c.line, c.column, c.scope) == (4, 12, "f")


def test_loop_depth_and_guards() -> None:
    src = ("def f(self, xs):\n"
           "    for x in xs:\n"
           "        if self.w is None:\n"
           "            pass\n"
           "        else:\n"
           "            y = [z.float() for z in x]\n")
    (c,) = _casts(src)
    assert c.loop_depth == 2
    assert [(g.test, g.negated) for g in c.guards] == [("self.w is None", True)]


def _write_files(root, n: int) -> None:
    pkg = root / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for i in range(n):
        pad = " " * (i % 7)
        body = "".join(f"    v{j} = 1\n" for j in range(i % 5))
        (pkg / f"m{i}.py").write_text(
            f"def f{i}(kv, w):\n{body}    a = w + {pad}kv + kv.to(w.dtype)\n    return a.float()\n")


def test_one_worker_and_two_workers_give_identical_facts(tmp_path) -> None:
    _write_files(tmp_path, 40)
    files = discover([str(tmp_path)])
    one = Index(list(files), jobs=1).load_files(files)
    two = Index(list(files), jobs=2).load_files(files)
    assert one == two
    for facts in one:
        if facts.casts:
            first = facts.casts[0]
            line = (tmp_path / facts.path).read_text().splitlines()[first.line - 1]
            assert line[first.column - 1:].startswith("kv.to(")


# -- positions ---------------------------------------------------------------------------------------


def test_positions_agree_with_pythons_own_call_positions() -> None:
    src = ("a.half(); b.double()\n"
           "z = x.float().half()\n"
           "w = f(\n"
           "    k.to(t), v.to(\n"
           "        t))\n"
           "y = (self.kv\n"
           "     .float())\n")
    expected = sorted((n.lineno, n.col_offset + 1, n.end_lineno) for n in ast.walk(ast.parse(src))
                      if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute))
    assert sorted((c.line, c.column, c.end_line) for c in _casts(src)) == expected
    by_text = _by_text(src)
    assert (by_text["b.double()"].line, by_text["b.double()"].column) == (1, 11)  # two casts on one line
    assert by_text["x.float().half()"].column == by_text["x.float()"].column == 5  # a chain starts at x
    assert (by_text["v.to( t)"].line, by_text["v.to( t)"].end_line) == (4, 5)


def test_a_cast_in_a_string_is_not_a_cast() -> None:
    assert _casts('s = """\nx.float()\n"""\n# y.half()\n') == ()


def test_end_line_of_a_parenthesised_cast_is_the_calls_own() -> None:
    (c,) = _casts("y = (\n    kv.float()\n)\n")
    assert (c.line, c.column, c.end_line) == (2, 5, 2)


def test_text_of_a_parenthesised_cast_is_the_call_alone() -> None:
    (c,) = _casts("y = (\n    kv.float()  # why\n)\n")
    assert c.text == "kv.float()"


# -- guards --------------------------------------------------------------------------------------------


GUARDED = """\
def f(self, x):
    if a:
        if b:
            x.float()
    elif c:
        x.half()
    else:
        x.double()
    if d:
        def g():
            x.bfloat16()
        if e:
            pass
        x.to(torch.float16)
    try:
        x.byte()
    except E:
        x.char()
    while x.ready:
        x.short()
    if (self._w is None
            and   ok):
        x.long()
x.int()
"""


def test_guards_are_the_enclosing_ifs_outermost_first_and_else_branches_are_negated() -> None:
    c = _by_text(GUARDED)

    def guards(text: str) -> list[tuple[str, bool]]:
        return [(g.test, g.negated) for g in c[text].guards]

    assert guards("x.float()") == [("a", False), ("b", False)]
    assert guards("x.half()") == [("a", True), ("c", False)]  # elif: out of a's body, in c's
    assert guards("x.double()") == [("a", True), ("c", True)]
    assert guards("x.to(torch.float16)") == [("d", False)]  # the closed `if e:` no longer applies
    assert guards("x.long()") == [("(self._w is None and ok)", False)]  # whitespace folded


def test_guards_stop_at_a_def_and_try_or_while_are_not_guards() -> None:
    c = _by_text(GUARDED)
    assert c["x.bfloat16()"].guards == ()  # `if d:` encloses the def, not the call of g
    assert c["x.bfloat16()"].scope == "f.<locals>.g"
    for text in ("x.byte()", "x.char()", "x.short()", "x.int()"):
        assert c[text].guards == (), text


def test_a_long_guard_is_cut_to_160_characters() -> None:
    test = " and ".join(f"flag_{i}" for i in range(40))
    (c,) = _casts(f"def f(x):\n    if {test}:\n        x.float()\n")
    assert len(test) > 160 and c.guards[0].test == test[:160]


def test_a_cast_in_an_if_test_is_not_guarded_by_it() -> None:
    (c,) = _casts("def f(self):\n    if not self._warned and self.kv_cache.float().max() > 448:\n        pass\n")
    assert c.guards == ()


# -- stores and the locations a guard knows unset -------------------------------------------------------


def test_stores_are_attributes_entries_setattr_and_globals_directly_or_through_a_local() -> None:
    c = _by_text(
        "G = None\n"
        "def f(self, x, key):\n"
        "    global G\n"
        "    self._a = x.float()\n"
        "    self._c[key] = x.half()\n"
        "    setattr(self, '_s', x.double())\n"
        "    G = x.bfloat16()\n"
        "    w = x.to(t)\n"
        "    self._d[key, 1] = w\n"
        "    v = x.int()\n"
        "    v = 0\n"
        "    self._v = v\n"
        "    y = x.long()\n"
    )
    assert {t: k.stores for t, k in c.items()} == {
        "x.float()": ("self._a",), "x.half()": ("self._c[key]",), "x.double()": ("self._s",), "x.bfloat16()": ("G",),
        "x.to(t)": ("self._d[(key, 1)]",), "x.int()": (), "x.long()": ()}  # v was rebound; y is a local


@pytest.mark.parametrize("test,absent,negated_absent", [
    ("self._w is None", ("self._w",), ()),
    ("self._w is not None", (), ("self._w",)),
    ("not hasattr(self, '_w')", ("self._w",), ()),
    ("key not in self._c", ("self._c[key]",), ()),
    ("self._c.get(key) is None", ("self._c[key]",), ()),
    ("getattr(self, '_w', None) is None", ("self._w",), ()),
    ("not self._w", ("self._w",), ()),
    ("self._w is None and ok", ("self._w",), ()),
    ("self._w is None or x.dtype != self._w.dtype", ("self._w",), ()),
    ("x.dtype != self._w.dtype", (), ()),
    ("w is None", (), ()),  # a local: not a stored location
], ids=lambda v: v if isinstance(v, str) else None)
def test_guard_absent_is_what_its_branch_knows_unset(test: str, absent: tuple[str, ...],
                                                      negated_absent: tuple[str, ...]) -> None:
    c = _by_text(f"def f(self, x, key, ok, w):\n    if {test}:\n        x.float()\n    else:\n        x.half()\n")
    assert c["x.float()"].guards[0].absent == absent
    assert c["x.half()"].guards[0].absent == negated_absent


def test_an_early_return_guards_the_rest_of_its_block_as_its_else() -> None:
    c = _by_text("def f(self, x):\n    if self._w is not None:\n        return self._w\n    x.float()\n"
                 "    if ok:\n        if self._v:\n            return 1\n        x.half()\n    else:\n        x.double()\n")
    assert [(g.test, g.negated, g.absent) for g in c["x.float()"].guards] == [("self._w is not None", True, ("self._w",))]
    assert [g.test for g in c["x.half()"].guards] == ["self._w is not None", "ok", "self._v"]
    assert [g.test for g in c["x.double()"].guards] == ["self._w is not None", "ok"]  # the inner return guards only its block


# -- loop depth ----------------------------------------------------------------------------------------


LOOPS = """\
def f(xs):
    xs.float()
    for a in xs:
        a.half()
        while a:
            a.double()
            def g(b):
                b.to(t)
                for c in b:
                    c.int()
        [y.bfloat16() for y in xs]
    {k: v.long() for k, v in xs}
    [[z.short() for z in y] for y in xs]
    (w.bool() for w in xs)
    {s.byte() for s in xs}
    while xs.kv.char().any():
        pass
xs.type(t)
for q in xs:
    q.to(t)
"""


def test_loop_depth_counts_for_while_and_comprehensions_nested() -> None:
    depth = {text: c.loop_depth for text, c in _by_text(LOOPS).items()}
    assert depth == {
        "xs.float()": 0,
        "a.half()": 1,
        "a.double()": 2,
        "b.to(t)": 0,  # a def starts afresh: its body runs once per call
        "c.int()": 1,  # ...and counts its own loops
        "y.bfloat16()": 2,  # a comprehension in a for
        "v.long()": 1,
        "z.short()": 2,  # nested comprehensions
        "w.bool()": 1,
        "s.byte()": 1,
        "xs.kv.char()": 1,  # a while test runs on every iteration
        "xs.type(t)": 0,
        "q.to(t)": 1,  # module-level loops count too
    }


@pytest.mark.parametrize("src", [
    "def f(self):\n    for a in self.kv_cache.float():\n        pass\n",
    "def f(self):\n    return [a for a in self.kv_cache.float()]\n",
    "def f(self, xs):\n    for a in xs:\n        pass\n    else:\n        self.kv_cache.float()\n",
], ids=["for-iterable", "comprehension-iterable", "for-else"])
def test_what_runs_once_beside_a_loop_has_no_loop_depth(src: str) -> None:
    (c,) = _casts(src)
    assert c.loop_depth == 0


# -- nesting depth ---------------------------------------------------------------------------------------


def _ast_depth(src: str) -> int:
    best, stack = 0, [(ast.parse(src), 1)]
    while stack:
        node, d = stack.pop()
        best = max(best, d)
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return best


def test_a_tree_exactly_max_depth_deep_is_analysed_one_level_more_is_unsupported() -> None:
    def source(terms: int) -> str:
        return "y = " + " + ".join(["a"] * terms) + "\nz = kv.float()\n"

    at_limit, over = source(MAX_DEPTH - 3), source(MAX_DEPTH - 2)
    assert (_ast_depth(at_limit), _ast_depth(over)) == (MAX_DEPTH, MAX_DEPTH + 1)
    ok = extract_source(at_limit.encode(), "m", "m.py", False)
    assert ok.error is None and [c.text for c in ok.casts] == ["kv.float()"]
    bad = extract_source(over.encode(), "m", "m.py", False)
    assert bad.error_kind == "unsupported" and bad.casts == ()
    assert bad.error is not None and bad.error[0] == 1 and f"{MAX_DEPTH + 1} levels deep" in bad.error[1]


def test_the_depth_walk_agrees_with_ast_iter_child_nodes_on_the_project_sources() -> None:
    from castfind.read.extract import _tree_depth
    from tests.support import REPO

    checked = 0
    for p in sorted((REPO / "castfind").rglob("*.py")) + sorted((REPO / "fixtures").rglob("*.py")):
        try:
            tree = ast.parse(p.read_bytes())
        except SyntaxError:
            continue
        got: list[tuple[int, int, int, int]] = []
        want = sorted((n.body[0].lineno, n.body[-1].end_lineno, n.orelse[0].lineno, n.orelse[-1].end_lineno)
                      for n in ast.walk(tree) if isinstance(n, ast.If) and n.body and n.orelse)
        assert (_tree_depth(tree, got), sorted(got)) == (_ast_depth(p.read_text()), want), p
        checked += bool(want)
    assert checked > 20


def test_nesting_python_rejects_is_a_parse_error_not_unsupported() -> None:
    ff = extract_source(("x = " + "(" * 1100 + "1" + ")" * 1100 + "\n").encode(), "m", "m.py", False)
    assert ff.error_kind == "parse-error" and ff.error is not None and ff.casts == ()


def test_a_receiver_deeper_than_the_expression_limit_is_cut_but_the_cast_is_kept() -> None:
    chain = ".".join(f"a{i}" for i in range(16))
    (c,) = _casts(f"y = {chain}.float()\n")
    assert c.text == f"{chain}.float()"
    assert isinstance(c.receiver, Attr) and c.receiver.attr == "a15"
    inner = c.receiver
    while isinstance(inner, Attr):
        inner = inner.value
    assert isinstance(inner, Other) and inner.kind == "Deep"  # not a Name: provenance cannot follow it


# -- assigned_to ------------------------------------------------------------------------------------------


def test_assigned_to_is_the_single_plain_target_of_the_cast_itself() -> None:
    src = ("class A:\n"
           "    def f(self, x, y):\n"
           "        self.w = self.w.to(torch.float16)\n"
           "        w: T = self.v.half()\n"
           "        a = b = x.float()\n"
           "        c, d = x.double(), y.double()\n"
           "        e = x.bfloat16() + 1\n"
           "        e += x.long()\n"
           "        self.d[0] = x.int()\n"
           "        return x.short()\n")
    assigned = {c.text: c.assigned_to for c in _casts(src)}
    assert assigned == {
        "self.w.to(torch.float16)": "self.w",
        "self.v.half()": "w",  # an annotated assignment
        "x.float()": None,  # chained: two targets
        "x.double()": None, "y.double()": None,  # tuple unpacking
        "x.bfloat16()": None,  # the value is a sum, not the cast
        "x.long()": None,  # augmented
        "x.int()": None,  # a subscript target
        "x.short()": None,
    }
    (c,) = [c for c in _casts(src) if c.assigned_to == "self.w"]
    assert c.receiver == Attr(Name("self"), "w")


def test_declared_types_of_attributes_locals_parameters_and_returns() -> None:
    src = '''\
from typing import Optional, Union
import typing as t


class Linear:
    quant_method: "QuantBase"
    scale: float

    def __init__(self, qc: Optional[QuantConfig], n: int = 3, *rest: Foo, **kw: Bar) -> None:
        self.quant_method: Optional[QuantBase] = None
        self.impl: t.Union[FlashImpl, "impls.TorchImpl", None]
        self.extra: Annotated[Final[Foo], "meta"] = Foo()
        self.rows: list[Foo] = []
        local: Foo | None
        self.x, self.y = 1, 2

    def get(self, layer: "Linear") -> QuantBase | None:
        return None


def make() -> Union[A, B]:
    return A()
'''
    facts = extract_source(src.encode(), "m", "m.py", False)
    assert [(a.target, a.types, a.scope) for a in facts.annotations] == [
        ("quant_method", ("QuantBase",), "Linear"),
        ("scale", ("float",), "Linear"),
        ("self.quant_method", ("QuantBase",), "Linear.__init__"),
        ("self.impl", ("FlashImpl", "impls.TorchImpl"), "Linear.__init__"),
        ("self.extra", ("Foo",), "Linear.__init__"),
        ("self.rows", ("list",), "Linear.__init__"),  # a generic names its own class, not its items
        ("local", ("Foo",), "Linear.__init__"),
    ]
    defs = {d.qualname: d for d in facts.definitions}
    # `*rest` and `**kw` are a tuple and a dict: not typed. `-> None` declares no class.
    assert defs["Linear.__init__"].param_types == (("qc", ("QuantConfig",)), ("n", ("int",)))
    assert defs["Linear.__init__"].returns == ()
    assert defs["Linear.get"].param_types == (("layer", ("Linear",)),)
    assert defs["Linear.get"].returns == ("QuantBase",)
    assert defs["make"].returns == ("A", "B")
    assert defs["Linear"].returns == () and defs["Linear"].param_types == ()
    # An annotation with a value still binds the name.
    assert ("self.extra", 12) in {(a.target, a.line) for a in facts.assigns}
