"""castfind's release version, and the version of the facts castfind stores (part of every cache key).

Its own module so that reading the cache needs neither the fact records nor the extractor: a warm run
that loads no facts imports neither (PERF: :mod:`castfind.quick`).
"""

from __future__ import annotations

from castfind.core import casts

#: castfind's release (the package's ``__version__``, SARIF's tool version, ``castfind --version``).
__version__ = "0.1.0"

# Bump the number when the extractor's output changes: it is part of the cache key. The table of cast
# methods (which calls are recorded as casts) is part of it too, so a method added there needs no bump.
EXTRACTOR_VERSION = f"22-{casts.digest()}"
