"""The provenance fixture, scanned end to end: exclusions by the buffer's names and class (never the
function's), attribute views, split/chunk/unbind by axis, and tuple unpacking of getters.

Each cast line of ``fixtures/provenance`` says what must be reported (``# flag: RULE`` or ``# quiet``).
"""

from __future__ import annotations

import re

import pytest

from castfind.analysis.scan import scan
from castfind.core.rules import load_rules
from castfind.store.discover import discover
from castfind.store.index import Index
from tests.support import REPO

FIX = REPO / "fixtures" / "provenance"
MARK = re.compile(r"#\s*(flag: (CF\d{3})|quiet)")


def expected(name: str) -> tuple[set[tuple[str, int]], set[int]]:
    flagged: set[tuple[str, int]] = set()
    quiet: set[int] = set()
    for n, line in enumerate((FIX / "provpkg" / name).read_text().splitlines(), 1):
        m = MARK.search(line)
        if m and m.group(2):
            flagged.add((m.group(2), n))
        elif m:
            quiet.add(n)
    return flagged, quiet


@pytest.fixture(scope="module")
def findings() -> list:
    return scan(Index(discover([str(FIX)]), jobs=1), load_rules()).findings


@pytest.mark.parametrize("name", ["names.py", "views.py", "indexes.py"])
def test_each_marked_cast_is_flagged_or_quiet(findings: list, name: str) -> None:
    flagged, quiet = expected(name)
    assert flagged and quiet
    got = {(f.rule, f.line) for f in findings if f.path.endswith(f"provpkg/{name}")}
    assert got == flagged


def test_the_hops_say_why_a_piece_is_whole(findings: list) -> None:
    by_line = {(f.path.rsplit("/", 1)[-1], f.line): f for f in findings}
    _, quiet = expected("views.py")
    rope = next(f for (p, _), f in by_line.items() if p == "views.py" and f.expr == "rope.to(q.dtype)")
    assert any("split(dim=-1) cuts a non-token axis" in h for h in rope.provenance), rope.provenance
    v = next(f for (p, _), f in by_line.items() if p == "views.py" and f.expr == "v.to(q.dtype)")
    assert any(h.startswith("element 1 of get_kv_buffer()") for h in v.provenance), v.provenance
