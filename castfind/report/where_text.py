"""Text output of ``castfind where`` (and what the command writes, :func:`where_output`)."""

from __future__ import annotations

import json

from castfind.core.names import shown
from castfind.store.discover import describe_packages
from castfind.where.answer import WhereResult


def where_output(res: WhereResult, json_out: bool) -> tuple[list[str], str, list[str], int]:
    """Everything ``castfind where`` writes for ``res``, in order: stderr's lines before the answer (the
    packages indexed), stdout's text, stderr's lines after it (the diagnostics, a suggestion with
    ``--json``) and the exit code (1: nothing found). Pure: :mod:`castfind.cli` and :mod:`castfind.quick`
    print it."""
    line = describe_packages(res.packages)
    head = [f"castfind: {line}"] if line is not None else []
    out = json.dumps(res.to_dict(), indent=2, allow_nan=False) + "\n" if json_out else render_where(res)
    tail = [f"castfind: {d}" for d in res.diagnostics]  # Diagnostic.__str__ escapes
    if res.definitions or res.unresolved:
        return head, out, tail, 0
    if json_out and res.suggestions:
        tail.append(f"castfind: {res.symbol!r} not found; did you mean: {', '.join(res.suggestions)}?")
    return head, out, tail, 1


def render_where(res: WhereResult) -> str:
    """Each definition as ``path:line  qualname (kind)``, its chain of hops, then call sites (those in
    tests and benchmarks marked ``(test)``)."""
    out: list[str] = []
    if not res.definitions and not res.unresolved:
        out.append(f"{res.symbol}: not found")
        if res.suggestions:
            out.append(f"  did you mean: {', '.join(res.suggestions)}?")
        return "".join(shown(line) + "\n" for line in out)
    for d in res.definitions:
        target = f" → {d.target}" if d.target else ""
        out.append(f"{d.path}:{d.line}  {d.qualname}  ({d.kind}{target})  [{d.root}]")
        if d.dynamic:
            out.append(f"    dynamic: {d.reason}")
        for h in d.chain:
            out.append(f"    {h.path}:{h.line}  {h.text}")
    if res.unresolved:
        out.append("unresolved:")
        for u in res.unresolved:
            out.append(f"  {u.path}:{u.line}  {u.reason}" if u.line else f"  {u.path}  {u.reason}")
    out.append(f"call sites ({len(res.call_sites)}):")
    for c in res.call_sites:
        out.append(f"  {c.path}:{c.line}" + ("  (test)" if c.test else ""))
    return "".join(shown(line) + "\n" for line in out)  # one line each, whatever a file is called
