"""``castfind init``: add a starter ``[tool.castfind]`` section and a pre-commit hook.

It only ever adds: an existing ``[tool.castfind]`` section is left alone, and an existing
``.pre-commit-config.yaml`` is never rewritten (YAML round-tripping would lose the user's
comments and layout); instead :func:`init` says what to paste. Running it twice changes
nothing the second time. File-system errors (permissions, a full disk) propagate as
``OSError`` for the CLI to report.
"""

from __future__ import annotations

import errno
import tomllib
from pathlib import Path
from typing import Any

import yaml

from castfind.core.fsutil import atomic_write_text
from castfind.core.inputs import read_input

__all__ = ["PRECOMMIT_SNIPPET", "STARTER_SECTION", "init"]

PYPROJECT = "pyproject.toml"
PRECOMMIT = ".pre-commit-config.yaml"
HOOK_ID = "castfind"

STARTER_SECTION = """\
[tool.castfind]
# Paths are relative to this file. Command-line options override these values.
roots = ["."]
exclude = []
# rules = ["castfind_rules"]                # folders of extra rule files
# entry-points = ["*.forward_decode"]       # extra hot-path entry point patterns
fail-on = "error"                           # error | warning | info
# baseline = "castfind-baseline.json"       # made by: castfind scan --write-baseline
"""

# castfind publishes no release tags, so the hook runs the castfind installed where git commits run
# (pip install castfind's source); a team with its own copy of the repository may point `repo:` at it.
PRECOMMIT_SNIPPET = f"""\
repos:
  - repo: local
    hooks:
      - id: {HOOK_ID}
        name: castfind (whole-buffer dtype casts on hot paths)
        entry: castfind scan --only
        language: system
        types: [python]
"""


def _init_pyproject(root: Path) -> list[str]:
    path = root / PYPROJECT
    if not path.exists():
        atomic_write_text(path, STARTER_SECTION)
        return [f"created {PYPROJECT} with a [tool.castfind] section"]
    try:
        # Bytes, not read_text: universal newlines would turn a CRLF file into LF on rewrite.
        text = read_input(path, "pyproject").decode("utf-8")
        document = tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        # Appending to a file we cannot parse could make it worse; leave it to the user.
        return [f"skipped {PYPROJECT}: it is not valid TOML ({exc}); fix it, then add:", *STARTER_SECTION.splitlines()]
    tool = document.get("tool")
    if isinstance(tool, dict) and "castfind" in tool:
        return [f"{PYPROJECT} already has [tool.castfind]; left it unchanged"]
    newline = "\r\n" if "\r\n" in text else "\n"
    separator = "" if not text else (newline if text.endswith("\n") else newline * 2)
    new_text = text + separator + STARTER_SECTION.replace("\n", newline)
    try:
        tomllib.loads(new_text)
    except tomllib.TOMLDecodeError:
        # e.g. ``tool = {black = {...}}`` as an inline table cannot gain a [tool.castfind] header.
        return [f"skipped {PYPROJECT}: a [tool.castfind] header cannot be appended to its [tool] table; add:",
                *STARTER_SECTION.splitlines()]
    atomic_write_text(path, new_text)
    return [f"added a [tool.castfind] section to {PYPROJECT}"]


def _has_hook(document: Any) -> bool:
    if not isinstance(document, dict) or not isinstance(document.get("repos"), list):
        return False
    for repo in document["repos"]:
        hooks = repo.get("hooks") if isinstance(repo, dict) else None
        if isinstance(hooks, list) and any(isinstance(h, dict) and h.get("id") == HOOK_ID for h in hooks):
            return True
    return False


def _init_precommit(root: Path) -> list[str]:
    path = root / PRECOMMIT
    if not path.exists():
        atomic_write_text(path, PRECOMMIT_SNIPPET)
        return [f"created {PRECOMMIT} with the castfind hook"]
    try:
        document = yaml.safe_load(read_input(path, "pyproject").decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [f"left {PRECOMMIT} unchanged: it could not be read as YAML ({problem}); add this entry:",
                *PRECOMMIT_SNIPPET.splitlines()]
    if _has_hook(document):
        return [f"{PRECOMMIT} already runs the castfind hook; left it unchanged"]
    return [f"left {PRECOMMIT} unchanged (castfind never rewrites it); add this entry under repos:",
            *PRECOMMIT_SNIPPET.splitlines()[1:]]


def init(root: str | Path) -> list[str]:
    """Set ``root`` up for castfind and return human-readable lines saying what was done.

    * ``pyproject.toml``: created with :data:`STARTER_SECTION` if missing; the section is
      appended if the file has none; an existing section is never touched.
    * ``.pre-commit-config.yaml``: created with :data:`PRECOMMIT_SNIPPET` if missing;
      otherwise left as is, with the lines to add when it has no castfind hook.

    Writes are atomic and keep what the user chose: CRLF line endings, a symlinked
    ``pyproject.toml`` (its target is edited, the link stays) and the file's mode. ``root``
    must be an existing folder (``NotADirectoryError`` / ``FileNotFoundError`` otherwise,
    with ``filename`` set).
    """
    folder = Path(root)
    if not folder.is_dir():
        if folder.exists():
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(folder))
        raise FileNotFoundError(errno.ENOENT, "no such folder", str(folder))
    return _init_pyproject(folder) + _init_precommit(folder)
