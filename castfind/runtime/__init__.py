"""The runtime side of castfind: record real casts, import profiler traces, join them to findings.

Only :mod:`castfind.runtime.recorder` imports torch; the trace reader, the profiler
importer and the join are plain Python so the static tool never needs torch.
"""
