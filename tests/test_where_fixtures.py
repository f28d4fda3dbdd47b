"""Spec tests for ``castfind where`` over the fixture tree in ``fixtures/where`` (see its README).

Two kinds of test live here:

- self-checks that need no castfind: every expected location is found by its text (``line_of``), is
  unique, and is the line of the ``def``/``class``/assignment; the fixtures parse (except the one that
  must not); and Python itself, importing the fixtures, agrees with the expected answers;
- CLI tests that run ``python -m castfind where ... --json --no-cache`` from the repository root and
  check exact qualnames, kinds, roots, paths, lines, chains, call sites, unresolved entries and exit
  codes. They are skipped, with a reason, only while the ``where`` command does not exist at all.

Line numbers are never hard-coded: they are looked up in the fixture files by text.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = "fixtures/where"
SK = f"{FIXTURES}/servekit"  # the src-layout root, exactly as passed to --root
KK = f"{FIXTURES}/kernelkit"  # the wheel-style root
ROOTS = (SK, KK)

# Files, relative to their root, as castfind must report them.
KK_INIT = "kernelkit/__init__.py"
FUSED_INIT = "kernelkit/fused/__init__.py"
CORE = "kernelkit/fused/core.py"
GATING = "kernelkit/fused/gating.py"
NORM_INIT = "kernelkit/norm/__init__.py"
RMSNORM = "kernelkit/norm/rmsnorm.py"
K_ATTENTION = "kernelkit/attention.py"
K_SAMPLING = "kernelkit/sampling.py"
SERVEKIT = "python/servekit"
LINEAR = f"{SERVEKIT}/layers/linear.py"
RUNNER = f"{SERVEKIT}/layers/moe/runner.py"
EP_RUNNER = f"{SERVEKIT}/layers/moe/ep_runner.py"
LAYER = f"{SERVEKIT}/layers/moe/layer.py"
POOL = f"{SERVEKIT}/mem/pool.py"
BACKENDS = f"{SERVEKIT}/attention/backends.py"
TORCH_REF = f"{SERVEKIT}/attention/torch_ref.py"
REGISTRY = f"{SERVEKIT}/attention/registry.py"
COMPAT = f"{SERVEKIT}/utils/compat.py"
S_SAMPLING = f"{SERVEKIT}/sampling.py"
BROKEN = f"{SERVEKIT}/broken.py"

KINDS = {"function", "class", "method", "alias", "variable"}


# --------------------------------------------------------------------------- locating lines by text


def line_of(root: str, path: str, text: str, *, after: str | None = None) -> int:
    """Return the 1-based line of ``root/path`` that contains ``text``.

    Without ``after`` exactly one line may contain ``text``. With ``after``, return the first line
    containing ``text`` below the (unique) line containing ``after``: this tells apart repeated
    lines such as the ``def get_key_buffer`` of each class.
    """
    lines = (REPO / root / path).read_text(encoding="utf-8").splitlines()
    if after is not None:
        start = line_of(root, path, after)
        for number in range(start + 1, len(lines) + 1):
            if text in lines[number - 1]:
                return number
        raise AssertionError(f"{text!r} not found below {after!r} in {root}/{path}")
    hits = [number for number, line in enumerate(lines, 1) if text in line]
    assert len(hits) == 1, f"{text!r} is on lines {hits} of {root}/{path}; it must be on exactly one"
    return hits[0]


@dataclass(frozen=True)
class Loc:
    """A fixture line, named by its text so that editing a fixture never leaves a stale number."""

    root: str
    path: str
    text: str
    after: str | None = None

    @property
    def line(self) -> int:
        return line_of(self.root, self.path, self.text, after=self.after)

    @property
    def site(self) -> tuple[str, int]:
        """``(path, line)``, the shape of a call site or an unresolved entry."""
        return (self.path, self.line)


@dataclass(frozen=True)
class Def:
    """An expected definition: what ``where`` must print for it."""

    qualname: str
    kind: str
    loc: Loc

    def key(self) -> tuple[str, str, str, str, int]:
        return (self.qualname, self.kind, self.loc.root, self.loc.path, self.loc.line)


# The public kernel; the nested def of the same name in the same module is NESTED_MOE below.
MOE = Def(
    "kernelkit.fused.core.cutlass_like_moe",
    "function",
    Loc(KK, CORE, "def cutlass_like_moe(x, w13, w2, topk, config=None):"),
)
NESTED_MOE = Loc(KK, CORE, "def cutlass_like_moe(", after="def build_moe_runner(")
MOE_ALIAS = Loc(KK, CORE, "moe_forward = cutlass_like_moe")
MOE_CONFIG = Def("kernelkit.fused.core.MoeConfig", "class", Loc(KK, CORE, "class MoeConfig:"))
TILE_M = Def("kernelkit.fused.core.DEFAULT_TILE_M", "variable", Loc(KK, CORE, "DEFAULT_TILE_M = 128"))
TOPK_SOFTMAX = Def("kernelkit.fused.gating.topk_softmax", "function", Loc(KK, GATING, "def topk_softmax("))
GROUPED_TOPK = Def("kernelkit.fused.gating.grouped_topk", "function", Loc(KK, GATING, "def grouped_topk("))
RMS_NORM = Def("kernelkit.norm.rmsnorm.rms_norm", "function", Loc(KK, RMSNORM, "def rms_norm("))
RMS_NORM_REF = Def("kernelkit.norm.rmsnorm._rms_norm_ref", "function", Loc(KK, RMSNORM, "def _rms_norm_ref("))
FUSED_ADD_RMS_NORM = Def(
    "kernelkit.norm.rmsnorm.fused_add_rms_norm",
    "function",
    Loc(KK, RMSNORM, "def fused_add_rms_norm("),
)
TOP_P = Def("kernelkit.sampling.top_p_sample", "function", Loc(KK, K_SAMPLING, "def top_p_sample("))
K_DECODE = Def("kernelkit.attention.decode_attention", "function", Loc(KK, K_ATTENTION, "def decode_attention("))
REF_DECODE = Def(
    "servekit.attention.torch_ref.decode_attention",
    "function",
    Loc(SK, TORCH_REF, "def decode_attention("),
)
COLUMN_LINEAR = Def("servekit.layers.linear.ColumnLinear", "class", Loc(SK, LINEAR, "class ColumnLinear:"))
BASE_GKB = Def(
    "servekit.mem.pool.BaseKVPool.get_key_buffer",
    "method",
    Loc(SK, POOL, "def get_key_buffer(", after="class BaseKVPool:"),
)
MHA_GKB = Def(
    "servekit.mem.pool.MHAPool.get_key_buffer",
    "method",
    Loc(SK, POOL, "def get_key_buffer(", after="class MHAPool("),
)
MLA_GKB = Def(
    "servekit.mem.pool.MLAPool.get_key_buffer",
    "method",
    Loc(SK, POOL, "def get_key_buffer(", after="class MLAPool("),
)
FALLBACK_RMS = Def("servekit.utils.compat.fast_rms_norm", "function", Loc(SK, COMPAT, "def fast_rms_norm("))
# `rmsnorm = fast_rms_norm`: a module-level alias the lookup goes through is a definition too (issue 36).
RMSNORM_ALIAS = Def("servekit.utils.compat.rmsnorm", "alias", Loc(SK, COMPAT, "rmsnorm = fast_rms_norm", after="def fast_rms_norm("))
PICK_IF = Def(
    "servekit.utils.compat.pick_moe_backend",
    "function",
    Loc(SK, COMPAT, "def pick_moe_backend(", after="if DETERMINISTIC:"),
)
PICK_ELSE = Def(
    "servekit.utils.compat.pick_moe_backend",
    "function",
    Loc(SK, COMPAT, "def pick_moe_backend(", after="else:"),
)

# Call sites.
CALL_VIA_ALIAS = Loc(SK, LAYER, "return kernel_fused_moe(")  # kernel_fused_moe(...)
CALL_VIA_MODULE = Loc(SK, LAYER, "return kf.cutlass_like_moe(")  # import kernelkit.fused as kf; kf.cutlass_like_moe()
CALL_VIA_TUPLE = Loc(SK, EP_RUNNER, "return fused_experts(")  # fused_experts, _ = _load(); fused_experts(...)
CALL_OF_NESTED = Loc(KK, CORE, "return cutlass_like_moe(x, w13, w2, topk)")  # calls the nested def, not MOE
CALL_ROUTE_TOPK = Loc(SK, LAYER, "topk_ids = route_topk(")
CALL_TOP_P = Loc(SK, S_SAMPLING, "return kernelkit.top_p_sample(")
AT_KERNEL = Loc(SK, BACKENDS, "out = decode_attention(")  # decode_attention is kernelkit's here ...
AT_REFERENCE = Loc(SK, BACKENDS, "return decode_attention(")  # ... and servekit's reference here

# Dynamic lookups that must stay unresolved.
DYNAMIC_IMPORT = Loc(SK, REGISTRY, "importlib.import_module(f")
DYNAMIC_GETATTR = Loc(SK, REGISTRY, "return getattr(kernelkit, kernel_name)")

# Imports whose lines a chain must pass through.
RUNNER_IMPORT = Loc(SK, RUNNER, "from kernelkit.fused import cutlass_like_moe", after="def _kernel_fused_moe(")
FUSED_INIT_IMPORT = Loc(KK, FUSED_INIT, "from .core import")
KK_INIT_IMPORT = Loc(KK, KK_INIT, "from kernelkit.fused import")
LAYER_RELATIVE_IMPORT = Loc(SK, LAYER, "from ..linear import ColumnLinear")

# A dotted symbol -> the one definition ``where`` must report for it, or None: Python raises
# AttributeError for it, so ``where`` must find nothing. Checked against Python itself in
# ``test_python_agrees_with_expected_answers`` and against castfind in ``test_dotted_symbol``.
DOTTED = {
    "servekit.layers.moe.runner.kernel_fused_moe": MOE,
    "servekit.layers.moe.ep_runner.fused_experts": MOE,
    "servekit.layers.moe.ep_runner.experts_config": MOE_CONFIG,
    "servekit.layers.moe.layer.route_topk": TOPK_SOFTMAX,
    "servekit.layers.moe.layer.ColumnLinear": COLUMN_LINEAR,
    "kernelkit.cutlass_like_moe": MOE,
    "kernelkit.fused.cutlass_like_moe": MOE,
    "kernelkit.fused.core.cutlass_like_moe": MOE,
    "kernelkit.fused.core.moe_forward": MOE,
    "kernelkit.MoeConfig": MOE_CONFIG,
    "kernelkit.fused.topk_softmax": TOPK_SOFTMAX,
    "kernelkit.fused.grouped_topk": None,  # public, but not in gating.__all__
    "kernelkit.fused._topk_ref": None,  # private
    "kernelkit.fused.gating.grouped_topk": GROUPED_TOPK,
    "kernelkit.norm.rms_norm": RMS_NORM,
    "kernelkit.norm.fused_add_rms_norm": FUSED_ADD_RMS_NORM,
    "kernelkit.norm._rms_norm_ref": None,  # private, no __all__ in rmsnorm
    "kernelkit.norm.rmsnorm._rms_norm_ref": RMS_NORM_REF,
    "kernelkit.top_p_sample": TOP_P,  # only through kernelkit.__getattr__
    "servekit.attention.backends.decode_attention": K_DECODE,  # the function-local import does not rebind it
    "servekit.mem.pool.MLAPool.get_key_buffer": MLA_GKB,
    "servekit.mem.pool.HostKVPool.get_key_buffer": BASE_GKB,
    "servekit.mem.pool.DoubleSparsePool.get_key_buffer": MHA_GKB,
}

ALL_DEFS = [value for value in globals().values() if isinstance(value, Def)]
ALL_LOCS = [value for value in globals().values() if isinstance(value, Loc)] + [d.loc for d in ALL_DEFS]


# --------------------------------------------------------------------------- self-checks (no castfind)


def _fixture_files() -> list[Path]:
    return sorted((REPO / FIXTURES).rglob("*.py"))


def test_every_expected_location_is_found_once_by_its_text():
    for loc in ALL_LOCS:
        line = loc.line  # asserts uniqueness
        source = (REPO / loc.root / loc.path).read_text(encoding="utf-8").splitlines()[line - 1]
        assert loc.text in source


def _node_at(tree: ast.Module, line: int) -> ast.AST | None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign)) and node.lineno == line:
            return node
    return None


def test_expected_definition_lines_are_the_def_class_or_assignment_lines():
    """``line`` is the line of the ``def``/``class`` keyword (never a decorator) or the assignment."""
    for expected in ALL_DEFS:
        tree = ast.parse((REPO / expected.loc.root / expected.loc.path).read_text(encoding="utf-8"))
        node = _node_at(tree, expected.loc.line)
        name = expected.qualname.rsplit(".", 1)[1]
        if expected.kind == "class":
            assert isinstance(node, ast.ClassDef) and node.name == name, expected
        elif expected.kind in ("function", "method"):
            assert isinstance(node, ast.FunctionDef) and node.name == name, expected
        else:
            assert isinstance(node, ast.Assign) and [t.id for t in node.targets] == [name], expected
    nested = _node_at(ast.parse((REPO / KK / CORE).read_text(encoding="utf-8")), NESTED_MOE.line)
    assert isinstance(nested, ast.FunctionDef) and nested.name == "cutlass_like_moe"
    assert NESTED_MOE.line < MOE.loc.line, "the nested def must come first, so 'first def wins' is wrong"
    assert TOPK_SOFTMAX.loc.line - 1 == line_of(KK, GATING, "@_jit_kernel"), "topk_softmax must stay decorated"


def test_fixtures_parse_except_the_broken_one():
    for path in _fixture_files():
        source = path.read_text(encoding="utf-8")
        if path == REPO / SK / BROKEN:
            with pytest.raises(SyntaxError):
                compile(source, str(path), "exec")
        else:
            compile(source, str(path), "exec")


_ORACLE = r"""
import importlib, inspect, json, sys
answers = {}
for symbol in json.loads(sys.argv[1]):
    parts = symbol.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
            break
        except ImportError:
            continue
    try:
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
    except AttributeError:
        answers[symbol] = None
        continue
    answers[symbol] = [obj.__module__ + "." + obj.__qualname__, inspect.getsourcefile(obj)]
