"""Provenance: is a cast's operand a whole buffer? Facts from the real extractor, tables from the default rules."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from castfind.analysis.provenance import Origin, Provenance, Stop
from castfind.core.rules import load_rules
from castfind.read.extract import extract_source
from castfind.read.facts import Subscript

RULES = load_rules()
PARAMS = "self, layer, layer_id, start_layer, kv_indices, bs, offset, k_buffer, t"


def origins(body: str, getter_kind: Callable[[str], str | None] | None = None) -> dict[str, Origin | None]:
    """The origin of every cast's receiver in ``body`` (the lines of a method ``A.f``), by the cast's text."""
    src = f"class A:\n    def f({PARAMS}):\n" + "".join(f"        {line}\n" for line in body.splitlines())
    facts = extract_source(src.encode(), "m", "m.py", False)
    assert facts.error is None, facts.error
    prov = Provenance(RULES, getter_kind)
    out = {c.text: prov.origin(facts, c.scope, c.receiver, c.line) for c in facts.casts}
    assert len(out) == len(facts.casts), "each cast text once per body"
    return out


def origin(line: str, getter_kind: Callable[[str], str | None] | None = None) -> Origin | None:
    (only,) = [o for text, o in origins(line, getter_kind).items() if line.endswith(text)]
    return only


def kind(line: str, getter_kind: Callable[[str], str | None] | None = None) -> str | None:
    o = origin(line, getter_kind)
    return o.kind if o is not None else None


# -- where a whole buffer comes from ---------------------------------------------------------------------


@pytest.mark.parametrize(("line", "expected"), [
    ("self.k_buffer.float()", "kv-cache"),
    ("self.pool.kv_cache.half()", "kv-cache"),
    ("self.ssm_states.double()", "state-pool"),
    ("self.proj.weight.to(t)", "weight"),  # "*weight"
    ("self.w13_weight.to(t)", "weight"),
    ("self.weight_packed.to(t)", "weight"),  # "weight_*"
    ("self.mystery.to(t)", None),
    ("self.kv_buffer.sum().to(t)", None),  # a reduction is not a view
])
def test_buffer_attributes(line: str, expected: str | None) -> None:
    assert kind(line) == expected


def test_attribute_origin_names_the_receiver_and_one_hop() -> None:
    assert origin("self.pool.k_buffer.float()") == Origin(
        "kv-cache", "self.pool.k_buffer", (".k_buffer is a kv-cache buffer",), ("self", "pool", "k_buffer"))


def test_getter_named_by_the_rules() -> None:
    assert origin("self.pool.get_key_buffer(layer.layer_id).to(t)") == Origin(
        "kv-cache", "self.pool.get_key_buffer(layer.layer_id)", ("get_key_buffer() returns the whole kv-cache",),
        ("self", "pool", "get_key_buffer"))
    assert kind("self.pool.get_conv_state(layer_id).float()") == "state-pool"
    assert kind("self.pool.get_something(layer_id).float()") is None


def test_inferred_getter_is_asked_of_the_oracle_by_function_name() -> None:
    asked: list[str] = []

    def oracle(name: str) -> str | None:
        asked.append(name)
        return {"my_buf": "kv-cache", "load_state": "state-pool"}.get(name)

    assert origin("self.pool.my_buf(layer_id).to(t)", oracle) == Origin(
        "kv-cache", "self.pool.my_buf(layer_id)", ("my_buf() returns the whole kv-cache",), ("self", "pool", "my_buf"))
    assert kind("load_state(layer_id).to(t)", oracle) == "state-pool"  # a bare function
    assert kind("self.other(layer_id).to(t)", oracle) is None
    assert {"my_buf", "load_state", "other"} <= set(asked)
    assert kind("self.pool.my_buf(layer_id).to(t)") is None  # no oracle: nothing inferred


def test_a_getter_the_rules_name_does_not_ask_the_oracle() -> None:
    asked: list[str] = []

    def oracle(name: str) -> str | None:
        asked.append(name)
        return "weight"

    assert kind("self.pool.get_key_buffer(layer_id).to(t)", oracle) == "kv-cache"
    assert "get_key_buffer" not in asked


# -- indexing and views ------------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [
    "layer_id", "layer.layer_id", "0", "-1", "0, :, -1", ":, :bs", "...", "layer_id - start_layer", "i",
])
def test_a_scalar_layer_index_or_later_axis_slice_keeps_it_whole(index: str) -> None:
    o = origin(f"self.k_buffer[{index}].to(t)")
    assert o is not None and o.kind == "kv-cache" and o.path == "self.k_buffer"
    assert o.hops[0] == f"[{index}] keeps it whole"


@pytest.mark.parametrize("index", [
    "kv_indices",  # a gather by an index tensor
    ":bs",  # the batch's rows
    "1:",  # a range of rows on the first axis
    "layer_id + offset",  # offset is not a scalar-index name
    "mask > 0",  # a comparison: a boolean mask
    "'k'",
])
def test_a_gather_or_batch_slice_is_not_whole(index: str) -> None:
    assert origin(f"self.k_buffer[{index}].to(t)") is None


def test_a_new_axis_index_keeps_it_whole() -> None:
    assert kind("self.k_buffer[None].to(t)") == "kv-cache"


def test_views_keep_it_whole_and_each_is_a_hop() -> None:
    o = origin("self.k_buffer.view(-1, 8).permute(1, 0).contiguous().to(t)")
    assert o == Origin("kv-cache", "self.k_buffer", (".contiguous() is a view", ".permute() is a view",
                                                     ".view() is a view", ".k_buffer is a kv-cache buffer"),
                 ("self", "k_buffer"), ("A",))
    assert kind("self.k_buffer.clone().to(t)") is None  # not a view method
    assert kind("self.k_buffer.view(-1)[kv_indices].to(t)") is None  # a view, then a gather


# -- names in the function ------------------------------------------------------------------------------------


def test_a_parameter_is_not_a_whole_buffer_even_named_like_one() -> None:
    assert origin("k_buffer.to(t)") is None


def test_a_local_name_is_followed_to_its_latest_assignment_before_the_cast() -> None:
    got = origins(
        "k = self.k_buffer\n"
        "k.float()\n"  # whole
        "k = k[kv_indices]\n"
        "k.half()\n"  # gathered: not whole
        "k = self.v_buffer\n"
        "k.double()\n"  # whole again
        "k = k.to(t)\n"  # the cast's own line is skipped: k here is still self.v_buffer
        "k.bfloat16()\n"  # k is now the result of a call no rule knows
    )
    assert {text: o.path if o else None for text, o in got.items()} == {
        "k.float()": "self.k_buffer", "k.half()": None, "k.double()": "self.v_buffer",
        "k.to(t)": "self.v_buffer", "k.bfloat16()": None,
    }
    assert got["k.float()"] is not None and got["k.float()"].hops[0] == "k = self.k_buffer (line 3)"


def test_an_assignment_after_the_cast_or_in_another_function_does_not_count() -> None:
    src = ("class A:\n"
           "    def g(self):\n"
           "        k = self.k_buffer\n"
           "    def f(self):\n"
           "        k.float()\n"
           "        k = self.k_buffer\n")
    facts = extract_source(src.encode(), "m", "m.py", False)
    (c,) = facts.casts
    assert Provenance(RULES).origin(facts, c.scope, c.receiver, c.line) is None


def test_tuple_display_unpacking_is_followed_per_element() -> None:
    got = origins("k, v = self.k_buffer, rows\nk.float()\nv.half()\n")
    assert got["k.float()"] is not None and got["k.float()"].path == "self.k_buffer"
    assert got["v.half()"] is None


def test_hops_tell_the_whole_walk_in_order() -> None:
    got = origins(
        "kb = self.pool.get_key_buffer(layer.layer_id)\n"
        "kv = kb.view(-1, 8)[layer_id]\n"
        "kv.float()\n"
    )
    assert got["kv.float()"] == Origin("kv-cache", "self.pool.get_key_buffer(layer.layer_id)", (
        "kv = kb.view(-1, 8)[layer_id] (line 4)",
        "[layer_id] keeps it whole",
        ".view() is a view",
        "kb = self.pool.get_key_buffer(layer.layer_id) (line 3)",
        "get_key_buffer() returns the whole kv-cache",
    ), ("self", "pool", "get_key_buffer"))


def test_whole_index_on_several_axes() -> None:
    prov = Provenance(RULES)
    src = b"x = a[layer_id, :, 1:3].float()\ny = b[idx, kv_indices].float()\nz = c[2:, 0].float()\n"
    receivers = [c.receiver for c in extract_source(src, "m", "m.py", False).casts]
    assert all(isinstance(r, Subscript) for r in receivers)
    assert [prov.whole_index(r.index) for r in receivers if isinstance(r, Subscript)] == [True, False, False]


# -- attribute views, pieces along an axis, unpacking ----------------------------------------------------------


@pytest.mark.parametrize("attr", ["T", "mT", "H", "mH"])
def test_transpose_properties_are_views(attr: str) -> None:
    o = origin(f"self.k_buffer[layer_id].{attr}.to(t)")
    assert o is not None and o.path == "self.k_buffer" and o.hops[0] == f".{attr} is a view"
    assert kind(f"self.k_buffer[kv_indices].{attr}.to(t)") is None


@pytest.mark.parametrize(("call", "whole"), [
    ("split([512, 64], dim=-1)", True), ("split(64, 2)", True), ("chunk(2, dim=1)", True), ("unbind(1)", True),
    ("unbind(dim=-2)", True), ("tensor_split(3, dim=2)", True),
    ("split(64)", False),  # no axis: axis 0, the token axis
    ("split(64, dim=0)", False), ("chunk(2)", False), ("unbind()", False), ("unbind(0)", False),
    ("chunk(2, dim=layer_id)", False),  # an axis held in a name: unknown
])
def test_a_split_keeps_each_piece_whole_only_along_a_non_token_axis(call: str, whole: bool) -> None:
    got = origins(f"x = self.kv_buffer[layer_id].{call}[1]\nx.to(t)\n")
    assert (got["x.to(t)"] is not None) is whole


def test_torch_functions_of_a_view_read_their_first_argument() -> None:
    assert kind("torch.split(self.kv_buffer[layer_id], 64, dim=-1)[0].to(t)") == "kv-cache"
    assert kind("torch.chunk(self.kv_buffer[layer_id], 2)[0].to(t)") is None  # the token axis
    assert kind("torch.transpose(self.k_buffer[layer_id], 0, 1).to(t)") == "kv-cache"


def test_unpacking_a_getters_tuple_keeps_both_names_whole() -> None:
    got = origins("k, v = self.pool.get_kv_buffer(layer.layer_id)\nk.to(t)\nv.float()\n")
    assert got["k.to(t)"] is not None and got["v.float()"] is not None
    assert got["v.float()"].hops == (
        "v = element 1 of self.pool.get_kv_buffer(layer.layer_id) (line 3)",
        "element 1 of get_kv_buffer() is a whole kv-cache: a getter returns whole buffers or a tuple of them",
    )


def test_unpacking_through_a_name_and_a_tuple_display() -> None:
    got = origins("pair = self.pool.get_kv_buffer(layer_id)\nk, v = pair\nv.float()\n"
                  "t2 = (self.k_buffer, kv_indices)\na, b = t2\na.half()\nb.double()\n")
    assert got["v.float()"] is not None and got["v.float()"].kind == "kv-cache"
    assert got["a.half()"] is not None and got["a.half()"].path == "self.k_buffer"
    assert got["b.double()"] is None  # a parameter


def test_unpacking_split_pieces_follows_the_axis_rule() -> None:
    got = origins("nope, rope = self.kv_buffer[layer_id].split([512, 64], dim=-1)\nrope.to(t)\n"
                  "first, rest = self.kv_buffer[layer_id].split(256)\nfirst.half()\n"
                  "qq, kk = self.qkv_proj(t).split([512, 64], dim=-1)\nkk.float()\n")
    assert got["rope.to(t)"] is not None and got["rope.to(t)"].path == "self.kv_buffer"
    assert got["first.half()"] is None and got["kk.float()"] is None


def test_unpacking_a_tensor_takes_a_constant_index_of_its_first_axis() -> None:
    got = origins("k, v = self.kv_buffer[layer_id]\nv.float()\nk2, v2 = self.k_buffer[kv_indices]\nv2.half()\n")
    o = got["v.float()"]
    assert o is not None and o.hops[1] == "unpacking self.kv_buffer[layer_id] takes self.kv_buffer[layer_id][1]"
    assert got["v2.half()"] is None


def test_a_tuple_of_whole_buffers_of_one_kind_is_whole_for_getter_inference() -> None:
    src = ("class P:\n    def pair(self, i):\n        return self.k_buffer[i], self.v_buffer[i]\n"
           "    def mixed(self, i):\n        return self.k_buffer[i], self.conv_states[i]\n"
           "    def part(self, i, rows):\n        return self.k_buffer[i], rows\n")
    facts = extract_source(src.encode(), "m", "m.py", False)
    prov = Provenance(RULES)
    kinds = {r.scope: (o.kind if (o := prov.origin(facts, r.scope, r.value, r.line)) else None) for r in facts.returns}
    assert kinds == {"P.pair": "kv-cache", "P.mixed": None, "P.part": None}


def test_names_and_holder_class_of_the_buffer() -> None:
    src = ("class Norm:\n    def __init__(self):\n        self.w = 1\n"
           "class Layer:\n    def __init__(self, h, extra):\n        self.ln = RMSNorm(h)\n        self.mix = extra\n"
           "        self.proj = nn.Linear(h, h)\n"
           "    def forward_normal(self, x):\n        a = self.ln.weight.to(x)\n        b = self.mix.weight.to(x)\n"
           "        c = self.weight.to(x)\n        d = self.proj.weight.to(x)\n")
    facts = extract_source(src.encode(), "m", "m.py", False)
    prov = Provenance(RULES)
    got = {c.text: prov.origin(facts, c.scope, c.receiver, c.line) for c in facts.casts}
    assert {t: (o.names, o.classes) for t, o in got.items() if o is not None} == {
        "self.ln.weight.to(x)": (("self", "ln", "weight"), ("RMSNorm",)),
        "self.mix.weight.to(x)": (("self", "mix", "weight"), ()),  # built from a parameter: unknown
        "self.weight.to(x)": (("self", "weight"), ("Layer",)),
        "self.proj.weight.to(x)": (("self", "proj", "weight"), ("Linear",)),
    }


# -- where the proof stops: one small source per stop reason ----------------------------------------------


def stop_of(body: str, cast_text: str, params: str = PARAMS) -> Stop:
    """The stop of the cast ``cast_text`` in the method ``A.f(params)`` whose body is ``body``."""
    src = f"class A:\n    def f({params}):\n" + "".join(f"        {line}\n" for line in body.splitlines())
    facts = extract_source(src.encode(), "m", "m.py", False)
    assert facts.error is None, facts.error
    (cast,) = [c for c in facts.casts if c.text == cast_text]
    prov = Provenance(RULES)
    got = prov.origin_or_stop(facts, cast.scope, cast.receiver, cast.line)
    assert isinstance(got, Stop), got
    assert prov.origin(facts, cast.scope, cast.receiver, cast.line) is None  # origin() is the thin wrapper
    return got


@pytest.mark.parametrize(("body", "cast", "reason", "detail"), [
    ("y = t.float()", "t.float()", "parameter", "t is a parameter of A.f"),
    ("y = self.pool.mystery(layer_id).float()", "self.pool.mystery(layer_id).float()", "unknown-call",
     "self.pool.mystery() is no getter and no view"),
    ("y = self.mystery.float()", "self.mystery.float()", "unresolved-attribute", "self.mystery: no buffer kind names .mystery"),
    ("y = self.k_buffer[kv_indices].float()", "self.k_buffer[kv_indices].float()", "gather-index",
     "[kv_indices] in self.k_buffer[kv_indices]"),
    ("y = self.k_buffer[:bs].float()", "self.k_buffer[:bs].float()", "batch-slice", "[:bs] in self.k_buffer[:bs]"),
    ("q, k = self.k_buffer.split(8)\ny = k.float()", "k.float()", "token-split",
     "self.k_buffer.split(8) cuts axis 0 (no dim given)"),
    ("q, k = self.k_buffer.split(8, dim=d)\ny = k.float()", "k.float()", "token-split",
     "self.k_buffer.split(8, dim=d) cuts axis d"),
    ("y = GLOBAL_BUF.float()", "GLOBAL_BUF.float()", "no-assignment", "GLOBAL_BUF is not assigned in A.f before its use"),
    ("y = (t + 1).float()", "(t + 1).float()", "other", "t + 1 is a BinaryOperation"),
], ids=["parameter", "unknown-call", "unresolved-attribute", "gather-index", "batch-slice", "token-split",
        "token-split-unknown-axis", "no-assignment", "other"])
def test_each_stop_reason_names_the_exact_thing(body: str, cast: str, reason: str, detail: str) -> None:
    got = stop_of(body, cast)
    assert (got.reason, got.detail) == (reason, detail)


def test_a_stop_carries_the_hops_walked_before_it() -> None:
    got = stop_of("a = self.k_buffer[kv_indices]\nb = a.view(-1)\ny = b.float()", "b.float()")
    assert got == Stop("gather-index", "[kv_indices] in self.k_buffer[kv_indices]",
                       ("b = a.view(-1) (line 4)", ".view() is a view", "a = self.k_buffer[kv_indices] (line 3)"))


def test_a_parameter_of_an_enclosing_function_is_named_with_that_function() -> None:
    src = "def outer(buf):\n    def inner():\n        return buf.float()\n    return inner\n"
    facts = extract_source(src.encode(), "m", "m.py", False)
    (cast,) = facts.casts
    got = Provenance(RULES).origin_or_stop(facts, cast.scope, cast.receiver, cast.line)
    assert got == Stop("parameter", "buf is a parameter of outer")


def test_the_step_limit_is_a_stop() -> None:
    chain = "x0 = self.k_buffer\n" + "".join(f"x{i} = x{i - 1}.view(-1)\n" for i in range(1, 30))
    got = stop_of(chain + "y = x29.float()", "x29.float()")
    assert got.reason == "step-limit" and len(got.hops) == 24


def test_a_tuple_stops_at_its_first_element_that_is_not_whole() -> None:
    got = stop_of("y = (self.k_buffer, t)\nz = y.float()", "y.float()")
    assert (got.reason, got.detail) == ("parameter", "t is a parameter of A.f")
    assert got.hops[0] == "y = (self.k_buffer, t) (line 3)"


def test_an_assignment_in_the_other_branch_of_an_if_is_not_what_the_use_reads() -> None:
    got = origins(
        "k = self.k_buffer\n"
        "if t:\n"
        "    k = k[kv_indices]\n"
        "    k.half()\n"  # the gathered rows assigned in this branch
        "else:\n"
        "    k.float()\n"  # the other branch: still the whole self.k_buffer from before the if
        "k.double()\n"  # after the if: the latest assignment (the gather) may have run
    )
    assert {text: o.path if o else None for text, o in got.items()} == {
        "k.half()": None, "k.float()": "self.k_buffer", "k.double()": None,
    }


def test_exclusive_branches_agree_with_their_definition_on_the_project_sources() -> None:
    """``_exclusive`` (which stops early) against its definition: some ``if`` holds one line in its body and
    the other in its ``else``, in either order. Every pair of lines at or beside a branch's ends, in files with
    nested ifs and elif chains."""
    from castfind.analysis.provenance import _exclusive
    from tests.support import REPO

    def brute(facts, a: int, b: int) -> bool:
        return any((b0 <= a <= b1 and e0 <= b <= e1) or (e0 <= a <= e1 and b0 <= b <= b1)
                   for b0, b1, e0, e1 in facts.branches)

    checked = 0
    for p in sorted((REPO / "castfind").rglob("*.py")):
        facts = extract_source(p.read_bytes(), "m", str(p), False)
        lines = sorted({n + d for br in facts.branches for n in br for d in (-1, 0, 1)})
        for a in lines:
            for b in lines:
                assert _exclusive(facts, a, b) == brute(facts, a, b), (p.name, a, b)
                checked += brute(facts, a, b)
    assert checked > 1000
