"""Call graph: which files are parsed to find callers, and which paths count as hot."""

from __future__ import annotations

import textwrap
from pathlib import Path

from castfind.analysis.callgraph import WEAK_FANOUT, CallGraph
from castfind.analysis.resolve import Resolver
from castfind.analysis.scan import scan
from castfind.core.rules import load_rules
from castfind.store.discover import discover
from castfind.store.index import Index


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "proj"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


def _graph(root: Path) -> tuple[Index, CallGraph]:
    index = Index(discover([str(root)]), jobs=1)
    rules = load_rules()
    return index, CallGraph(index, Resolver(index), rules)


def test_callers_parse_only_files_that_can_call_the_function(tmp_path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/tool.py": "def main():\n    return 1\n",
        # imports pkg.tool.main: a real caller
        "pkg/uses.py": "from pkg.tool import main\n\ndef run():\n    return main()\n",
        # its own main: a bare call here can never reach pkg.tool.main
        "pkg/script.py": "def main():\n    pass\n\ndef go():\n    main()\n",
        # names main only in a def and a docstring: no call
        "pkg/other.py": 'def main(x):\n    """the main loop"""\n    return x\n',
        # a dotted call counts (the receiver may be anything)
        "pkg/dotted.py": "import pkg.tool as t\n\ndef go():\n    t.main ()\n",
    })
    index, graph = _graph(root)
    callers = graph.callers(("pkg.tool", "main"))
    assert callers == [("pkg.dotted", "go"), ("pkg.uses", "run")]
    parsed = {Path(p).name for p in index._facts}
    assert "script.py" not in parsed and "other.py" not in parsed
    assert {"uses.py", "dotted.py"} <= parsed


def test_def_count_reads_text_and_counts_nested_and_async_defs(tmp_path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def step():\n    def step():\n        pass\n\nasync def step():\n    pass\n",
        "pkg/b.py": "x = 'def step(): not code'\nstep_count = 1\n",
    })
    index, graph = _graph(root)
    assert graph.def_count("step") == 3
    assert index.parsed == 0  # counted without parsing


def test_a_function_reached_only_through_construction_is_not_hot(tmp_path):
    root = _tree(tmp_path, {
        "srv/__init__.py": "",
        "srv/model.py": """\
            class Layer:
                def __init__(self, w):
                    self.w_proj = w
                    self._prepare()

                def _prepare(self):
                    return self.w_proj.weight.float()

                def _project(self, x):
                    return x @ self.w_proj.weight.float()

                def forward(self, x):
                    return self._project(x)
            """,
    })
    index, graph = _graph(root)
    assert graph.hot_path(("srv.model", "Layer._project")) == ("srv.model.Layer.forward", "srv.model.Layer._project")
    assert graph.hot_path(("srv.model", "Layer._prepare")) is None
    out = scan(Index(discover([str(root)]), jobs=1), load_rules())
    by_line = {f.line: f.rule for f in out.findings}
    assert by_line == {7: "CF104", 10: "CF102"}


def test_buffer_attributes_count_only_as_attribute_access():
    words = load_rules().buffer_words()
    assert words.search(b"y = self.kv_buffer[0].to(torch.bfloat16)")
    assert words.search(b"w = layer.\\\n    w13_weight")
    assert words.search(b"k = pool.get_key_buffer(i)")
    assert not words.search(b"def f(weight, kv_buffer):\n    return weight.float()")


# -- typed dispatch (castfind.analysis.receivers) ------------------------------------------------------------

DISPATCH = Path(__file__).resolve().parent.parent / "fixtures" / "dispatch"
P = "dispatchpkg"


