"""Checker: the dtype a cast names, whether it runs once, which rule wins, hot vs cold, and the score's order.

Facts come from the real extractor and rules from the real YAML; the call graph is a small fake that
answers ``hot_path`` from a table (and records what it was asked), except in the one test that builds
the real graph over a tiny package.
"""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from castfind.analysis.callgraph import CallGraph
from castfind.analysis.checker import Checker, Explanation, cast_dtype, is_once, once_reason, tally_stops
from castfind.analysis.provenance import Provenance, Stop
from castfind.analysis.resolve import Resolver
from castfind.core.rules import RuleSet, load_rules
from castfind.core.types import Finding
from castfind.read.extract import extract_source
from castfind.read.facts import Cast, FileFacts
from castfind.store.discover import discover
from castfind.store.index import Index
from tests.support import OVERLAPPING_KV_RULE, why_on_line

RULES = load_rules()


class FakeGraph:
    """``hot_nodes`` from a table of function qualnames; everything else is cold; no call is under an if."""

    def __init__(self, hot: dict[str, tuple[str, ...]] | None = None) -> None:
        self.hot = hot or {}
        self.asked: list[tuple[str, str]] = []

    def hot_nodes(self, node: tuple[str, str]) -> tuple[tuple[str, str], ...] | None:
        self.asked.append(node)
        path = self.hot.get(node[1])
        return None if path is None else tuple((name, "") for name in path)  # label() gives the name back

    def judged(self, node: tuple[str, str]) -> tuple[tuple[tuple[str, str], ...] | None, None]:
        return self.hot_nodes(node), None  # no edge of the table is a guess (tests/test_guess.py has those)

    def edge_guards(self, caller: tuple[str, str], node: tuple[str, str]) -> tuple[str, tuple[()]]:
        return "", ()


def facts_of(src: str) -> FileFacts:
    facts = extract_source(textwrap.dedent(src).encode(), "m", "m.py", False)
    assert facts.error is None, facts.error
    return facts


def cast_of(src: str) -> Cast:
    (cast,) = facts_of(src).casts
    return cast


def check(src: str, hot: dict[str, tuple[str, ...]] | None = None, rules: RuleSet = RULES,
          explain: bool = False) -> tuple[list[Finding], Checker, FakeGraph]:
    graph = FakeGraph(hot)
    checker = Checker(rules, Provenance(rules), graph)  # type: ignore[arg-type]  # duck-typed graph
    return checker.check(facts_of(src), "root", explain=explain), checker, graph


def method(body: str, name: str = "step", cls: str = "Backend") -> str:
    """A class ``cls`` with one method ``name(self, x, t, layer_id)`` whose body is ``body``."""
    lines = "".join(f"        {line}\n" for line in body.splitlines())
    return f"class {cls}:\n    def {name}(self, x, t, layer_id):\n{lines}"


HOT = {"Backend.step": ("m.Backend.forward", "m.Backend.step")}


# -- cast_dtype ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "dtype"), [
    ("x.to(device)", None),  # a device move, not a cast
    ("x.to('cuda')", None),
    ("x.to(other_tensor)", None),
    ("x.to(torch.float16)", "torch.float16"),  # the dtype as an argument
    ("x.to(device, torch.bfloat16)", "torch.bfloat16"),
    ("x.to(q.dtype)", "q.dtype"),
    ("x.to(self.dtype, non_blocking=True)", "self.dtype"),
    ("x.to(device=d, dtype=torch.float8_e4m3fn)", "torch.float8_e4m3fn"),  # the dtype keyword
    ("x.to(device, dtype=compute)", "compute"),  # a keyword names a dtype whatever its text
    ("x.type(torch.half)", "torch.half"),
    ("x.float()", "float32"),  # a fixed dtype from the casts table
    ("x.half()", "float16"),
    ("x.bfloat16()", "bfloat16"),
    ("buf.copy_(x)", "the destination dtype"),
    ("x.int()", "int32"),  # its dtype comes from castfind.core.casts, though no default rule names .int()
])
def test_cast_dtype(call: str, dtype: str | None) -> None:
    assert cast_dtype(RULES, cast_of(f"y = {call}\n")) == dtype


