"""The test suite itself: every test asserts something, and nothing is skipped or expected to fail blindly.

The rule, checked on the syntax of every ``tests/test_*.py`` (``ast``, nothing is imported):

- a test (a ``test_*`` function at module level or in a ``Test*`` class) *checks* something when its
  body — nested functions and lambdas included — holds an ``assert`` statement, a ``pytest.raises`` /
  ``pytest.warns`` / ``pytest.fail``, or a call of a *checking helper*;
- a checking helper is a function defined in ``tests/`` (module level, in the test's own module or
  imported from another module of ``tests/``) whose body checks something by the same rule;
- no ``@pytest.mark.skip`` (unconditional) and no ``pytest.skip()`` outside an ``if``/``try``/``with``
  or a nested function: a skip must depend on the environment (``skipif``, ``importorskip``);
- an ``xfail`` names a reason and is ``strict=True``, so a fixed bug turns the test red, not silent.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import REPO

TESTS = REPO / "tests"
_CHECKS = frozenset({"raises", "warns", "fail"})


@dataclass
class Module:
    """One parsed module of ``tests/``: its functions by name and the names it imports from ``tests``."""

    name: str
    tree: ast.Module
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, name)


def parse_module(name: str, source: str) -> Module:
    tree = ast.parse(source)
    mod = Module(name, tree)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mod.functions[node.name] = node
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests."):
            for alias in node.names:
                mod.imported[alias.asname or alias.name] = (node.module.removeprefix("tests."), alias.name)
    return mod


def _is_pytest_check(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr in _CHECKS
            and isinstance(func.value, ast.Name) and func.value.id == "pytest")


class Suite:
    """The modules of ``tests/`` and the memoised answer 'does this function check something?'."""

    def __init__(self, modules: dict[str, Module]) -> None:
        self.modules = modules
        self._memo: dict[tuple[str, str], bool] = {}

    def _helper(self, module: Module, name: str) -> tuple[Module, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        if name in module.functions:
            return module, module.functions[name]
        if name in module.imported:
            other_name, real = module.imported[name]
            other = self.modules.get(other_name)
            if other is not None and real in other.functions:
                return other, other.functions[real]
        return None

    def checks(self, module: Module, func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        key = (module.name, f"{func.name}@{func.lineno}")
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False  # a recursive helper does not check by calling itself
        result = False
        for node in ast.walk(func):
            if isinstance(node, ast.Assert):
                result = True
            elif isinstance(node, ast.Call):
                if _is_pytest_check(node.func):
                    result = True
                elif isinstance(node.func, ast.Name):
                    found = self._helper(module, node.func.id)
                    result = found is not None and self.checks(*found)
            if result:
                break
        self._memo[key] = result
        return result


def load_suite(root: Path = TESTS) -> Suite:
    modules = {p.stem: parse_module(p.stem, p.read_text(encoding="utf-8")) for p in sorted(root.glob("*.py"))}
    return Suite(modules)


def collected_tests(module: Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The tests pytest collects from a module: ``test_*`` functions and ``Test*`` classes' ``test_*`` methods."""
    for node in module.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    yield item


def unchecked_tests(suite: Suite) -> list[str]:
    out = []
    for name, module in sorted(suite.modules.items()):
        if not name.startswith("test_"):
            continue
        out += [f"{name}.py:{f.lineno} {f.name}" for f in collected_tests(module) if not suite.checks(module, f)]
    return out


def _mark(node: ast.expr) -> tuple[str, ast.Call | None] | None:
    """``pytest.mark.NAME`` or ``pytest.mark.NAME(...)`` → (NAME, the call or None)."""
    call = node if isinstance(node, ast.Call) else None
    target = call.func if call is not None else node
    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute)
            and target.value.attr == "mark" and isinstance(target.value.value, ast.Name)
            and target.value.value.id == "pytest"):
        return target.attr, call
    return None


def _unconditional_skips(func: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[int]:
    """Lines of ``pytest.skip()`` statements that run whatever the environment (not under if/try/with)."""
    stack: list[ast.stmt] = list(func.body)
    while stack:
        stmt = stack.pop()
        if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "skip"
                and isinstance(stmt.value.func.value, ast.Name) and stmt.value.func.value.id == "pytest"):
            yield stmt.lineno
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            stack.extend(stmt.body)


