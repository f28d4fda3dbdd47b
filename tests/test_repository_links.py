"""Nothing in the repository points outside it: every link git tracks resolves to a path inside the checkout
(a link to the author's machine, committed by accident, worked there and nowhere else)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support import REPO


def _tracked_links() -> list[str]:
    """Paths git tracks as symbolic links (mode 120000)."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-s"], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [line.split("\t", 1)[1] for line in out.splitlines() if line.startswith("120000 ")]


def _inside(link: str, target: str) -> bool:
    resolved = os.path.normpath(os.path.join(REPO, os.path.dirname(link), target))
    return not os.path.isabs(target) and os.path.commonpath([resolved, str(REPO)]) == str(REPO)


def test_every_tracked_link_stays_inside_the_repository() -> None:
    outside = {}
    for link in _tracked_links():
        # the link's target as git stores it (the blob), so a link missing from the work tree is checked too
        target = subprocess.run(["git", "-C", str(REPO), "cat-file", "-p", f":{link}"], capture_output=True,
                                text=True, check=True).stdout
        if not _inside(link, target):
            outside[link] = target
    assert outside == {}


@pytest.mark.parametrize(("link", "target", "inside"), [
    ("tests/mermaid/node_modules", "/work/main/tests/mermaid/node_modules", False),
    ("fixtures/a/b.py", "../c/b.py", True),
    ("fixtures/a/b.py", "../../../elsewhere.py", False),
])
def test_the_inside_check(link: str, target: str, inside: bool) -> None:
    assert _inside(link, target) is inside
