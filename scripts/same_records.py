"""Do two revisions of castfind give the same records on the same roots?

Usage: python scripts/same_records.py BASE [HEAD] [--roots R ...] [--out DIR]

Runs ``castfind scan ROOTS --json --no-cache`` and ``castfind scan ROOTS --stops --json --no-cache`` with the
castfind of each revision (BASE checked out into a temporary git worktree; HEAD defaults to the work tree as
it is), and compares the JSON documents: every finding record, every diagnostic, the stats (less timings) and
the --stops table. Prints one line per comparison and exits 1 when any differs (the differing records are
written under --out). Roots default to the real corpus (``.corpus/sglang .corpus/flashinfer``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Stats that measure the run rather than describe the result.
_TIMING = {"seconds", "parsed", "loaded", "hashed", "outcome", "cache"}


def _scan(tree: Path, roots: list[str], extra: list[str], cwd: Path) -> dict:
    """One revision's answer, run from ``cwd`` (the same neutral folder for both: it holds no castfind, so the
    revision's own tree, on PYTHONPATH, is the castfind imported, workers included; paths read alike)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    r = subprocess.run([sys.executable, "-m", "castfind", "scan", *roots, "--json", "--no-cache", "-j", "2", *extra],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    if r.returncode not in (0, 1):
        raise SystemExit(f"same_records: castfind in {tree} exited {r.returncode}: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout)


def _comparable(doc: dict) -> dict:
    stats = doc.get("stats")
    if isinstance(stats, dict):
        doc = dict(doc, stats={k: v for k, v in stats.items() if k not in _TIMING})
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("head", nargs="?", default=None, help="a revision; default: the work tree as it is")
    ap.add_argument("--roots", nargs="+", default=[".corpus/sglang", ".corpus/flashinfer"])
    ap.add_argument("--out", default=None, help="folder for the documents when they differ")
    ns = ap.parse_args()
    roots = [os.path.abspath(r) for r in ns.roots]
    with tempfile.TemporaryDirectory(prefix="castfind-same-") as tmp:
        cwd = Path(tmp) / "cwd"
        cwd.mkdir()
        trees = {}
        for name, rev in (("base", ns.base), ("head", ns.head)):
            if rev is None:
                trees[name] = REPO
                continue
            trees[name] = Path(tmp) / name
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(trees[name]), rev],
                           check=True)
        try:
            differ = 0
            for label, extra in (("findings", []), ("stops", ["--stops"])):
                docs = {name: _comparable(_scan(tree, roots, extra, cwd)) for name, tree in trees.items()}
                same = docs["base"] == docs["head"]
                head = docs["head"]
                what = (f"{len(head.get('findings', []))} records; diagnostics: {len(head.get('diagnostics', []))}"
                        if label == "findings" else
                        f"{head.get('examined')} casts examined, {head.get('buffer_like')} buffer-like, "
                        f"{len(head.get('stops', []))} stop reasons")
                print(f"{label}: {'same' if same else 'DIFFERENT'} ({what})")
                if not same:
                    differ += 1
                    out = Path(ns.out or tempfile.mkdtemp(prefix="castfind-differ-"))
                    out.mkdir(parents=True, exist_ok=True)
                    for name, doc in docs.items():
                        (out / f"{label}-{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
                    print(f"  written to {out}")
        finally:
            for tree in trees.values():
                if tree != REPO:
                    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
