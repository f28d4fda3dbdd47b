"""castfind: find whole-buffer dtype casts on hot paths in PyTorch serving code.

The static tool needs no torch. :func:`record` (the runtime hook) imports torch
only when it is called.
"""

from __future__ import annotations

from castfind.core.versions import __version__

__all__ = ["__version__", "record", "step"]


def __getattr__(name: str):
    # PERF/optional dependency: torch is imported only when the runtime hook is used.
    if name in ("record", "step"):
        from castfind.runtime import recorder

        return getattr(recorder, name)
    raise AttributeError(f"module 'castfind' has no attribute {name!r}")