print(json.dumps(answers))
"""


def test_python_agrees_with_expected_answers():
    """Import the fixtures for real and check each single-answer symbol resolves where we expect.

    This pins the expected answers to Python's semantics (``__all__``, star imports, ``__getattr__``,
    MRO), so the CLI tests below test castfind, not our reading of Python.
    """
    proc = subprocess.run(
        [sys.executable, "-B", "-c", _ORACLE, json.dumps(sorted(DOTTED))],
        cwd=REPO,
        env={"PYTHONPATH": f"{REPO / SK / 'python'}:{REPO / KK}", "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    answers = json.loads(proc.stdout)
    for symbol, expected in DOTTED.items():
        if expected is None:
            assert answers[symbol] is None, f"{symbol} exists at runtime: {answers[symbol]}"
            continue
        qualname, source = answers[symbol]
        assert qualname == expected.qualname, symbol
        assert Path(source) == REPO / expected.loc.root / expected.loc.path, symbol


# --------------------------------------------------------------------------- running the CLI


@pytest.fixture(scope="module")
def where_cli() -> None:
    """The ``where`` command is registered: an unregistered command fails these tests, never skips them."""
    proc = subprocess.run(
        [sys.executable, "-m", "castfind", "where", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    output = proc.stdout + proc.stderr
    assert "No such command" not in output, f"`castfind where` is not registered:\n{output}"
    assert proc.returncode == 0, output


needs_where = pytest.mark.usefixtures("where_cli")


def run_where(*args: str, roots: tuple[str, ...] = ROOTS, as_json: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "castfind", "where", *args]
    for root in roots:
        command += ["--root", root]
    if as_json:
        command.append("--json")
    command.append("--no-cache")
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def _check_shape(data: dict, roots: tuple[str, ...]) -> None:
    """The JSON has exactly the specified keys, and every path/line points at a real fixture line."""

    def file_lines(root: str, path: str) -> int:
        assert "\\" not in path and not path.startswith("/"), path
        return len((REPO / root / path).read_text(encoding="utf-8").splitlines())

    def under_some_root(path: str) -> str:
        found = [root for root in roots if (REPO / root / path).is_file()]
        assert found, f"{path} is not a file under any root {roots}"
        return found[0]

    assert set(data) == {"symbol", "definitions", "call_sites", "unresolved"}
    for definition in data["definitions"]:
        # An alias names the definition it stands for (issue 36).
        extra = {"target"} if definition["kind"] == "alias" and "target" in definition else set()
        assert set(definition) == {"qualname", "kind", "root", "path", "line", "chain"} | extra
        assert definition["kind"] in KINDS
        assert definition["root"] in roots, "root must be the --root value as given"
        assert 1 <= definition["line"] <= file_lines(definition["root"], definition["path"])
        for hop in definition["chain"]:
            assert set(hop) == {"path", "line", "kind", "text"}
            assert 1 <= hop["line"] <= file_lines(under_some_root(hop["path"]), hop["path"])
    for site in data["call_sites"]:
        assert set(site) == {"path", "line", "test"}
        assert site["test"] is site["path"].split("/")[-1].startswith("test_")
        assert 1 <= site["line"] <= file_lines(under_some_root(site["path"]), site["path"])
    for entry in data["unresolved"]:
        assert set(entry) == {"path", "line", "reason"}
        assert isinstance(entry["reason"], str) and entry["reason"].strip()
        assert 1 <= entry["line"] <= file_lines(under_some_root(entry["path"]), entry["path"])


def where_json(symbol: str, *extra: str, roots: tuple[str, ...] = ROOTS) -> dict:
    """Run ``where SYMBOL --json``, expect exit 0, check the JSON shape and return it."""
    proc = run_where(symbol, *extra, roots=roots)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data = json.loads(proc.stdout)
    _check_shape(data, roots)
    assert data["symbol"] == symbol
    return data


def def_keys(data: dict) -> set[tuple[str, str, str, str, int]]:
    return {(d["qualname"], d["kind"], d["root"], d["path"], d["line"]) for d in data["definitions"]}


def def_sites(data: dict) -> set[tuple[str, str, int]]:
    return {(d["root"], d["path"], d["line"]) for d in data["definitions"]}


def call_sites(data: dict) -> set[tuple[str, int]]:
    return {(site["path"], site["line"]) for site in data["call_sites"]}


def definition(data: dict, expected: Def) -> dict:
    """The reported definition at ``expected``'s place (the first one, if reported twice)."""
    for candidate in data["definitions"]:
        place = (candidate["root"], candidate["path"], candidate["line"])
        if place == (expected.loc.root, expected.loc.path, expected.loc.line):
            return candidate
    raise AssertionError(f"{expected.qualname} not among {def_keys(data)}")


