"""Extract: one file's facts — positions, guards, loop depth — and the same facts from any worker count."""

from __future__ import annotations

from castfind.extract import extract_source
from castfind.index import Index
from castfind.discover import discover


def _casts(src: str):
    return extract_source(src.encode(), "m", "m.py", False).casts


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
