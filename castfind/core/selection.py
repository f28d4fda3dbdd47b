"""Rule selection: which rules a scan reports, as ruff's ``select`` / ``ignore`` / ``extend-select`` /
``per-file-ignores`` do.

A *selector* names rules: a rule id (``CF101``), a kebab-case name (``whole-kv-cache-cast-on-hot-path``),
an id prefix (``CF10``, ``CF1``) or ``ALL``. A :class:`Selection` is a list of :class:`Layer`s, the
configuration's first and the command line's on top. Each layer starts from the rules the layer below
enabled (every rule, below the first), or from none when it has its own ``select``; then its selectors
are applied from the least specific to the most specific (``ALL``, then shorter prefixes, then longer
ones, then an exact id or name), ``select``/``extend-select`` adding and ``ignore`` removing, an
``ignore`` after a ``select`` of the same specificity. So ``select = ["CF1"], ignore = ["CF104"]``
reports CF101-CF103, and ``ignore = ["CF1"], select = ["CF104"]`` reports only CF104 of that family.

``per-file-ignores`` maps a glob to selectors that are off in the files it matches. A glob without
``/`` matches the file's name; one with ``/`` the whole path (``*`` crosses ``/``), either relative to
the file's root or to the working folder.

Pure: :func:`castfind.pipeline.post` applies :meth:`Selection.keeps` once, to every finding (CF001
and CF900 included), before costs and the baseline.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Protocol

__all__ = ["ALL", "Layer", "NamedRule", "Selection", "SelectionError", "rule_matches", "specificity"]

#: The selector that names every rule.
ALL = "ALL"


class SelectionError(ValueError):
    """A selector that names no rule (a typo would silently turn every check off); ``where`` says which
    option or config key held it."""


class NamedRule(Protocol):
    """What selection reads of a rule (:class:`castfind.core.rules.Rule` is one)."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...


def specificity(selector: str) -> int:
    """How specific ``selector`` is: ``ALL`` 0, an id prefix its length, an exact id or name more."""
    if selector == ALL:
        return 0
    if not selector.upper().startswith("CF") or not selector[2:].isdigit():
        return 100  # a kebab name: exact
    return len(selector)


def rule_matches(selector: str, rule_id: str, rule_name: str) -> bool:
    """Whether ``selector`` names the rule ``rule_id`` / ``rule_name``."""
    if selector in (ALL, rule_name):
        return True
    s = selector.upper()
    return s.startswith("CF") and s[2:].isdigit() and rule_id.upper().startswith(s)


@dataclass(frozen=True, slots=True)
class Layer:
    """One source of selectors: ``select`` (``None``: keep what the layer below enabled), ``extend_select``,
    ``ignore``. ``where`` names the source in errors (``pyproject.toml [tool.castfind]``; empty: the command
    line, whose options are named ``--select`` and so on)."""

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    where: str = ""

    def apply(self, enabled: set[str], rules: Iterable[NamedRule]) -> set[str]:
        """The rule ids on after this layer, given those on below it."""
        rules = list(rules)
        on = set() if self.select is not None else set(enabled)
        steps = [(specificity(s), 0, s, True) for s in (*(self.select or ()), *self.extend_select)]
        steps += [(specificity(s), 1, s, False) for s in self.ignore]
        for _, _, selector, add in sorted(steps):
            for r in rules:
                if rule_matches(selector, r.id, r.name):
                    (on.add if add else on.discard)(r.id)
        return on

    def selectors(self) -> Iterable[tuple[str, str]]:
        """(option, selector) of every selector in this layer."""
        for option, items in (("select", self.select or ()), ("extend-select", self.extend_select),
                              ("ignore", self.ignore)):
            for s in items:
                yield option, s


@dataclass(frozen=True, slots=True)
class Selection:
    """The layers (configuration first, command line last) and the per-file ignores (glob, selectors)."""

    layers: tuple[Layer, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    per_file_where: str = ""

    @property
    def trivial(self) -> bool:
        """Whether this selection keeps every finding (nothing selected, ignored or ignored per file)."""
        return not self.per_file_ignores and all(
            layer.select in (None, (ALL,)) and not layer.ignore for layer in self.layers)

    def check(self, rules: Iterable[NamedRule]) -> None:
        """Raise :class:`SelectionError` for the first selector that names none of ``rules``."""
        rules = list(rules)
        given = [(f"{layer.where} {option}" if layer.where else f"--{option}", s)
                 for layer in self.layers for option, s in layer.selectors()]
        given += [(f"{self.per_file_where} per-file-ignores {glob!r}", s)
                  for glob, selectors in self.per_file_ignores for s in selectors]
        for where, s in given:
            if not any(rule_matches(s, r.id, r.name) for r in rules):
                raise SelectionError(f"{where.strip()}: {s!r} names no rule — give a rule id (CF101), a prefix "
                                     "(CF10), a rule name or ALL; 'castfind rules list' lists them")

    def enabled(self, rules: Iterable[NamedRule]) -> frozenset[str]:
        """The ids of ``rules`` the layers leave on."""
        rules = list(rules)
        on = {r.id for r in rules}
        for layer in self.layers:
            on = layer.apply(on, rules)
        return frozenset(on)

    def ignored_in(self, root: str, path: str) -> tuple[str, ...]:
        """The selectors ``per-file-ignores`` turns off in ``path`` (relative to ``root``)."""
        rel = path.replace("\\", "/").removeprefix("./")
        here = os.path.relpath(os.path.join(root, path)).replace("\\", "/") if root else rel
        name = rel.rsplit("/", 1)[-1]
        out: list[str] = []
        for glob, selectors in self.per_file_ignores:
            g = glob.removeprefix("./")
            hit = fnmatchcase(rel, g) or fnmatchcase(here, g) if "/" in g else fnmatchcase(name, g)
            if hit:
                out.extend(selectors)
        return tuple(out)

    def keeps(self, enabled: frozenset[str], rule_id: str, rule_name: str, root: str, path: str) -> bool:
        """Whether a finding of ``rule_id`` in ``path`` is reported, ``enabled`` being :meth:`enabled`'s answer."""
        if rule_id not in enabled:
            return False
        return not any(rule_matches(s, rule_id, rule_name) for s in self.ignored_in(root, path))
