"""Helpers shared by the test modules (fixtures live in conftest.py, which is never imported by name)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_castfind(*args: str, cwd: Path = REPO, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    """``python -m castfind ARGS`` in a subprocess (exit codes and stderr are part of the contract)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "castfind", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


# A user rule that overlaps CF101 (kv-cache, `.to()`, hot): CF101 comes first in file order, so it takes the line.
OVERLAPPING_KV_RULE = """\
rules:
  - id: CF201
    name: my-kv-cast
    severity: warning
    message: "{expr} casts the {buffer}"
    cast: [to]
    receiver: {buffer: [kv-cache]}
    hot: true
    fix: "Cast the rows."
    examples:
      match: |
        class B:
            def forward_decode(self, q, layer):
                return self.pool.get_key_buffer(layer.layer_id).to(q.dtype)  # match
      no_match: |
        x = 1
"""


def why_on_line(explanations, path: str, line: int) -> tuple[str, ...]:
    """The ``why`` lines of the one cast explained on ``path:line`` (explanations are keyed per cast)."""
    (key,) = [k for k in explanations if k[:2] == (path, line)]
    return explanations[key].why
