"""Shared fixtures. The real-corpus tests share one cache, filled once per run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.support import REPO, run_castfind

# An answer must not depend on how loaded the machine is: no time budget in tests (a test that checks the
# budget passes its own). Subprocesses inherit it.
os.environ["CASTFIND_WHERE_TIME_BUDGET"] = "0"


@pytest.fixture(scope="session")
def corpus() -> dict[str, Path]:
    """The unpacked sglang and flashinfer wheels (fetched by ``make corpus`` / scripts/fetch_corpus.py)."""
    base = Path(os.environ.get("CASTFIND_CORPUS", REPO / ".corpus"))
    roots = {"sglang": base / "sglang", "flashinfer": base / "flashinfer"}
    for root in roots.values():
        if not (root / ".complete").exists():
            sys.path.insert(0, str(REPO / "scripts"))
            from fetch_corpus import fetch

            fetch(base)
            break
    return roots


@pytest.fixture(scope="session")
def checkout(corpus) -> Path:
    """``.corpus/checkout``: sglang under ``python/``, sgl-kernel's package under ``sgl-kernel/python/``,
    and the ``test/`` and ``benchmark/`` files of fixtures/checkout_corpus (scripts/fetch_corpus.py).
    Fails, never skips, when it cannot be built (the sgl-kernel wheel comes from PyPI)."""
    base = Path(os.environ.get("CASTFIND_CORPUS", REPO / ".corpus"))
    sys.path.insert(0, str(REPO / "scripts"))
    from fetch_corpus import build_checkout

    try:
        return build_checkout(base, corpus["sglang"])
    except (SystemExit, OSError) as exc:
        pytest.fail(f"cannot build the checkout corpus in {base / 'checkout'}: {exc} "
                    "(it needs the sgl-kernel wheel from PyPI once: run `make corpus` with network access)")


@pytest.fixture(scope="session")
def corpus_cache(tmp_path_factory, corpus) -> Path:
    """One facts cache for the whole run, filled by extracting every file of both wheels once."""
    from castfind.api import open_index

    d = tmp_path_factory.mktemp("castfind-corpus-cache")
    index = open_index([str(corpus["sglang"]), str(corpus["flashinfer"])], cache_dir=d, jobs=2)
    index.load_files(index.files)
    pytest.corpus_diagnostics = list(index.diagnostics)  # type: ignore[attr-defined]
    pytest.corpus_files = len(index.files)  # type: ignore[attr-defined]
    return d


@pytest.fixture(scope="session")
def sglang_scan(corpus, corpus_cache) -> dict:
    """``castfind scan --json`` of the whole sglang wheel with the default rules, run once per session."""
    r = run_castfind("scan", str(corpus["sglang"]), "--cache-dir", str(corpus_cache), "--json", "-j", "2")
    assert r.returncode == 1, r.stderr  # findings
    return json.loads(r.stdout)


@pytest.fixture(scope="session")
def transformers_root(corpus) -> Path:
    """The unpacked transformers wheel (Python sources only), fetched with the corpus."""
    base = Path(os.environ.get("CASTFIND_CORPUS", REPO / ".corpus"))
    root = base / "transformers"
    if not (root / ".complete").exists():
        sys.path.insert(0, str(REPO / "scripts"))
        from fetch_corpus import fetch

        fetch(base)
    return root
