"""One file's bytes to its facts: CPython's and libcst's parse, the walk that extracts casts, definitions,
imports and allocations, and the data-only codec the facts are stored in.
"""
