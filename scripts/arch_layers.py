"""Rewrite ARCHITECTURE.md's module-table layers to the lowest numbers the imports allow."""
import re, sys
from pathlib import Path
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from tests.test_architecture import real_imports
imp = real_imports()
layer = {}
def L(m, seen=()):
    if m in layer: return layer[m]
    if m in seen: raise SystemExit(f"cycle through {m}: {seen}")
    deps = [t for t in imp.get(m, ()) if t in imp and t != m]
    layer[m] = 1 + max((L(t, seen + (m,)) for t in deps), default=-1)
    return layer[m]
for m in imp: L(m)
p = Path(__file__).resolve().parents[1] / "ARCHITECTURE.md"; s = p.read_text()
row = re.compile(r"^(\|\s*`(castfind(?:\.[a-z_]+)*)`\s*\|\s*)(\d+)(\s*\|)", re.M)
missing = set(imp) - {m.group(2) for m in row.finditer(s)}
print("missing rows:", missing)
s = row.sub(lambda m: f"{m.group(1)}{layer.get(m.group(2), m.group(3))}{m.group(4)}", s)
p.write_text(s)
