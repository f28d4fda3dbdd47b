"""Where a constant's value comes from: a comparison with an enum member or a class constant
(``method == AttnForwardMethod.MLA_ROCM``) cannot hold on a deployment when every place in the roots that produces
that member sits under a branch the deployment never takes.

The extractor records every read of a constant-style name outside a comparison (:class:`~castfind.read.facts.Produced`:
an attribute chain whose last part has no lowercase letter, returned, assigned, passed, put in a container, a
default) with the ifs around it, as it does for calls. :meth:`Producers.never` reads those of one member (the files
whose text holds its name, through the identifier index) and answers True only when each is under a guard the
deployment evaluates false, or is an item of a module-level constant (``_ROCM_METHODS = {A.MLA: A.MLA_ROCM}``)
whose every read is (the same question, one level down). Anything else keeps it open: a read under no false
guard, none found at all, a file that cannot be read, a call of the class itself (``Mode(value)`` builds any
member). Computed once per member and scan; and carried between runs (``Producers(index, carried)``,
:meth:`Producers.answers`): the answers depend only on the bindings, the rule data and the files, so the pipeline
stores them in a per-deployment row of the cache, and a warm run of the same deployment over unchanged files neither
builds the identifier index nor decodes a file's facts for them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from castfind.read.facts import Guard, Produced
from castfind.store.index import Index
from castfind.store.words import Words

#: How many module-level constants deep a member is followed (``A.X`` in ``_TABLE``, ``_TABLE`` in ``_OTHER``).
DEPTH = 2

#: A guard's value under the bindings (True, False, None: open) and the bindings that decided it.
Decide = Callable[[Guard], tuple[bool | None, tuple[str, ...]]]


def constant_style(name: str) -> bool:
    """Is ``name`` spelled as a constant or enum member (``MLA_ROCM``, ``_TABLE``): what the extractor records."""
    return name.isupper()


#: How many files' facts are read at once while looking for an open producer (the first one ends the search).
BATCH = 16


class Producers:
    """The reads of constant-style names in an index, asked one member at a time."""

    def __init__(self, index: Index, carried: Iterable[tuple[str, str, tuple[str, ...] | None]] = ()) -> None:
        self.index = index
        self.words = Words(index)
        self._answers: dict[tuple[str, str, int], tuple[str, ...] | None] = {}
        #: :meth:`never`'s answers by (chain, bindings key): those carried from an earlier run, and those computed.
        self._chains: dict[tuple[str, str], tuple[str, ...] | None] = {(c, k): a for c, k, a in carried}
        #: How many answers this run computed (read the index for): none on a warm run of the same deployment.
        self.computed = 0

    def answers(self) -> list[tuple[str, str, tuple[str, ...] | None]]:
        """Every answer of :meth:`never` known now, carried or computed: what the pipeline stores."""
        return [(c, k, a) for (c, k), a in sorted(self._chains.items())]

    def uses(self, name: str) -> Iterator[Produced | None]:
        """The reads whose last part is ``name``, a batch of files at a time (None: a file that may hold one could
        not be read). PERF: a common member (``Mode.DECODE``) is read in hundreds of files, and its first open
        producer settles it: the caller stops there, before the rest are decoded."""
        files = self.words.containing([name])
        for i in range(0, len(files), BATCH):
            for facts in self.index.load_files(files[i:i + BATCH]):
                if facts.error is not None:
                    yield None
                    return
                yield from (p for p in facts.produced if p.text.rsplit(".", 1)[-1] == name)

    def _built(self, cls: str) -> bool:
        """Is the class called anywhere (``Mode(value)``; ``Mode["X"]`` aside): then any member may come of it.
        Read from the text (a call of the name), not the facts: it is asked of every member found never produced."""
        call = re.compile(rb"(?<!class )\b" + re.escape(cls.encode()) + rb"\s*\(")  # not its own class line
        return any(call.search(self.index.data(sf)) for sf in self.words.containing([cls]))

    def never(self, chain: str, decide: Decide, key: str) -> tuple[str, ...] | None:
        """The bindings that keep every producer of ``chain``'s member (``Cls.MEMBER``) off the deployment's
        branches, or None when one may run (open). ``key`` names the bindings ``decide`` applies."""
        parts = chain.split(".")
        if len(parts) < 2 or not constant_style(parts[-1]):
            return None
        if (chain, key) in self._chains:
            return self._chains[chain, key]
        self.computed += 1
        got = self._member(parts[-1], decide, key, 0)
        got = None if got is None or self._built(parts[-2]) else got
        self._chains[chain, key] = got
        return got

    def _member(self, name: str, decide: Decide, key: str, depth: int) -> tuple[str, ...] | None:
        memo = (name, key, depth)
        if memo in self._answers:
            return self._answers[memo]
        self._answers[memo] = None  # a constant that holds itself (directly or not) stays open
        got = self._decide(name, decide, key, depth)
        self._answers[memo] = got
        return got

    def _decide(self, name: str, decide: Decide, key: str, depth: int) -> tuple[str, ...] | None:
        used: list[str] = []
        found = False
        for p in self.uses(name):
            if p is None:
                return None
            found = True
            why = next((u for g in p.guards for v, u in (decide(g),) if v is False), None)
            if why is not None:
                used += why
                continue
            if p.into and depth < DEPTH and constant_style(p.into):
                inner = self._member(p.into, decide, key, depth + 1)
                if inner is not None:
                    used += inner
                    continue
            return None
        return tuple(dict.fromkeys(used)) if found else None