def assert_chain_passes(found: dict, paths: list[str]) -> None:
    """The chain visits ``paths`` in this order (other hops may come in between)."""
    hops = [hop["path"] for hop in found["chain"]]
    remaining = iter(hops)
    assert all(path in remaining for path in paths), f"chain {hops} does not pass through {paths} in order"


def hop_at(found: dict, loc: Loc) -> dict:
    """The chain hop at ``loc``; its text must name the identifier that ``loc`` imports."""
    for hop in found["chain"]:
        if (hop["path"], hop["line"]) == loc.site:
            return hop
    raise AssertionError(f"no hop at {loc.site}: {[(h['path'], h['line']) for h in found['chain']]}")


# --------------------------------------------------------------------------- CLI tests


@needs_where
@pytest.mark.parametrize("symbol", sorted(DOTTED))
def test_dotted_symbol(symbol):
    """Each dotted path resolves to exactly its one definition, or to nothing (exit 1)."""
    expected = DOTTED[symbol]
    if expected is None:
        proc = run_where(symbol, as_json=False)
        assert proc.returncode == 1, f"{symbol} must not resolve:\n{proc.stdout}{proc.stderr}"
        return
    # A module-level `Name = OtherName` on the way is listed too, as an alias of the definition (issue 36).
    assert {k for k in def_keys(where_json(symbol)) if k[1] != "alias"} == {expected.key()}


