"""`where` parses only the files a query can need (the demand-driven design the speed targets rely on)."""

from __future__ import annotations

from castfind.discover import discover
from castfind.index import Index
from castfind.where import where


def test_where_reads_only_files_that_name_the_symbol(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kern.py").write_text("def kernel(x):\n    return x\n")
    (pkg / "load.py").write_text(
        "def _load():\n    from pkg.kern import kernel\n    return kernel, None\n\n"
        "def run(x):\n    fn, _ = _load()\n    _, cfg = _load()\n    return fn(x)\n"
    )
    for i in range(30):  # files that only share the discard name `_` with the query's chain
        (pkg / f"other{i}.py").write_text("for _ in range(3):\n    pass\n")
    index = Index(discover([str(tmp_path)]), jobs=1)
    res = where(index, "fn")
    assert [(d.qualname, d.line) for d in res.definitions] == [("pkg.kern.kernel", 1)]
    assert [(c.path, c.line) for c in res.call_sites] == [("pkg/load.py", 8)]
    assert index.loaded <= 4, index.loaded  # kern, load (+ __init__), never the 30 others