def test_typed_dispatch_links_a_declared_base_to_every_override_and_nothing_else():
    index, graph = _graph(DISPATCH)
    assert graph.def_count("apply") > WEAK_FANOUT  # no by-name edge could link these calls
    users = [(f"{P}.linear", "LinearBase.forward"), (f"{P}.runner", "MoERunner.forward"),
             (f"{P}.runner", "MoERunner.run_batch")]
    # Declared `self.quant_method: Optional[QuantMethodBase]`; a parameter `layer: "ColumnLinear"`
    # (a subclass that inherits the declaration), directly and through a local.
    for override in ("QuantMethodBase.apply", "Fp8LinearMethod.apply", "Int8LinearMethod.apply",
                     "UnquantizedMethod.apply"):
        assert graph.callers((f"{P}.quant", override)) == users, override
    # Look-alikes: an `apply` outside the declared hierarchy; a receiver typed as an unrelated class.
    assert graph.callers((f"{P}.legacy", "LegacyMethod.apply")) == []
    assert graph.callers((f"{P}.sampler", "Sampler.apply")) == [(f"{P}.sampler", "Head.forward")]
    assert graph.callers((f"{P}.sampler", "TopKSampler.apply")) == [(f"{P}.sampler", "Head.forward")]
    assert graph.hot_path((f"{P}.quant", "Fp8LinearMethod.apply")) == (
        f"{P}.linear.LinearBase.forward", f"{P}.quant.Fp8LinearMethod.apply")


def test_typed_dispatch_through_a_constructor_and_a_factory_with_a_return_annotation():
    index, graph = _graph(DISPATCH)
    attn = [(f"{P}.attention", "Attention.forward")]
    assert graph.callers((f"{P}.attention", "FlashImpl.run")) == attn  # self.impl = FlashImpl(...)
    # self.backend = make_backend(), `def make_backend() -> DecodeBackendBase`: the base and its
    # subclass; not the unrelated CpuDecoder, though few functions are named `decode`.
    assert graph.def_count("decode") <= WEAK_FANOUT
    assert graph.callers((f"{P}.backends", "DecodeBackendBase.decode")) == attn
    assert graph.callers((f"{P}.backends", "TritonBackend.decode")) == attn
    assert graph.callers((f"{P}.backends", "CpuDecoder.decode")) == []


def test_receiver_types_and_what_they_read():
    index, graph = _graph(DISPATCH)
    recv = graph.receivers
    base = frozenset({(f"{P}.quant", "QuantMethodBase")})
    with graph.r.tracker.recording() as deps:
        assert recv.types_of((f"{P}.linear", "LinearBase.forward"), "self.quant_method") == base
    assert str(DISPATCH / P / "linear.py") in deps
    with graph.r.tracker.recording() as again:  # an in-run hit replays what it read
        recv.types_of((f"{P}.linear", "LinearBase.forward"), "self.quant_method")
    assert again == deps
    assert recv.types_of((f"{P}.runner", "MoERunner.forward"), "method") == base
    assert recv.types_of((f"{P}.runner", "MoERunner.forward"), "layer") == frozenset({(f"{P}.linear", "ColumnLinear")})
    assert recv.types_of((f"{P}.sampler", "Head.forward"), "self.sampler") == frozenset({(f"{P}.sampler", "Sampler")})
    assert recv.types_of((f"{P}.attention", "Attention.forward"), "self.backend") == frozenset(
        {(f"{P}.backends", "DecodeBackendBase")})
    # Unknown: an unannotated parameter, an attribute nobody assigns, a plain value.
    assert recv.types_of((f"{P}.quant", "Fp8LinearMethod.apply"), "layer") is None
    assert recv.types_of((f"{P}.linear", "LinearBase.forward"), "self.nothing") is None
    assert recv.types_of((f"{P}.linear", "LinearBase.forward"), "self.weight") is None


