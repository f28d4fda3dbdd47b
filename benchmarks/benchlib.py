"""The pure parts of the benchmark harness: statistics, parsing and tables.

Nothing here runs a command; ``run.py`` measures and this module turns measurements into
numbers and text, so ``tests/test_bench_harness.py`` can check it without real runs.
"""

from __future__ import annotations

import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

#: The grep baseline: a method call that may convert a whole buffer.
CAST_REGEX = r"\.(to|float|half|bfloat16|double|type|copy_)\("

#: Folders castfind's discovery never walks into (mirrors ``castfind.store.discover.SKIP_DIRS``).
#: Kept as a copy so the harness can time any castfind command, even one it cannot import.
SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", "build", "dist", "node_modules", ".tox", ".nox",
     ".mypy_cache", ".pytest_cache", ".ruff_cache", ".venv", "venv", ".eggs", "site-packages"}
)


@dataclass
class Row:
    """One benchmarked task: its timings and what its output counted.

    ``count`` is the number of findings or matches (or a short text such as
    ``"1 def, 4 calls"``); ``error`` is set when a run failed, and the timings are then
    those of the runs that finished before it (often none).
    """

    task: str
    command: str = ""
    walls: list[float] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)  # wait4 ru_maxrss: largest single process
    tree_kb: list[int] = field(default_factory=list)  # sampled sum over the process tree
    count: int | str | None = None
    files: int | None = None
    note: str = ""
    error: str = ""

    @property
    def wall(self) -> float | None:
        """Median wall seconds, or ``None`` when no run finished."""
        return median(self.walls)

    @property
    def peak_rss_mb(self) -> float | None:
        """The highest ru_maxrss over the runs, in MiB."""
        return kb_to_mb(max(self.rss_kb)) if self.rss_kb else None

    @property
    def tree_rss_mb(self) -> float | None:
        """The highest sampled process-tree RSS over the runs, in MiB."""
        return kb_to_mb(max(self.tree_kb)) if self.tree_kb and max(self.tree_kb) > 0 else None