@needs_where
def test_alias_bound_from_a_returned_callable_resolves_to_the_module_level_kernel():
    """Case 7: ``kernel_fused_moe = _kernel_fused_moe()``, no def has that name."""
    data = where_json("kernel_fused_moe")
    assert def_keys(data) == {MOE.key()}
    found = definition(data, MOE)
    assert_chain_passes(found, [RUNNER, FUSED_INIT])
    assert "cutlass_like_moe" in hop_at(found, RUNNER_IMPORT)["text"]
    assert "cutlass_like_moe" in hop_at(found, FUSED_INIT_IMPORT)["text"]
    assert (CORE, NESTED_MOE.line) not in {(h["path"], h["line"]) for h in found["chain"]}


@needs_where
def test_call_sites_are_every_call_of_the_kernel_through_any_alias():
    """Case 11 (+ case 1 ``m.c(...)``, case 7 tuple): the call in the nested runner is not one of them."""
    data = where_json("kernel_fused_moe")
    assert call_sites(data) == {CALL_VIA_ALIAS.site, CALL_VIA_MODULE.site, CALL_VIA_TUPLE.site}
    assert CALL_OF_NESTED.site not in call_sites(where_json("kernelkit.cutlass_like_moe"))


@needs_where
def test_tuple_unpacking_gives_each_name_its_own_element():
    """Case 7: ``fused_experts, experts_config = _load()`` and ``_load`` returns ``(kernel, MoeConfig)``."""
    kernel = where_json("fused_experts")
    assert def_keys(kernel) == {MOE.key()}
    assert_chain_passes(definition(kernel, MOE), [EP_RUNNER, RUNNER, FUSED_INIT])
    config = where_json("experts_config")
    assert def_keys(config) == {MOE_CONFIG.key()}
    assert_chain_passes(definition(config, MOE_CONFIG), [EP_RUNNER, RUNNER, KK_INIT, FUSED_INIT])