def test_typed_receivers_are_strict_untyped_ones_keep_the_by_name_edge(tmp_path):
    root = _tree(tmp_path, {
        "srv/__init__.py": "",
        "srv/ops.py": """\
            class Base:
                def run(self, x):
                    return x

            class Fast(Base):
                pass

            class Other:
                def run(self, x):
                    return x

            def make() -> "Fast | None":
                return Fast()
            """,
        "srv/model.py": """\
            from typing import Union

            from srv.ops import Fast, Other, make
            import not_installed_arrays as na

            class Model:
                fast: Fast

                def __init__(self):
                    self.made = make()
                    self.mixed: Union[Fast, Other] = Fast()
                    self.tensor: na.Array = None

                def forward(self, x, y: Other, z):
                    a = self.fast.run(x)      # Fast inherits Base.run
                    b = self.made.run(x)      # the factory's declared return type
                    c = y.run(x)              # an annotated parameter: Other.run only
                    d = z.run(x)              # untyped: by name (few `run`s)
                    e = self.mixed.run(x)     # a union: both
                    return self.tensor.run(x)  # a class in no root and not installed: by name
            """,
    })
    index, graph = _graph(root)
    m = graph.receivers
    fwd = ("srv.model", "Model.forward")
    assert m.types_of(fwd, "self.fast") == frozenset({("srv.ops", "Fast")})
    assert m.types_of(fwd, "self.made") == frozenset({("srv.ops", "Fast")})
    assert m.types_of(fwd, "self.mixed") == frozenset({("srv.ops", "Fast"), ("srv.ops", "Other")})
    assert m.types_of(fwd, "self.tensor") is None and m.types_of(fwd, "z") is None
    base, other = ("srv.ops", "Base.run"), ("srv.ops", "Other.run")
    facts = index.facts_of(next(sf for sf in index.files if sf.module == "srv.model"))
    calls = {cs.func: cs for cs in facts.calls if cs.func.endswith(".run")}
    base_anc = graph.ancestors(("srv.ops", "Base"))
    other_anc = graph.ancestors(("srv.ops", "Other"))

    def edge(func: str, node: tuple[str, str], anc: frozenset) -> bool:
        assert func in calls
        return graph._edge(func, fwd, node, graph.class_of(node), anc, weak_ok=True)

    assert edge("self.fast.run", base, base_anc) and not edge("self.fast.run", other, other_anc)
    assert edge("self.made.run", base, base_anc) and not edge("self.made.run", other, other_anc)
    assert edge("y.run", other, other_anc) and not edge("y.run", base, base_anc)
    assert edge("z.run", base, base_anc) and edge("z.run", other, other_anc)
    assert edge("self.mixed.run", base, base_anc) and edge("self.mixed.run", other, other_anc)
    assert edge("self.tensor.run", base, base_anc) and edge("self.tensor.run", other, other_anc)


MEMO_CALLS = Path(__file__).resolve().parents[1] / "fixtures" / "memo_calls"


def test_a_call_under_a_memo_guard_runs_once_and_look_alikes_run_every_step() -> None:
    """fixtures/memo_calls: `if w is None: w = fold(...); self._folded = w` and `if self._packed is None:
    self._pack()` (which stores `self._packed`) are once per value: their callees are not hot. A flag guard and a
    guard on a location nothing stores keep the callee hot."""
    root = str(MEMO_CALLS)
    index = Index(discover([root]))
    out = scan(index, load_rules())
    errors = {f.function for f in out.findings if f.severity == "error"}
    assert errors == {"refold_weight"}, errors
    from castfind.read.extract import extract_source

    facts = extract_source((MEMO_CALLS / "memokit" / "layers.py").read_bytes(), "memokit.layers", "memokit/layers.py",
                           False)
    memo = {(c.func, c.line): (c.memo_unset, c.memo_stored) for c in facts.calls
            if c.func in ("fold_weight", "self._pack", "refold_weight")}
    assert memo[("fold_weight", 27)] == (("self._folded",), ("self._folded",))  # `w` read from self._folded
    assert memo[("self._pack", 46)] == (("self._packed",), ())  # _pack itself stores it
    assert memo[("refold_weight", 61)] == ((), ())  # a flag says nothing is unset
    unset, stored = memo[("refold_weight", 64)]  # unset, but nothing here or in it stores it
    assert "self._other" in unset and stored == ()
