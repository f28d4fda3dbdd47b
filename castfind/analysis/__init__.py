"""Facts to findings: name resolution, receivers, the call graph and hot paths, provenance (the one back-walk),
summaries across calls, the checker, the engine (scan), ranking and cost.
"""
