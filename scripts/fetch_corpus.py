"""Fetch and unpack the real-code corpus: the sglang, flashinfer-python and transformers wheels, and a checkout.

Usage: python scripts/fetch_corpus.py [DEST] [--optional NAME ...]   (default: .corpus/ next to this repo)

``--optional jax`` also fetches an optional part (:data:`OPTIONAL`: codebases only the benchmarks read,
such as ``benchmarks/where_robustness.py``, which fetches them itself; ``make corpus`` and the test suite
leave them out).

Downloads with ``pip download --no-deps`` (never installs them), unpacks each wheel once into
DEST/<name>/ and writes DEST/<name>/.complete when the unpack finished, so an interrupted run
is redone rather than trusted.

Then DEST/checkout/, a tree shaped like a git checkout of sglang, from real parts:

* ``python/sglang``: the sglang wheel's package (copied from DEST/sglang);
* ``sgl-kernel/python/sgl_kernel``: the Python files of the sgl-kernel wheel. The wheel is ~535 MB
  for ~120 ``.py`` files, so only those are unpacked (into DEST/sgl-kernel/) and the wheel is deleted;
* ``test/`` and ``benchmark/``: files written for castfind in the shapes real ones have
  (``fixtures/checkout_corpus/``): a reference module, a benchmark casting a whole KV pool, a test
  calling a real sglang function.

Each tree is built in a temporary folder and renamed into place; ``checkout/.complete`` records a
digest of the fixture files, so editing them rebuilds the checkout (seconds) without a download.
Prints the root of each tree.
"""

from __future__ import annotations

import hashlib
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
#: Optional parts, fetched only when named (``--optional``, :func:`fetch`'s ``wheels``): jax, a pure-Python
#: wheel whose public modules re-export from ``jax._src`` (the fourth codebase of ``where_robustness``).
OPTIONAL = {
    "jax": "jax==0.10.2",
}
#: Wheels of which only the Python sources are unpacked (the rest is data castfind never reads).
PY_ONLY = {"transformers", "jax"}


def fetch(dest: Path, wheels: dict[str, str] = WHEELS) -> dict[str, Path]:
    """DEST/<name> for each of ``wheels`` (name → requirement), downloaded and unpacked when missing."""
    dest.mkdir(parents=True, exist_ok=True)
    roots: dict[str, Path] = {}
    for name, req in wheels.items():
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


#: The sgl-kernel wheel whose Python package goes under checkout/sgl-kernel/python/.
SGL_KERNEL = "sgl-kernel==0.3.21"
#: The test/ and benchmark/ files of the checkout (written for castfind, not copied from sglang).
CHECKOUT_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkout_corpus"


def _download(req: str, wheel_dir: Path) -> Path:
    """The wheel of ``req`` in ``wheel_dir``, downloaded with ``pip download --no-deps`` when missing."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    stem, version = req.split("==")[0].replace("-", "_"), req.split("==")[1]
    found = sorted(wheel_dir.glob(f"{stem}-{version}-*.whl"))
    if not found:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheel_dir), req],
                              capture_output=True, text=True)
        found = sorted(wheel_dir.glob(f"{stem}-{version}-*.whl"))
        if done.returncode != 0 or not found:
            why = " ".join((done.stderr or done.stdout).split())[-300:]
            raise SystemExit(f"fetch_corpus: pip download --no-deps {req} failed ({why}); "
                             "the checkout corpus needs PyPI: run `make corpus` with network access")
    return found[0]


def fetch_sgl_kernel(dest: Path) -> Path:
    """DEST/sgl-kernel/sgl_kernel: only the ``.py`` files of the sgl-kernel wheel (the wheel is deleted)."""
    root = dest / "sgl-kernel"
    if (root / ".complete").exists():
        return root
    wheel = _download(SGL_KERNEL, dest / "wheels")
    tmp = Path(tempfile.mkdtemp(prefix=".sgl-kernel-", dir=dest))
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith("sgl_kernel/") and n.endswith(".py")]
        for n in names:
            zf.extract(n, tmp)
    if not names:
        shutil.rmtree(tmp)
        raise SystemExit(f"fetch_corpus: {wheel.name} holds no sgl_kernel/*.py file")
    (tmp / ".complete").write_text(f"{wheel.name}\n{len(names)} .py files\n")
    if root.exists():
        shutil.rmtree(root)
    os.replace(tmp, root)
    wheel.unlink()
    return root


def _fixtures_digest() -> str:
    h = hashlib.blake2b(digest_size=12)
    for p in sorted(CHECKOUT_FIXTURES.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(p.relative_to(CHECKOUT_FIXTURES).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def build_checkout(dest: Path, sglang_root: Path) -> Path:
    """DEST/checkout: sglang under python/, sgl_kernel under sgl-kernel/python/, test/ and benchmark/.

    Idempotent: kept as it is while ``.complete`` names the current fixture digest; otherwise built
    afresh in a temporary folder and renamed into place.
    """
    root = dest / "checkout"
    stamp = f"checkout {_fixtures_digest()} {SGL_KERNEL}\n"
    marker = root / ".complete"
    if marker.exists() and marker.read_text() == stamp:
        return root
    kernel = fetch_sgl_kernel(dest)
    tmp = Path(tempfile.mkdtemp(prefix=".checkout-", dir=dest))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(sglang_root / "sglang", tmp / "python" / "sglang", ignore=ignore)
    shutil.copytree(kernel / "sgl_kernel", tmp / "sgl-kernel" / "python" / "sgl_kernel", ignore=ignore)
    for part in ("test", "benchmark"):
        shutil.copytree(CHECKOUT_FIXTURES / part, tmp / part, ignore=ignore)
    (tmp / ".complete").write_text(stamp)
    if root.exists():
        shutil.rmtree(root)
    os.replace(tmp, root)
    return root


def main() -> None:
    here = Path(__file__).resolve().parent.parent
    args, optional = sys.argv[1:], []
    while "--optional" in args:
        i = args.index("--optional")
        if i + 1 >= len(args) or args[i + 1] not in OPTIONAL:
            raise SystemExit(f"fetch_corpus: --optional takes one of {', '.join(OPTIONAL)}")
        optional.append(args[i + 1])
        del args[i:i + 2]
    dest = Path(args[0]) if args else Path(os.environ.get("CASTFIND_CORPUS", here / ".corpus"))
    roots = fetch(dest)
    roots["checkout"] = build_checkout(dest, roots["sglang"])
    roots.update(fetch(dest, {name: OPTIONAL[name] for name in optional}))
    for name, root in roots.items():
        print(f"{name}\t{root}")


if __name__ == "__main__":
    main()
