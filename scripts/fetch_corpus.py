"""Fetch and unpack the real-code corpus: the sglang, flashinfer-python and transformers wheels.

Usage: python scripts/fetch_corpus.py [DEST]   (default: .corpus/ next to this repo)

Downloads with ``pip download --no-deps`` (never installs them), unpacks each wheel once into
DEST/<name>/ and writes DEST/<name>/.complete when the unpack finished, so an interrupted run
is redone rather than trusted. Prints the root of each unpacked wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEELS = {
    "sglang": "sglang==0.5.23",
    "flashinfer": "flashinfer-python==0.7.2.post1",
    "transformers": "transformers==4.57.1",
}
#: Wheels of which only the Python sources are unpacked (the rest is data castfind never reads).
PY_ONLY = {"transformers"}


def fetch(dest: Path) -> dict[str, Path]:
    dest.mkdir(parents=True, exist_ok=True)
    roots: dict[str, Path] = {}
    for name, req in WHEELS.items():
        root = dest / name
        if (root / ".complete").exists():
            roots[name] = root
            continue
        wheel_dir = dest / "wheels"
        wheel_dir.mkdir(exist_ok=True)
        stem = req.split("==")[0].replace("-", "_")
        version = req.split("==")[1]
        found = [p for p in wheel_dir.glob(f"{stem}-{version}-*.whl")]
        if not found:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheel_dir), req],
                check=True,
            )
            found = [p for p in wheel_dir.glob(f"{stem}-{version}-*.whl")]
        if not found:
            raise SystemExit(f"fetch_corpus: pip download of {req} left no wheel in {wheel_dir}")
        # Unpack into a temporary folder and rename: a half-unpacked tree is never used.
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=dest))
        with zipfile.ZipFile(found[0]) as zf:
            members = [n for n in zf.namelist() if n.endswith(".py")] if name in PY_ONLY else None
            zf.extractall(tmp, members)
        (tmp / ".complete").write_text(found[0].name + "\n")
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
        roots[name] = root
    return roots


def main() -> None:
    here = Path(__file__).resolve().parent.parent
    dest = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(os.environ.get("CASTFIND_CORPUS", here / ".corpus"))
    for name, root in fetch(dest).items():
        print(f"{name}\t{root}")


if __name__ == "__main__":
    main()