def test_a_device_move_of_a_whole_buffer_on_a_hot_path_is_not_a_finding() -> None:
    src = method("y = self.k_buffer.to(x.device)\nz = self.k_buffer.to(x.dtype)")
    findings, checker, _ = check(src, HOT, explain=True)
    assert [(f.line, f.rule) for f in findings] == [(4, "CF101")]
    assert any("does not name a dtype" in w for w in why_on_line(checker.explanations, "m.py", 3))


# -- is_once --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("function", ["__init__", "process_weights_after_loading", "load_weights", "init_cache",
                                      "warmup", "capture_graph", "build_model"])
def test_a_once_function_runs_once(function: str) -> None:
    c = cast_of(method("y = self.k_buffer.to(t)", name=function))
    assert is_once(RULES, c, "self.k_buffer")


def test_a_helper_nested_in_a_once_function_runs_once_too() -> None:
    c = cast_of("def load_weights(model):\n    def one(w):\n        return model.k_buffer.to(t)\n    one(1)\n")
    assert c.scope == "load_weights.<locals>.one" and is_once(RULES, c, "model.k_buffer")


def test_a_step_function_does_not_run_once() -> None:
    c = cast_of(method("y = self.k_buffer.to(t)", name="forward"))
    assert not is_once(RULES, c, "self.k_buffer")


# (b) memoised: the result is stored to a location and a test of that same location guards the cast.
@pytest.mark.parametrize("body", [
    "if self._w is None:\n    self._w = self.proj.weight.to(t)",
    "if not hasattr(self, '_w'):\n    self._w = self.proj.weight.to(t)",
    "if not hasattr(self, '_w'):\n    setattr(self, '_w', self.proj.weight.to(t))",
    "if key not in self._cache:\n    self._cache[key] = self.proj.weight.to(t)",
    "if self._cache.get(key) is None:\n    w = self.proj.weight.to(t)\n    self._cache[key] = w",
    "if self._w is None or x.dtype != self._w.dtype:\n    self._w = self.proj.weight.to(t)",  # a memo that recasts when stale
    "cached = getattr(self, '_w', None)\nif cached is not None:\n    return cached\nw = self.proj.weight.to(t)\nself._w = w\nreturn w",
    "if self._w is not None:\n    return self._w\nself._w = self.proj.weight.to(t)",
    # a cache object reached through a local, the result stored after more arithmetic (sglang attn_residual)
    "cache = getattr(self, '_c', None)\nif cache is None:\n    cache = {}\n    self._c = cache\ncw = cache.get(d)\n"
    "if cw is None:\n    cw = (self.proj.weight.to(t) * 2).contiguous()\n    cw = cache[d] = cw.t()\nreturn cw",
], ids=["is-None", "hasattr", "setattr", "not-in-cache", "cache-get-through-a-local", "or-stale", "early-return-getattr",
        "early-return", "derived-through-locals"])
def test_a_memo_guard_of_the_stored_location_makes_it_once(body: str) -> None:
    c = cast_of(method(body))
    assert is_once(RULES, c, "self.proj.weight"), (c.stores, c.guards)


def test_a_global_memo_is_once_and_a_local_one_is_not() -> None:
    glob = cast_of("_W = None\ndef f(m):\n    global _W\n    if _W is None:\n        _W = m.proj.weight.half()\n    return _W\n")
    assert is_once(RULES, glob, "m.proj.weight")
    local = cast_of(method("w = None\nif w is None:\n    w = self.proj.weight.to(t)"))
    assert not is_once(RULES, local, "self.proj.weight")  # a local is None on every call


@pytest.mark.parametrize("body", [
    "if x.dtype != t:\n    self._w = self.proj.weight.to(t)",  # dtype dispatch, not a memo
    "if self.proj.weight.dtype == torch.float8_e4m3fn:\n    self._w = self.proj.weight.to(t)",
    "if x.element_size() >= 2:\n    self._w = self.proj.weight.to(t)",
    "if not self._ready:\n    self._w = self.proj.weight.to(t)",  # a flag, not the stored location
    "if self._v is None:\n    self._w = self.proj.weight.to(t)",  # another location
    "if self._w is None:\n    y = self.proj.weight.to(t)",  # the result is not stored
    "if key not in self._cache:\n    self._other[key] = self.proj.weight.to(t)",
    "if self._w is not None:\n    self._w = self.proj.weight.to(t)",  # the test says it is set
    "if self._w is not None:\n    log(1)\nself._w = self.proj.weight.to(t)",  # no early return
    "cache = {}\nif key not in cache:\n    cache[key] = self.proj.weight.to(t)",  # a dict made on every call
], ids=["dtype-ne", "dtype-eq", "element-size", "flag", "other-location", "not-stored", "other-cache", "is-not-None",
        "no-return", "local-dict"])
