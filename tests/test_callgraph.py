"""Call graph: which files are parsed to find callers, and which paths count as hot."""

from __future__ import annotations

import textwrap
from pathlib import Path

from castfind.callgraph import CallGraph
from castfind.discover import discover
from castfind.index import Index
from castfind.resolve import Resolver
from castfind.rules import load_rules
from castfind.scan import scan


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
