"""Text output of ``castfind where``."""

from __future__ import annotations

from castfind.where import WhereResult


def render_where(res: WhereResult) -> str:
    """Each definition as ``path:line  qualname (kind)``, its chain of hops, then call sites (those in
    tests and benchmarks marked ``(test)``)."""
    out: list[str] = []
    if not res.definitions and not res.unresolved:
        out.append(f"{res.symbol}: not found")
        if res.suggestions:
            out.append(f"  did you mean: {', '.join(res.suggestions)}?")
        return "\n".join(out) + "\n"
    for d in res.definitions:
        out.append(f"{d.path}:{d.line}  {d.qualname}  ({d.kind})  [{d.root}]")
        if d.dynamic:
            out.append(f"    dynamic: {d.reason}")
        for h in d.chain:
            out.append(f"    {h.path}:{h.line}  {h.text}")
    if res.unresolved:
        out.append("unresolved:")
        for u in res.unresolved:
            out.append(f"  {u.path}:{u.line}  {u.reason}")
    out.append(f"call sites ({len(res.call_sites)}):")
    for c in res.call_sites:
        out.append(f"  {c.path}:{c.line}" + ("  (test)" if c.test else ""))
    return "\n".join(out) + "\n"