def test_a_test_of_anything_else_does_not_make_it_once(body: str) -> None:
    c = cast_of(method(body))
    assert not is_once(RULES, c, "self.proj.weight"), (c.stores, c.guards)


# (c) memoised by a decorator on the cast's own function.
def test_a_cache_decorated_function_runs_once_an_inner_function_does_not() -> None:
    facts = facts_of("import functools\nclass A:\n    @functools.lru_cache(maxsize=None)\n    def w(self, t):\n"
                     "        return self.proj.weight.to(t.dtype)\n    @cached_property\n    def wb(self):\n"
                     "        return self.proj.weight.bfloat16()\n    @functools.cache\n    def make(self):\n"
                     "        def inner(t):\n            return self.proj.weight.to(t.dtype)\n        return inner\n")
    checker = Checker(RULES, Provenance(RULES), FakeGraph({s: ("A.forward",) for s in
                                                           ("A.w", "A.wb", "A.make.<locals>.inner")}))  # type: ignore[arg-type]
    got = {f.function: f.rule for f in checker.check(facts, "root")}
    assert got == {"A.w": "CF103", "A.wb": "CF103", "A.make.<locals>.inner": "CF102"}


def test_an_unrelated_guard_does_not() -> None:
    c = cast_of(method("if layer_id > 0:\n    y = self.proj.weight.to(t)"))
    assert not is_once(RULES, c, "self.proj.weight")


def test_the_else_branch_of_a_memo_guard_runs_on_every_call() -> None:
    c = cast_of(method("if self._w is None:\n    self._w = 1\nelse:\n    y = self.k_buffer.to(t)"))
    assert not is_once(RULES, c, "self.k_buffer")
    c = cast_of(method("if self._w is None:\n    self._w = 1\nelse:\n    self._w = self.k_buffer.to(t)"))
    assert not is_once(RULES, c, "self.k_buffer")


def test_storing_the_cast_back_to_its_own_buffer_makes_it_once() -> None:
    assert is_once(RULES, cast_of(method("self.w_kc = self.w_kc.to(t)")), "self.w_kc")
    assert is_once(RULES, cast_of(method("self.k_buffer = self.k_buffer[layer_id].to(t)")), "self.k_buffer[layer_id]")
    assert not is_once(RULES, cast_of(method("self.w_vc = self.w_kc.to(t)")), "self.w_kc")  # another attribute
    assert not is_once(RULES, cast_of(method("w = self.w_kc.to(t)")), "self.w_kc")  # a local
    off = replace(RULES, once_store_to_self=False)
    assert not is_once(off, cast_of(method("self.w_kc = self.w_kc.to(t)")), "self.w_kc")


# -- rules: which one reports, hot vs cold ---------------------------------------------------------------------


def test_hot_kv_cache_cast_is_cf101_with_its_hot_path_and_message() -> None:
    findings, _, graph = check(method("y = self.k_buffer[layer_id].to(x.dtype)"), HOT)
    (f,) = findings
    assert (f.rule, f.severity, f.line, f.function) == ("CF101", "error", 3, "Backend.step")
    assert f.hot_path == HOT["Backend.step"] and f.module == "m" and f.root == "root"
    assert f.provenance == ("[layer_id] keeps it whole", ".k_buffer is a kv-cache buffer")
    assert "kv-cache" in f.message and "x.dtype" in f.message and "Backend.step" in f.message
    assert graph.asked == [("m", "Backend.step")]


def test_the_same_cast_cold_is_cf104_and_once_is_cf103_without_asking_the_graph() -> None:
    findings, _, graph = check(method("y = self.k_buffer.to(x.dtype)"))
    assert [(f.rule, f.hot_path) for f in findings] == [("CF104", ())] and graph.asked == [("m", "Backend.step")]
    findings, _, graph = check(method("y = self.k_buffer.to(x.dtype)", name="__init__"), HOT)
    assert [f.rule for f in findings] == ["CF103"] and graph.asked == []


