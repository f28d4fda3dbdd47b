"""Text queries (castfind.store.textquery): which files can call a function, decided from their bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from castfind.store.discover import SourceFile
from castfind.store.textquery import CallShape, call_shape, calls_predicate

FILES = {
    # a dotted call reaches a method of any module
    "dotted.py": b"def run(pool):\n    return pool.kv.  apply(pool)\n",
    # a bare call with the name bound by an import
    "imported.py": b"from pkg.ops import apply\n\ndef run(x):\n    return apply(x)\n",
    # a bare call and nothing else that binds the name: only the defining module itself
    "bare.py": b"def apply(x):\n    return x\n\ndef run(x):\n    return apply(x)\n",
    # a star import may bind it
    "star.py": b"from pkg.ops import *\n\ndef run(x):\n    return apply (x)\n",
    # only a def line: no call
    "defonly.py": b"class A:\n    async def apply(self, x):\n        return x\n",
    # the name only inside a longer identifier
    "other.py": b"def run(x):\n    return x.apply_all(x)\n",
}


def _sf(path: str, module: str) -> SourceFile:
    return SourceFile(abspath="/r/" + path, root="/r", path=path, module=module, is_package=False)


@pytest.mark.parametrize(("path", "module", "expected"), [
    ("dotted.py", "elsewhere", True),
    ("imported.py", "elsewhere", True),
    ("bare.py", "elsewhere", False),
    ("bare.py", "bare", True),
    ("star.py", "elsewhere", True),
    ("defonly.py", "defonly", False),
    ("other.py", "other", False),
])
def test_a_file_is_selected_only_when_its_text_can_call_the_function(path: str, module: str, expected: bool) -> None:
    sf = _sf(path, path.removesuffix(".py"))
    assert calls_predicate("apply", module)(sf, FILES[path]) is expected


def test_one_shape_per_file_serves_every_module_that_defines_the_name() -> None:
    shape = call_shape("apply")
    assert shape(FILES["dotted.py"]) == "any"
    assert shape(FILES["bare.py"]) == "own"
    assert shape(FILES["imported.py"]) == "any"
    assert shape(FILES["star.py"]) == "any"
    assert shape(FILES["defonly.py"]) == "none"
    assert shape(FILES["other.py"]) == "none"

    shared: dict[str, CallShape] = {}
    modules = ["bare", "imported", "elsewhere", "star"]
    for module in modules:
        pred, fresh = calls_predicate("apply", module, shared), calls_predicate("apply", module)
        for path, data in FILES.items():
            sf = _sf(path, path.removesuffix(".py"))
            assert pred(sf, data) == fresh(sf, data), (module, path)
    assert set(shared) == {"/r/" + p for p in FILES}  # each file's text searched once, kept by path
    # The shared answer is what is used: a (deliberately wrong) shape planted for a file wins.
    planted: dict[str, CallShape] = {"/r/bare.py": "any"}
    assert calls_predicate("apply", "elsewhere", planted)(_sf("bare.py", "bare"), FILES["bare.py"]) is True


def test_text_queries_share_shapes_by_name_within_a_run(tmp_path: Path) -> None:
    from castfind.core.rules import load_rules
    from castfind.store.index import Index
    from castfind.store.memo import Memo
    from castfind.store.textquery import TextQueries

    for path, data in FILES.items():
        (tmp_path / path).write_bytes(data)
    index = Index.from_roots([str(tmp_path)], cache=None, jobs=1)
    queries = TextQueries(index, load_rules([]), Memo(index))
    got = {m: {sf.path for sf in queries.select(("calls", "apply", m))} for m in ("bare", "elsewhere")}
    assert got["bare"] == {"dotted.py", "imported.py", "bare.py", "star.py"}
    assert got["elsewhere"] == {"dotted.py", "imported.py", "star.py"}
    assert set(queries._shapes) == {"apply"}  # one table of shapes for the name, shared by both modules' queries
    # Each file naming `apply` searched once for both (other.py holds only `apply_all`: not asked about).
    assert set(queries._shapes["apply"]) == {str(tmp_path / p) for p in FILES if p != "other.py"}


def test_a_file_naming_a_pool_is_a_handoff_source_without_a_cast(tmp_path: Path) -> None:
    from castfind.core.rules import load_rules
    from castfind.store.index import Index
    from castfind.store.memo import Memo
    from castfind.store.textquery import TextQueries

    files = {
        # hands one engine's cache on and casts nothing itself
        "layer.py": b"class L:\n    def forward(self, q, e: int):\n        return self.impl.forward(q, self.kv_cache[e])\n",
        # names an inferred getter only
        "runner.py": b"def run(pool, q):\n    return attend(q, pool.pages_of(0))\n",
        # names only a weight: weights are not read for handoffs without a cast
        "model.py": b"def run(self, x):\n    return linear(x, self.weight)\n",
        "plain.py": b"def run(x):\n    return x + 1\n",
    }
    for path, data in files.items():
        (tmp_path / path).write_bytes(data)
    index = Index.from_roots([str(tmp_path)], cache=None, jobs=1)
    queries = TextQueries(index, load_rules(), Memo(index))
    assert {sf.path for sf in queries.select(("source", ()))} == {"layer.py"}
    assert {sf.path for sf in queries.select(("source", ("pages_of",)))} == {"layer.py", "runner.py"}
    assert queries.select(("cand", ())) == []  # none of them holds a cast
    # The pool-word test ran once per file, shared by both queries (and by the getter seeds').
    assert set(queries._tests["pool"]) == {str(tmp_path / p) for p in files}


_DEFINES_TEXTS = [
    b"def foo(x):\n    pass\n",
    b"    async def foo [T](x): ...\n",
    b"class A:\n\tdef\tfoo\t(self): ...\n",
    b"x = undef foo(1)\n",  # inside a longer word, not at a line start
    b"def  def foo(x): ...\n",  # a `def` whose own name fails hides nothing after it
    b"def foo_bar(x): ...\ndef foox(): ...\n",
    b"def foo\n(x): ...\n",
    b"# def foo(x):\ns = 'def foo(x)'\n",
    b"def gr\xc3\xbc\xc3\x9f(x): ...\n",
    b"deffoo(x)\ndef foo2(x)\n  def  foo  (x)\n",
    b"class A:\n    def foo(self): ...\n    async  def foo(self): ...\n  x = 1; def foo(): ...\n",
    b"",
]


@pytest.mark.parametrize("name", ["foo", "foo_bar", "foox", "foo2", "def", "gr\u00fc\u00df", "bar"])
def test_defines_answers_as_the_patterns_it_replaces(name: str) -> None:
    """The shared per-file table of `def` names gives what the unanchored, then anchored, pattern gave."""
    import re

    from castfind.core.rules import load_rules
    from castfind.store.textquery import def_line, def_lines, predicate

    quick = re.compile(rb"def[ \t]+" + re.escape(name.encode()) + rb"[ \t]*[(\[]")
    anchored = def_line(name)
    defs: dict[str, frozenset[bytes]] = {}
    pred = predicate(("defines", name), load_rules(), defs=defs)
    lines = def_lines(name)
    for i, data in enumerate(_DEFINES_TEXTS + [b"\n".join(_DEFINES_TEXTS)]):
        want = bool(quick.search(data) and anchored.search(data))
        assert pred(_sf(f"f{i}.py", f"f{i}"), data) is want, data
        assert lines(data) == len(anchored.findall(data)), data
    assert len(defs) == len(_DEFINES_TEXTS) + 1  # one table per file, shared by every name asked
    assert any(pred(_sf(f"f{i}.py", f"f{i}"), d) for i, d in enumerate(_DEFINES_TEXTS)) is (name != "bar" and name != "def")