@needs_where
def test_package_reexports_are_followed_several_levels_deep():
    """Case 2: kernelkit/__init__.py -> kernelkit/fused/__init__.py -> kernelkit/fused/core.py."""
    found = definition(where_json("kernelkit.cutlass_like_moe"), MOE)
    assert_chain_passes(found, [KK_INIT, FUSED_INIT])
    assert "cutlass_like_moe" in hop_at(found, KK_INIT_IMPORT)["text"]
    assert "cutlass_like_moe" in hop_at(found, FUSED_INIT_IMPORT)["text"]


@needs_where
def test_nested_def_of_the_same_name_is_reported_apart_from_the_module_level_one():
    """Case 8: a bare name lists both defs; only the module-level one has the public qualname."""
    data = where_json("cutlass_like_moe")
    assert def_sites(data) == {(KK, CORE, MOE.loc.line), (KK, CORE, NESTED_MOE.line)}
    assert (MOE.qualname, "function") == (definition(data, MOE)["qualname"], definition(data, MOE)["kind"])
    nested = [d for d in data["definitions"] if d["line"] == NESTED_MOE.line]
    assert {d["kind"] for d in nested} == {"function"}
    for entry in nested:
        assert entry["qualname"] != MOE.qualname
        assert "build_moe_runner" in entry["qualname"] and entry["qualname"].endswith("cutlass_like_moe")