def marker_problems(module: Module) -> list[str]:
    """Unconditional skips and non-strict or unexplained xfails in one module."""
    out = []
    called = {id(n.func) for n in ast.walk(module.tree) if isinstance(n, ast.Call)}
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.expr) or id(node) in called:
            continue  # ``pytest.mark.xfail`` inside ``pytest.mark.xfail(...)`` is read with its call
        mark = _mark(node)
        if mark is None:
            continue
        name, call = mark
        where = f"{module.name}.py:{node.lineno}"
        if name == "skip":
            out.append(f"{where}: pytest.mark.skip skips unconditionally (use skipif on the environment)")
        elif name == "xfail":
            kwargs = {k.arg: k.value for k in call.keywords} if call is not None else {}
            strict = kwargs.get("strict")
            if not (isinstance(strict, ast.Constant) and strict.value is True):
                out.append(f"{where}: an xfail must be strict=True")
            if "reason" not in kwargs:
                out.append(f"{where}: an xfail must give its reason")
    for f in collected_tests(module):
        out += [f"{module.name}.py:{line}: {f.name} calls pytest.skip() unconditionally"
                for line in _unconditional_skips(f)]
    return out


# -- the suite -------------------------------------------------------------------------------------


def test_every_test_asserts_something() -> None:
    suite = load_suite()
    assert len([m for m in suite.modules if m.startswith("test_")]) >= 25  # the glob found the suite
    assert unchecked_tests(suite) == []


def test_no_unconditional_skip_and_every_xfail_is_strict() -> None:
    suite = load_suite()
    problems = [p for m in sorted(suite.modules.values(), key=lambda m: m.name) for p in marker_problems(m)]
    assert problems == []


def test_test_modules_import_helpers_from_support_not_conftest() -> None:
    """conftest.py is loaded by pytest under its own name; importing it again as a module runs it twice."""
    offenders = []
    for path in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in ("conftest", "tests.conftest"):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


# -- the rule itself, on small sources ---------------------------------------------------------------

SAMPLE = '''
import pytest
from tests.support import check_shape

def _checks(x):
    assert x

def _quiet(x):
    return x

def _indirect(x):
    _checks(x)

def test_plain():
    assert 1

def test_raises():
    with pytest.raises(ValueError):
        int("x")

def test_helper():
    _indirect(1)

def test_imported_helper():
    check_shape({})

def test_nothing():
    _quiet(1)
    print("ran")

def test_only_a_nested_lambda_returns():
    f = lambda: 1
    f()

class TestGroup:
    def test_method_without_check(self):
        _quiet(2)

    def helper(self):
        pass
'''
SUPPORT = '''
def check_shape(d):
    assert isinstance(d, dict)

def run_it():
    return 1
'''


def _sample_suite(sample: str = SAMPLE) -> Suite:
    return Suite({"test_sample": parse_module("test_sample", sample), "support": parse_module("support", SUPPORT)})


def test_rule_flags_tests_with_no_assert_raises_or_checking_helper() -> None:
    flagged = unchecked_tests(_sample_suite())
    assert [f.split(" ")[1] for f in flagged] == ["test_nothing", "test_only_a_nested_lambda_returns",
                                                   "test_method_without_check"]


def test_rule_does_not_count_a_helper_that_does_not_check() -> None:
    suite = _sample_suite("from tests.support import run_it\n\ndef test_x():\n    run_it()\n")
    assert [f.split(" ")[1] for f in unchecked_tests(suite)] == ["test_x"]


def test_rule_survives_recursive_helpers() -> None:
    suite = _sample_suite("def _loop(n):\n    return _loop(n - 1)\n\ndef test_x():\n    _loop(3)\n")
    assert [f.split(" ")[1] for f in unchecked_tests(suite)] == ["test_x"]


@pytest.mark.parametrize(("source", "expected"), [
    ("import pytest\n@pytest.mark.skip(reason='later')\ndef test_x():\n    assert 1\n", ["unconditionally"]),
    ("import pytest\n@pytest.mark.skip\ndef test_x():\n    assert 1\n", ["unconditionally"]),
    ("import pytest\ndef test_x():\n    pytest.skip('later')\n    assert 1\n", ["unconditionally"]),
    ("import pytest\ndef test_x():\n    if 1:\n        pytest.skip('env')\n    assert 1\n", []),
    ("import pytest\n@pytest.mark.xfail(reason='bug')\ndef test_x():\n    assert 0\n", ["strict=True"]),
    ("import pytest\n@pytest.mark.xfail(strict=True)\ndef test_x():\n    assert 0\n", ["reason"]),
    ("import pytest\n@pytest.mark.xfail(strict=True, reason='bug')\ndef test_x():\n    assert 0\n", []),
    ("import pytest\n@pytest.mark.skipif(True, reason='env')\ndef test_x():\n    assert 1\n", []),
], ids=["skip-mark-call", "skip-mark", "skip-call", "skip-under-if", "xfail-not-strict", "xfail-no-reason",
        "xfail-ok", "skipif-ok"])
def test_marker_rule(source: str, expected: list[str]) -> None:
    problems = marker_problems(parse_module("test_sample", source))
    assert len(problems) == len(expected), problems
    for problem, word in zip(problems, expected, strict=True):
        assert word in problem
