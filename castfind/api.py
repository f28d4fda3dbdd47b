"""The library entry points. They return results and never print or exit (the CLI does that)."""

from __future__ import annotations

import os
from pathlib import Path

from castfind.cache import Cache, default_cache_dir
from castfind.index import Index, ProgressFn
from castfind.where import WhereResult, where as _where


def open_index(
    roots: list[str],
    *,
    exclude: tuple[str, ...] = (),
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    jobs: int | None = None,
    follow_installed: bool = False,
    progress: ProgressFn | None = None,
) -> Index:
    """Discover the files under ``roots`` and open the facts cache. Parses nothing yet."""
    cache = Cache(Path(cache_dir) if cache_dir else default_cache_dir()) if use_cache else None
    return Index.from_roots(
        roots or ["."],
        exclude=exclude,
        cache=cache,
        jobs=jobs if jobs else (os.cpu_count() or 1),
        follow_installed=follow_installed,
        progress=progress,
    )


def where(symbol: str, roots: list[str], at: tuple[str, int] | None = None, **index_options) -> WhereResult:
    """Resolve ``symbol`` across ``roots``: definitions, the chain of hops to each, call sites."""
    index_options.setdefault("follow_installed", True)
    index = open_index(roots, **index_options)
    return _where(index, symbol, at)