@needs_where
def test_module_level_alias_is_a_hop_to_the_module_level_def():
    """Case 5/8: ``moe_forward = cutlass_like_moe`` at module level names the module-level def."""
    data = where_json("kernelkit.fused.core.moe_forward")
    found = definition(data, MOE)
    assert (CORE, MOE_ALIAS.line) in {(hop["path"], hop["line"]) for hop in found["chain"]}
    # The alias itself is a definition of moe_forward, listed first (its name is the one asked for).
    alias = data["definitions"][0]
    assert (alias["qualname"], alias["kind"], alias["path"], alias["line"], alias["target"]) == (
        "kernelkit.fused.core.moe_forward", "alias", CORE, MOE_ALIAS.line, MOE.qualname)


@needs_where
def test_star_import_with_dunder_all_is_a_hop():
    """Case 3: ``kernelkit.fused.topk_softmax`` comes through ``from .gating import *``."""
    found = definition(where_json("kernelkit.fused.topk_softmax"), TOPK_SOFTMAX)
    assert_chain_passes(found, [FUSED_INIT])


@needs_where
def test_star_import_without_dunder_all_is_a_hop():
    """Case 3: ``kernelkit.norm.rms_norm`` comes through ``from .rmsnorm import *`` (no ``__all__``)."""
    found = definition(where_json("kernelkit.norm.rms_norm"), RMS_NORM)
    assert_chain_passes(found, [NORM_INIT])