def test_a_weight_on_a_hot_path_is_cf102_and_a_norm_weight_is_excluded() -> None:
    hot = {"Backend.step": HOT["Backend.step"], "RMSNorm.step": ("m.RMSNorm.forward", "m.RMSNorm.step")}
    findings, _, _ = check(method("a = self.proj.weight.to(x.dtype)\nb = self.input_layernorm.weight.to(x.dtype)")
                           + method("c = self.weight.to(x.dtype)", cls="RMSNorm"), hot)
    assert [(f.rule, f.line) for f in findings] == [("CF102", 3)]


def test_exclusions_never_look_at_the_function_name() -> None:
    """`forward_normal` is no norm: its weight cast is CF102; a norm's weight (by name, by class) stays quiet."""
    hot = {"Layer.forward_normal": ("m.Layer.forward", "m.Layer.forward_normal")}
    src = ("class Layer:\n    def __init__(self, h):\n        self.gamma = RMSNorm(h)\n"
           "    def forward_normal(self, x):\n        a = self.proj.weight.to(x.dtype)\n"
           "        b = self.post_norm.weight.to(x.dtype)\n        c = self.gamma.weight.to(x.dtype)\n")
    findings, _, _ = check(src, hot)
    assert [(f.rule, f.line) for f in findings] == [("CF102", 5)]


def test_a_cast_at_module_level_is_cold_without_asking_the_graph() -> None:
    findings, checker, graph = check("import torch\ny = pool.k_buffer.to(torch.float16)\n")
    assert [f.rule for f in findings] == ["CF104"] and graph.asked == []
    assert not checker.needs_hot(facts_of("y = pool.k_buffer.to(torch.float16)\n"),
                                 cast_of("y = pool.k_buffer.to(torch.float16)\n"))


@pytest.mark.parametrize(("body", "name", "needs"), [
    ("y = self.k_buffer.to(x.dtype)", "step", True),
    ("y = self.k_buffer.to(x.dtype)", "__init__", False),  # once: only CF103 applies, it has no hot
    ("y = self.k_buffer.to(x.device)", "step", False),  # not a dtype cast
    ("y = x.to(t)", "step", False),  # a parameter: not a whole buffer
    ("y = self.k_buffer.int()", "step", False),  # no rule casts with .int()
])
def test_needs_hot_only_when_a_rule_would_ask(body: str, name: str, needs: bool) -> None:
    src = method(body, name=name)
    _, checker, _ = check("x = 1\n")
    assert checker.needs_hot(facts_of(src), cast_of(src)) is needs


def test_non_whole_operands_are_quiet_and_explained() -> None:
    src = method("y = self.k_buffer[x].to(torch.float16)\nz = x.float()")
    findings, checker, graph = check(src, HOT, explain=True)
    assert findings == [] and graph.asked == []
    for line in (3, 4):
        assert any("not a whole buffer" in w for w in why_on_line(checker.explanations, "m.py", line))




def _with_user_rule(tmp_path: Path) -> RuleSet:
    path = tmp_path / "user.yaml"
    path.write_text(OVERLAPPING_KV_RULE)
    return load_rules([path])


def test_the_first_matching_rule_in_file_order_wins(tmp_path: Path) -> None:
    rules = _with_user_rule(tmp_path)
    assert [r.id for r in rules.rules][-1] == "CF201"  # the user's file comes after the defaults
    src = method("y = self.k_buffer.to(x.dtype)")
    findings, checker, _ = check(src, HOT, rules=rules, explain=True)
    assert [f.rule for f in findings] == ["CF101"]
    why = why_on_line(checker.explanations, "m.py", 3)
    assert any("CF101" in w and "shadows CF201" in w for w in why), why
    # The same rules with the user's first: now it takes the line.
    user_first = replace(rules, rules=(rules.rules[-1], *rules.rules[:-1]))
    findings, _, _ = check(src, HOT, rules=user_first)
    assert [(f.rule, f.severity) for f in findings] == [("CF201", "warning")]


