"""Rewrite ARCHITECTURE.md's module-table layers to the lowest numbers the imports allow.

Run after an import changes: ``.venv/bin/python scripts/arch_layers.py``. A module's layer is one more than the
highest layer among the castfind modules it imports (tests/test_architecture.py's reading of the imports); a cycle
stops the script with the modules on it. Rows the table lacks are printed, not invented.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.test_architecture import real_imports  # noqa: E402 - the repository's own tests package

ROW = re.compile(r"^(\|\s*`(castfind(?:\.[a-z_]+)*)`\s*\|\s*)(\d+)(\s*\|)", re.M)


def layers(imports: dict[str, set[str]]) -> dict[str, int]:
    out: dict[str, int] = {}

    def layer(module: str, seen: tuple[str, ...] = ()) -> int:
        if module in out:
            return out[module]
        if module in seen:
            raise SystemExit(f"cycle through {module}: {' -> '.join(seen)}")
        deps = [t for t in imports.get(module, ()) if t in imports and t != module]
        out[module] = 1 + max((layer(t, (*seen, module)) for t in deps), default=-1)
        return out[module]

    for m in imports:
        layer(m)
    return out


def main() -> None:
    imports = real_imports()
    got = layers(imports)
    path = REPO / "ARCHITECTURE.md"
    text = path.read_text()
    missing = set(imports) - {m.group(2) for m in ROW.finditer(text)}
    if missing:
        print("modules with no row in the table:", ", ".join(sorted(missing)))
    path.write_text(ROW.sub(lambda m: f"{m.group(1)}{got.get(m.group(2), m.group(3))}{m.group(4)}", text))


if __name__ == "__main__":
    main()