@needs_where
def test_from_import_as_alias_with_its_call_site():
    """Case 1: ``from kernelkit.fused import topk_softmax as route_topk``; the def line, not the decorator's."""
    data = where_json("route_topk")
    assert def_keys(data) == {TOPK_SOFTMAX.key()}
    assert_chain_passes(definition(data, TOPK_SOFTMAX), [LAYER, FUSED_INIT])
    assert call_sites(data) == {CALL_ROUTE_TOPK.site}


@needs_where
def test_relative_import_two_levels_up():
    """Case 1: ``from ..linear import ColumnLinear`` in servekit/layers/moe/layer.py."""
    found = definition(where_json("servekit.layers.moe.layer.ColumnLinear"), COLUMN_LINEAR)
    assert "ColumnLinear" in hop_at(found, LAYER_RELATIVE_IMPORT)["text"]


@needs_where
def test_module_getattr_lazy_import():
    """Case 4: ``kernelkit.top_p_sample`` exists only through ``kernelkit.__getattr__``."""
    data = where_json("kernelkit.top_p_sample")
    assert def_keys(data) == {TOP_P.key()}
    assert_chain_passes(definition(data, TOP_P), [KK_INIT])
    assert call_sites(data) == {CALL_TOP_P.site}


@needs_where
@pytest.mark.parametrize(
    ("symbol", "expected"),
    [
        ("servekit.utils.compat.fast_rms_norm", {RMS_NORM, FALLBACK_RMS}),  # try import / except def
        ("servekit.utils.compat.rmsnorm", {RMSNORM_ALIAS, RMS_NORM, FALLBACK_RMS}),  # alias of that conditional name
        ("servekit.utils.compat.pick_moe_backend", {PICK_IF, PICK_ELSE}),  # if / else defs
        ("servekit.utils.compat.MOE_TILE_M", {TILE_M}),  # alias of a constant
    ],
)
def test_conditional_bindings_are_all_reported(symbol, expected):
    """Case 5: every binding of a conditionally defined name is a definition."""
    assert def_keys(where_json(symbol)) == {e.key() for e in expected}


@needs_where
def test_try_import_binding_chain_goes_through_the_star_import():
    found = definition(where_json("servekit.utils.compat.fast_rms_norm"), RMS_NORM)
    assert_chain_passes(found, [COMPAT, NORM_INIT])


@needs_where
def test_exact_definitions_rank_first():
    """``fast_rms_norm``: the def named so ranks before the import that renames ``rms_norm``."""
    data = where_json("fast_rms_norm")
    first = data["definitions"][0]
    assert (first["qualname"], first["kind"], first["root"], first["path"], first["line"]) == FALLBACK_RMS.key()
    assert RMS_NORM.key() in def_keys(data)


@needs_where
@pytest.mark.parametrize(
    ("symbol", "expected"),
    [
        ("MLAPool.get_key_buffer", MLA_GKB),  # overridden
        ("MHAPool.get_key_buffer", MHA_GKB),  # overridden, subclass does not override again
        ("HostKVPool.get_key_buffer", BASE_GKB),  # inherited from the base
        ("DoubleSparsePool.get_key_buffer", MHA_GKB),  # inherited from the nearest class in the MRO
    ],
)
def test_class_dot_method(symbol, expected):
    """Case 9: ``Class.method`` gives the method Python would call on that class."""
    assert def_keys(where_json(symbol)) == {expected.key()}