def test_a_rule_whose_hot_condition_fails_lets_a_later_rule_match(tmp_path: Path) -> None:
    rules = _with_user_rule(tmp_path)
    user_first = replace(rules, rules=(rules.rules[-1], *rules.rules[:-1]))
    findings, _, graph = check(method("y = self.k_buffer.to(x.dtype)"), rules=user_first)  # cold
    assert [f.rule for f in findings] == ["CF104"]
    assert graph.asked == [("m", "Backend.step")]  # asked once for both rules


def test_the_real_call_graph_tells_hot_from_cold(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "srv").mkdir(parents=True)
    (root / "srv" / "__init__.py").write_text("")
    (root / "srv" / "attn.py").write_text(textwrap.dedent("""\
        class Attn:
            def _read(self, layer_id):
                return self.k_buffer[layer_id].to(torch.float32)

            def _dump(self, layer_id):
                return self.v_buffer[layer_id].to(torch.float32)

            def forward_decode(self, q, layer_id):
                return q @ self._read(layer_id)
        """))
    index = Index(discover([str(root)]), jobs=1)
    graph = CallGraph(index, Resolver(index), RULES)
    (facts,) = [f for f in index.load_files(index.files) if f.path.endswith("attn.py")]
    findings = Checker(RULES, Provenance(RULES), graph).check(facts, str(root))
    assert [(f.rule, f.line, f.hot_path) for f in findings] == [
        ("CF101", 3, ("srv.attn.Attn.forward_decode", "srv.attn.Attn._read")),
        ("CF104", 6, ()),
    ]


# -- score: relations, not constants -----------------------------------------------------------------------------


def _score(body: str, hot: dict[str, tuple[str, ...]] | None = None) -> float:
    (f,) = check(method(body), HOT if hot is None else hot)[0]
    return f.score


def test_a_kv_cache_or_state_pool_scores_above_a_weight() -> None:
    kv = _score("y = self.k_buffer.to(x.dtype)")
    state = _score("y = self.ssm_states.to(x.dtype)")
    weight = _score("y = self.proj.weight.to(x.dtype)")
    assert kv > weight and state > weight
    assert weight > 0


def test_loop_depth_adds_to_the_score() -> None:
    flat = _score("y = self.k_buffer.to(x.dtype)")
    one = _score("for i in x:\n    y = self.k_buffer.to(x.dtype)")
    two = _score("for i in x:\n    for j in x:\n        y = self.k_buffer.to(x.dtype)")
    assert flat < one < two


def test_a_decode_hot_path_scores_above_another_hot_path() -> None:
    decode = _score("y = self.k_buffer.to(x.dtype)", {"Backend.step": ("m.Backend.forward_decode", "m.Backend.step")})
    forward = _score("y = self.k_buffer.to(x.dtype)", {"Backend.step": ("m.Backend.forward", "m.Backend.step")})
    assert decode > forward


# -- explanations: one record per cast, with where the proof stopped ---------------------------------------------


def explained(src: str, hot: dict[str, tuple[str, ...]] | None = None) -> dict[tuple[str, int, int], Explanation]:
    _, checker, _ = check(src, hot, explain=True)
    return checker.explanations


def test_two_casts_on_one_line_get_one_explanation_each_keyed_by_column() -> None:
    got = explained(method("y, z = self.k_buffer.to(x.dtype), x.float()"), HOT)
    assert sorted(got) == [("m.py", 3, 16), ("m.py", 3, 43)]
    flagged, quiet = got[("m.py", 3, 16)], got[("m.py", 3, 43)]
    assert (flagged.rule, flagged.buffer, flagged.stop, flagged.hot) == ("CF101", "kv-cache", None, HOT["Backend.step"])
    assert quiet.rule is None and quiet.stop == Stop("parameter", "x is a parameter of Backend.step")
    assert any("provenance stopped at parameter: x is a parameter of Backend.step" in w for w in quiet.why)


def test_an_excluded_buffer_stops_at_excluded_naming_the_pattern_and_token() -> None:
    (e,) = explained(method("y = self.q_norm.weight.to(x.dtype)"), HOT).values()
    assert e.stop is not None and e.stop.reason == "excluded"
    assert "'*norm' matches 'norm' of q_norm" in e.stop.detail and e.stop.hops == (".weight is a weight buffer",)
    (e,) = explained("class RMSNorm:\n    def step(self, x):\n        return self.weight.to(x.dtype)\n").values()
    assert e.stop is not None and e.stop.reason == "excluded" and "class RMSNorm" in e.stop.detail