def median(values: list[float]) -> float | None:
    """The median, ``None`` for no values (an even count averages the middle two)."""
    return statistics.median(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or ``None`` when either side is missing or ``b`` is not positive."""
    if a is None or b is None or b <= 0:
        return None
    return a / b


def fmt_ratio(r: float | None) -> str:
    """``0.42x`` (two significant digits below 0.1: ``0.0031x``); ``n/a`` when there is none."""
    if r is None:
        return "n/a"
    return f"{r:.2g}x" if r < 0.1 else f"{r:.2f}x"


def kb_to_mb(kb: int) -> float:
    """Kibibytes (Linux ``ru_maxrss`` and ``VmRSS`` units) to mebibytes."""
    return kb / 1024.0


def maxrss_to_kb(ru_maxrss: int, platform: str) -> int:
    """``ru_maxrss`` in KiB: Linux reports KiB already, macOS reports bytes."""
    return ru_maxrss // 1024 if platform == "darwin" else ru_maxrss


def parse_vmrss_kb(status_text: str) -> int:
    """The ``VmRSS`` of a ``/proc/PID/status`` text in KiB; 0 when absent (a zombie)."""
    m = re.search(r"^VmRSS:\s+(\d+)\s+kB", status_text, re.M)
    return int(m.group(1)) if m else 0


def parse_children(text: str) -> list[int]:
    """PIDs from a ``/proc/PID/task/TID/children`` file (space separated)."""
    return [int(tok) for tok in text.split() if tok.isdigit()]


def parse_cpu_model(cpuinfo_text: str) -> str:
    """The first ``model name`` of ``/proc/cpuinfo`` (``unknown CPU`` when absent)."""
    m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo_text, re.M)
    return m.group(1).strip() if m else "unknown CPU"


def parse_mem_total_gib(meminfo_text: str) -> float | None:
    """``MemTotal`` of ``/proc/meminfo`` in GiB."""
    m = re.search(r"^MemTotal:\s+(\d+)\s+kB", meminfo_text, re.M)
    return int(m.group(1)) / (1024 * 1024) if m else None


def count_lines(text: str) -> int:
    """Non-empty output lines (one per grep match)."""
    return sum(1 for line in text.splitlines() if line.strip())


def walk_py_files(roots: list[str]) -> list[str]:
    """The ``.py`` files castfind's discovery would index under ``roots``, sorted.

    Same rules as ``castfind.store.discover``: skip dot folders, ``SKIP_DIRS``, ``*.egg-info``
    and folders holding a ``pyvenv.cfg``; do not follow folder symlinks. Semgrep is
    given this list file by file, because its own default ``.semgrepignore`` drops
    ``test/`` and ``tests/`` folders and it does not skip dot folders.
    """
    out: set[str] = set()
    for root in roots:
        base = os.path.abspath(root)
        for dirpath, dirnames, filenames in os.walk(base):
            if dirpath != base and "pyvenv.cfg" in filenames:
                dirnames[:] = []
                continue
            dirnames[:] = [d for d in dirnames if not (d in SKIP_DIRS or d.startswith(".") or d.endswith(".egg-info")
                                                       or os.path.islink(os.path.join(dirpath, d)))]
            for name in filenames:
                if name.endswith(".py") and os.path.isfile(os.path.join(dirpath, name)):
                    out.add(os.path.join(dirpath, name))
    return sorted(out)


def grep_exclude_dirs() -> list[str]:
    """``--exclude-dir`` globs that make ``grep -r`` skip what castfind skips."""
    return [".*", "*.egg-info", *sorted(d for d in SKIP_DIRS if not d.startswith("."))]


# -- tables ------------------------------------------------------------------------------

HEADERS = ("task", "wall s (median)", "min s", "runs", "peak RSS MB", "tree RSS MB", "findings/matches",
           "files", "wall vs semgrep")


def _num(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def row_cells(row: Row, semgrep_wall: float | None) -> list[str]:
    """The table cells of one row; an errored row shows ``ERROR`` in place of its count."""
    count = "n/a" if row.count is None else str(row.count)
    if row.error:
        count = "ERROR"
    return [
        row.task,
        _num(row.wall),
        _num(min(row.walls) if row.walls else None),
        str(len(row.walls)),
        _num(row.peak_rss_mb, 0),
        _num(row.tree_rss_mb, 0),
        count,
        "n/a" if row.files is None else str(row.files),
        fmt_ratio(ratio(row.wall, semgrep_wall)) if not row.error else "n/a",
    ]


def format_table(rows: list[Row], semgrep_wall: float | None) -> str:
    """A fixed-width text table, numbers right-aligned."""
    cells = [list(HEADERS)] + [row_cells(r, semgrep_wall) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADERS))]

    def line(c: list[str]) -> str:
        return "  ".join(c[i].ljust(widths[i]) if i == 0 else c[i].rjust(widths[i]) for i in range(len(c)))

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(c) for c in cells[1:]]
    return "\n".join(out)


def format_markdown(rows: list[Row], semgrep_wall: float | None) -> str:
    """The same table in GitHub Markdown (numbers right-aligned)."""
    head = "| " + " | ".join(HEADERS) + " |"
    align = "|" + "|".join([":---"] + ["---:"] * (len(HEADERS) - 1)) + "|"
    body = ["| " + " | ".join(c.replace("|", "\\|") for c in row_cells(r, semgrep_wall)) + " |" for r in rows]
    return "\n".join([head, align, *body])


def errors_text(rows: list[Row]) -> list[str]:
    """One line per failed task, for under the table."""
    return [f"{r.task}: {r.error}" for r in rows if r.error]


def summary_lines(rows: list[Row]) -> list[str]:
    """The headline ratios: castfind cold/warm scan against semgrep on both wheels."""
    by = {r.task: r for r in rows}
    sg = by.get("semgrep")
    sg_ok = sg is not None and not sg.error and sg.wall is not None
    out = []
    for task in ("scan-cold", "scan-warm", "deploy-warm", "scan-edit"):
        r = by.get(task)
        if r is None:
            continue
        if r.error or r.wall is None or not sg_ok:
            out.append(f"castfind {task} / semgrep: wall n/a, peak RSS n/a")
            continue
        out.append(f"castfind {task} / semgrep: wall {fmt_ratio(ratio(r.wall, sg.wall))}, "
                   f"peak RSS {fmt_ratio(ratio(r.peak_rss_mb, sg.peak_rss_mb))}, "
                   f"tree RSS {fmt_ratio(ratio(r.tree_rss_mb, sg.tree_rss_mb))}")
    return out


def machine_paragraph(info: dict[str, str]) -> str:
    """One paragraph describing where the numbers were taken."""
    return (
        f"Measured on {info.get('cpu', 'an unknown CPU')} with {info.get('cores', '?')} cores "
        f"visible to Python (os.cpu_count), {info.get('mem', '?')} of memory, {info.get('os', '?')}; "
        f"Python {info.get('python', '?')}, {info.get('castfind', 'castfind ?')}, "
        f"{info.get('semgrep', 'semgrep not available')}, {info.get('grep', 'grep ?')}. "
        f"Load average at start: {info.get('load', '?')}. "
        f"Each castfind and semgrep run used {info.get('jobs', '?')} worker processes; "
        f"the OS file cache was warmed by reading every file once, and castfind's modules byte-compiled, before timing."
    )


def mem_text(gib: float | None) -> str:
    """``23.4 GiB``."""
    return "unknown memory" if gib is None else f"{gib:.1f} GiB"


_BOX = "\u2500\u2502\u256d\u256e\u256f\u2570 \t"  # rich's panel border characters and blanks


def last_line(text: str, limit: int = 200) -> str:
    """The last line of an error output that holds a word, shortened.

    Tracebacks end with the cause; typer/rich errors are boxed, so border-only lines are
    skipped and borders stripped.
    """
    for ln in reversed(text.splitlines()):
        s = ln.strip(_BOX)
        if any(ch.isalnum() for ch in s):
            s = " ".join(s.split())
            return s if len(s) <= limit else s[: limit - 3] + "..."
    return ""


def pick_edit_file(root: Path, preferred: str) -> Path | None:
    """The file to edit for the incremental run: ``preferred`` or a mid-size file of the root."""
    cand = root / preferred
    if cand.is_file():
        return cand
    files = sorted((p.stat().st_size, str(p)) for p in root.rglob("*.py"))
    return Path(files[len(files) // 2][1]) if files else None
