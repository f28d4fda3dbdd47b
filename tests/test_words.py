"""castfind.store.words: which files hold a name, found from their text; each name's files scanned once per index."""

from __future__ import annotations

from castfind.store import words
from castfind.store.discover import discover
from castfind.store.index import Index
from castfind.store.words import Words


def _tree(tmp_path) -> Index:
    (tmp_path / "a.py").write_text("def kernel(x):\n    return x\n")
    (tmp_path / "b.py").write_text("from a import kernel\nkernel(1)\nother = 2\n")
    (tmp_path / "c.py").write_text("# the kernel, in prose\nvalue = 3\n")
    (tmp_path / "d.py").write_text("kernels = 4\n")
    return Index(discover([str(tmp_path)]), jobs=1)


def test_each_names_files_are_scanned_once_per_index_whichever_words_and_query_ask(tmp_path, monkeypatch):
    index = _tree(tmp_path)
    scans: list[bytes] = []
    real = words.has_word

    def counting(data: bytes, word: bytes) -> bool:
        scans.append(word)
        return real(data, word)

    monkeypatch.setattr(words, "has_word", counting)
    assert [sf.path for sf in Words(index).containing(["kernel"])] == ["a.py", "b.py", "c.py"]
    assert scans.count(b"kernel") == 4  # every file once
    assert [sf.path for sf in Words(index).containing(["other", "kernel"])] == ["a.py", "b.py", "c.py"]
    assert [sf.path for sf in Words(index).containing(["kernel"])] == ["a.py", "b.py", "c.py"]
    assert scans.count(b"kernel") == 4 and scans.count(b"other") == 4  # not again, by another Words either
    # A file that joins the index later (an installed package) is scanned then, alone.
    (tmp_path / "late").mkdir()
    (tmp_path / "late" / "e.py").write_text("kernel = None\n")
    index.add_files(discover([str(tmp_path / "late")]))
    assert [sf.path for sf in Words(index).containing(["kernel"])] == ["a.py", "b.py", "c.py", "e.py"]
    assert scans.count(b"kernel") == 5


def test_names_asked_collects_the_names_looked_up_while_it_is_open(tmp_path):
    from castfind.store.words import names_asked

    index = _tree(tmp_path)
    Words(index).containing(["before"])
    with names_asked(index) as outer:
        Words(index).containing(["kernel"])
        with names_asked(index) as inner:
            Words(index).containing(["value", "kernel"])
    Words(index).containing(["after"])
    assert outer == {"kernel", "value"} and inner == {"value", "kernel"}