def test_not_proven_hot_is_a_cold_stop_naming_the_function() -> None:
    (e,) = explained(method("y = self.k_buffer.to(x.dtype)")).values()
    assert e.stop is None and e.hot is None and e.rule == "CF104"
    assert e.cold == Stop("cold", "no entry point reaches m.Backend.step")
    (e,) = explained(method("y = self.k_buffer.to(x.dtype)", name="__init__"), HOT).values()
    assert e.cold is None and e.hot is None  # once: no rule asked whether it is hot


@pytest.mark.parametrize(("src", "reason"), [
    (method("y = self.k_buffer.to(t.dtype)", name="load_weights"), "function load_weights is an initialisation"),
    ("import functools\nclass A:\n    @functools.cache\n    def w(self, t):\n        return self.proj.weight.to(t.dtype)\n",
     "memoised by @functools.cache"),
    (method("if self._w is None:\n    self._w = self.proj.weight.to(t.dtype)"),
     "stored to self._w and the guard `if self._w is None`"),
    (method("if self._w is not None:\n    return self._w\nself._w = self.proj.weight.to(t.dtype)"),
     "stored to self._w and an early return or else branch of `if self._w is not None`"),
    (method("self.w_kc = self.w_kc.to(t.dtype)"), "stored back over its own operand self.w_kc"),
], ids=["function", "decorator", "guard", "early-return", "store-to-self"])
def test_the_once_reason_names_the_function_decorator_guard_or_store(src: str, reason: str) -> None:
    (e,) = explained(src).values()
    assert e.once is not None and reason in e.once, e.once
    assert e.rule == "CF103" and any(reason in w for w in e.why)
    if "functools" not in src:  # the decorator is the checker's to find; the rest is the cast's own
        assert once_reason(RULES, cast_of(src), e.operand) == e.once


def test_buffer_like_operands_by_token_or_by_a_hop() -> None:
    got = {e.expr: e.buffer_like for e in explained(method(
        "a = x.float()\nb = self.kv_thing.float()\nc = foo(x)\nd = c.float()\ne = self.pool.rows(x).float()")).values()}
    assert got == {"x.float()": False, "self.kv_thing.float()": True, "c.float()": True,  # one hop: c = foo(x)
                   "self.pool.rows(x).float()": True}


def test_tally_counts_buffer_like_stops_per_reason_with_top_files() -> None:
    src = method("a = self.k_buffer[x].float()\nb = self.v_buffer[x].float()\nc = self.k_buffer[:t].float()\n"
                 "d = x.float()\ne = self.k_buffer.float()\nf = self.k_buffer.to(x.device)")
    table = tally_stops(explained(src))
    assert (table.examined, table.buffer_like, table.whole) == (5, 4, 1)  # .to(device) is no dtype cast
    assert [(r.reason, r.count, r.files) for r in table.rows] == [
        ("gather-index", 2, (("m.py", 2),)), ("batch-slice", 1, (("m.py", 1),)), ("cold", 1, (("m.py", 1),))]
    assert table.to_dict()["stops"][0] == {"reason": "gather-index", "count": 2,
                                           "files": [{"path": "m.py", "count": 2}]}


# -- a dtype test is dispatch: the finding names the condition ---------------------------------------------


def test_a_cast_under_a_dtype_test_runs_every_call_and_names_the_condition() -> None:
    body = ("if layer_id > 0:\n"
            "    if self.kv_cache_dtype == torch.float8_e4m3fn:\n"
            "        y = self.pool.get_key_buffer(layer_id).to(x.dtype)\n")
    (f,) = check(method(body), HOT)[0]
    assert f.rule == "CF101"
    assert f.message.endswith("(only when self.kv_cache_dtype == torch.float8_e4m3fn)"), f.message
    body = "if w.dtype != torch.bfloat16:\n    return x\ny = self.pool.get_key_buffer(layer_id).to(x.dtype)\n"
    (f,) = check(method(body), HOT)[0]
    assert f.message.endswith("(only when not (w.dtype != torch.bfloat16))"), f.message
    # A test of anything else names no condition.
    (f,) = check(method("if layer_id > 0:\n    y = self.pool.get_key_buffer(layer_id).to(x.dtype)\n"), HOT)[0]
    assert "(only when" not in f.message