@needs_where
def test_bare_method_name_lists_every_definition():
    assert def_keys(where_json("get_key_buffer")) == {BASE_GKB.key(), MHA_GKB.key(), MLA_GKB.key()}


@needs_where
def test_base_class_method_ranks_its_own_def_first():
    data = where_json("BaseKVPool.get_key_buffer")
    first = data["definitions"][0]
    assert (first["qualname"], first["kind"], first["root"], first["path"], first["line"]) == BASE_GKB.key()
    assert def_keys(data) - {BASE_GKB.key()} <= {MHA_GKB.key(), MLA_GKB.key()}, "only overrides may follow"


@needs_where
def test_at_resolves_the_name_as_python_sees_it_on_that_line():
    """``decode_attention`` is kernelkit's in KernelBackend and servekit's reference in ReferenceBackend."""
    assert def_keys(where_json("decode_attention")) == {K_DECODE.key(), REF_DECODE.key()}
    relative = f"{SK}/{BACKENDS}:{AT_KERNEL.line}"  # a path relative to the working directory
    kernel = where_json("decode_attention", "--at", relative)
    assert def_keys(kernel) == {K_DECODE.key()}
    assert call_sites(kernel) == {AT_KERNEL.site}
    absolute = f"{REPO / SK / BACKENDS}:{AT_REFERENCE.line}"  # an absolute path
    reference = where_json("decode_attention", "--at", absolute)
    assert def_keys(reference) == {REF_DECODE.key()}
    assert call_sites(reference) == {AT_REFERENCE.site}


@needs_where
@pytest.mark.parametrize(("symbol", "dynamic"), [("paged_decode", DYNAMIC_IMPORT), ("env_kernel", DYNAMIC_GETATTR)])
def test_dynamic_lookups_are_unresolved_never_guessed(symbol, dynamic):
    """Case 10: at runtime these land in kernelkit, but statically nothing may point there."""
    data = where_json(symbol)
    assert dynamic.site in {(entry["path"], entry["line"]) for entry in data["unresolved"]}
    assert not [d for d in data["definitions"] if d["root"] == KK], data["definitions"]


@needs_where
def test_unparseable_file_becomes_a_diagnostic_and_the_lookup_goes_on():
    """Case 12: broken.py does not parse; the answer is still right and stdout stays valid JSON."""
    text = run_where("kernel_fused_moe", as_json=False)
    assert text.returncode == 0, text.stderr
    assert CORE in text.stdout and "cutlass_like_moe" in text.stdout
    assert "broken.py" in text.stdout + text.stderr
    assert "Traceback" not in text.stdout + text.stderr
    assert def_keys(where_json("kernel_fused_moe")) == {MOE.key()}


def _names_bound_in_fixtures() -> set[str]:
    names: set[str] = set()
    for path in _fixture_files():
        if path == REPO / SK / BROKEN:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[0])
    return names


@needs_where
def test_unknown_name_exits_1_and_suggests_close_names():
    typo = "get_key_bufer"
    assert difflib.get_close_matches(typo, sorted(_names_bound_in_fixtures()))[0] == "get_key_buffer"
    proc = run_where(typo, as_json=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"(?<!\w)get_key_buffer(?!\w)", proc.stdout + proc.stderr), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


@needs_where
def test_missing_root_is_a_one_line_usage_error():
    proc = run_where("kernel_fused_moe", roots=(SK, f"{FIXTURES}/no_such_root"))
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no_such_root" in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


@needs_where
def test_at_without_a_line_is_a_usage_error():
    proc = run_where("decode_attention", "--at", f"{SK}/{BACKENDS}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() and "Traceback" not in proc.stdout + proc.stderr


@needs_where
def test_root_order_does_not_change_the_answer():
    assert def_keys(where_json("kernel_fused_moe", roots=(KK, SK))) == {MOE.key()}


@needs_where
def test_one_parent_root_finds_both_packages():
    """Discovery finds top-level packages at any depth (the Makefile demo uses ``--root fixtures/where``)."""
    data = where_json("kernel_fused_moe", roots=(FIXTURES,))
    assert def_keys(data) == {(MOE.qualname, "function", FIXTURES, f"kernelkit/{CORE}", MOE.loc.line)}
