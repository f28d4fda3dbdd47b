"""Operand guards: a branch test on the cast's own operand, judged with the dtype the operand is known to have.

``if y.dtype == torch.bfloat16: return fast(x, y)`` then ``return slow(x, y.float())``: the cast runs only when
``y`` is not bf16. When the operand's dtype is known (the cost stage reads it from the allocation the operand
comes from: its ``dtype=`` or the getter's ``.view(dtype)``, a literal dtype) and a test around the cast is false
for it, the cast never runs there (:func:`never_runs`). A test is read with three values (true, false, unknown):
``OP.dtype ==`` / ``!=`` / ``is`` / ``is not`` a literal dtype, ``OP.dtype in`` / ``not in`` a tuple of them, joined
with ``not``, ``and``, ``or``. Anything else is unknown: a test of the device (``OP.is_cuda``,
``OP.device.type == "cuda"``: an allocation seldom says where it lives, and the runtime decides), a test of
another name, or of the dtype of something else (``x.dtype`` beside the operand ``y``). Unknown decides nothing:
the cast is judged as before.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

from castfind.read.facts import Guard

Canonical = Callable[[str], str | None]  # a dtype as written → its canonical literal, or None when not a literal


def operand_test(test: str, operand: str, dtype: str, canonical: Canonical) -> bool | None:
    """The value of ``test`` when ``operand`` (as rendered) has the literal ``dtype``; None when unknown."""
    try:
        tree = ast.parse(test, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    return _value(tree, operand, dtype, canonical)


def never_runs(guards: Iterable[Guard], operand: str, dtype: str, canonical: Canonical) -> Guard | None:
    """The first guard around a cast of ``operand`` that is false when the operand has ``dtype`` (the cast is on
    the side of the ``if`` that is then never taken), or None."""
    for g in guards:
        v = operand_test(g.test, operand, dtype, canonical)
        if v is not None and v == g.negated:
            return g
    return None


def _value(node: ast.expr, operand: str, dtype: str, canonical: Canonical) -> bool | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        v = _value(node.operand, operand, dtype, canonical)
        return None if v is None else not v
    if isinstance(node, ast.BoolOp):
        vals = [_value(v, operand, dtype, canonical) for v in node.values]
        stop = isinstance(node.op, ast.Or)  # `or`: one true decides; `and`: one false decides
        if stop in vals:
            return stop
        return None if None in vals else not stop
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return _compare(node.left, node.ops[0], node.comparators[0], operand, dtype, canonical)
    return None


def _compare(left: ast.expr, op: ast.cmpop, right: ast.expr, operand: str, dtype: str,
             canonical: Canonical) -> bool | None:
    if not _is_dtype_of(left, operand):
        if isinstance(op, (ast.In, ast.NotIn)) or not _is_dtype_of(right, operand):
            return None
        left, right = right, left  # `torch.float32 == y.dtype`
    if isinstance(op, (ast.Eq, ast.Is, ast.NotEq, ast.IsNot)):
        other = canonical(ast.unparse(right))
        if other is None:
            return None
        return (other == dtype) == isinstance(op, (ast.Eq, ast.Is))
    if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        items = [canonical(ast.unparse(e)) for e in right.elts]
        if any(i is None for i in items):
            return None
        return (dtype in items) == isinstance(op, ast.In)
    return None


def _is_dtype_of(node: ast.expr, operand: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "dtype" and ast.unparse(node.value) == operand


__all__ = ["never_runs", "operand_test"]
