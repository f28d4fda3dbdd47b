"""The carried results' key covers all of castfind's source: a change to the engine (castfind/analysis), not only to
the store, must never replay results computed by other code."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import REPO


def _digest(tree: Path) -> str:
    code = "from castfind.store import memo; print(memo._code_digest())"
    return subprocess.run([sys.executable, "-c", code], cwd=tree, env={"PYTHONPATH": str(tree)}, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_an_edit_to_any_castfind_module_changes_the_code_digest(tmp_path: Path) -> None:
    tree = tmp_path / "copy"
    shutil.copytree(REPO / "castfind", tree / "castfind", ignore=shutil.ignore_patterns("__pycache__"))
    before = _digest(tree)
    assert before == _digest(tree)  # stable for the same code
    engine = tree / "castfind" / "analysis" / "modelpath.py"
    engine.write_text(engine.read_text() + "\n# an edit outside castfind/store\n")
    after_engine = _digest(tree)
    assert after_engine != before
    store = tree / "castfind" / "store" / "memo.py"
    store.write_text(store.read_text() + "\n# an edit inside castfind/store\n")
    assert _digest(tree) not in (before, after_engine)
