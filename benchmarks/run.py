#!/usr/bin/env python3
"""castfind against semgrep and grep on the real sglang and flashinfer wheels (``make bench``).

Runs, on ``CORPUS/sglang`` and ``CORPUS/flashinfer`` together: a ``grep -rn`` for cast calls,
semgrep OSS with the same plain rule (``benchmarks/semgrep_casts.yaml``), and castfind
``scan`` (cold cache, warm cache, warm after editing one file) and ``where`` (cold, warm); and
``castfind scan CHECKOUT`` (cold, warm) on the checkout-shaped tree ``CORPUS/checkout`` (sglang under
``python/``, sgl-kernel under ``sgl-kernel/python/``, a ``test/`` and a ``benchmark/``); and, on a git
repository holding sglang whose last commit changed one file, a warm ``scan`` (``repo-warm``) against a
warm ``scan --baseline-commit HEAD~1`` (``repo-baseline``, whose note gives the ratio of the two).
Every command is timed as a child process: wall seconds (median of ``--repeat`` runs),
peak RSS from ``os.wait4`` (the largest single process of its tree) and a sampled sum of
RSS over the whole process tree. Findings or matches are counted from each tool's output.

Usage: python benchmarks/run.py --corpus .corpus [--quick] [--repeat 3] [--only grep,where]
       [--markdown PATH] [--json PATH] [--castfind "CMD"] [--semgrep PATH] [--checkout PATH]

Exit status: 0 when every selected task ran, 1 when a castfind or grep task failed (the
table still prints), 2 on bad arguments. Semgrep that cannot be installed or run is
reported and its ratios become "n/a"; that alone does not fail the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402  (a sibling module; benchmarks/ is not a package)

REPO = Path(__file__).resolve().parent.parent
RULE = REPO / "benchmarks" / "semgrep_casts.yaml"
BENCH_VENV = REPO / ".venv-bench"
EDIT_FILE = "sglang/srt/layers/attention/flashinfer_mla_backend.py"
SYMBOL = "flashinfer_cutlass_fused_moe"
#: The deployment of issue 35's story: DeepSeek-V3 on NVIDIA GPUs, FlashInfer MLA, an FP8 KV cache.
DEPLOY = ["--model-config", str(REPO / "fixtures" / "deploy_configs" / "deepseek_v3_like.json"), "--platform", "cuda",
          "--attention-backend", "flashinfer", "--kv-cache-dtype", "fp8_e4m3", "--kv-tokens", "495552"]
TASKS = ("grep", "semgrep", "semgrep-sglang", "semgrep-flashinfer",
         "where-cold", "where-warm", "scan-cold", "scan-warm", "deploy-warm", "scan-edit", "checkout-cold", "checkout-warm",
         "repo-warm", "repo-baseline")
PER_WHEEL = {"semgrep-sglang", "semgrep-flashinfer"}
EXPENSIVE = {"semgrep", "semgrep-sglang", "semgrep-flashinfer", "scan-cold", "checkout-cold"}
SEMGREP_ENV = {"SEMGREP_ENABLE_VERSION_CHECK": "0", "SEMGREP_SEND_METRICS": "off"}


def log(msg: str) -> None:
    """Progress goes to stderr so stdout holds only the report."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# -- measuring one child process ----------------------------------------------------------

@dataclass
class Sample:
    """One finished child: exit code, wall seconds, RSS figures in KiB, its output."""

    rc: int
    wall: float
    maxrss_kb: int
    tree_kb: int
    out: str
    err: str


class TreeSampler(threading.Thread):
    """Sums VmRSS over a process and its descendants every ``interval`` seconds.

    ``wait4`` only gives the largest single process; castfind and semgrep both run worker
    processes, so this shows what the whole tree held at once (shared pages count twice).
    """

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak_kb = pid, interval, 0
        self.stop = threading.Event()

    def _tree(self, pid: int) -> list[int]:
        out, todo = [], [pid]
        while todo:
            p = todo.pop()
            out.append(p)
            try:
                for tid in os.listdir(f"/proc/{p}/task"):
                    with open(f"/proc/{p}/task/{tid}/children") as fh:
                        todo.extend(bl.parse_children(fh.read()))
            except OSError:  # gone already, or no /proc (not Linux): nothing to add
                continue
        return out

    def run(self) -> None:
        while not self.stop.is_set():
            total = 0
            for p in self._tree(self.pid):
                try:
                    with open(f"/proc/{p}/status") as fh:
                        total += bl.parse_vmrss_kb(fh.read())
                except OSError:
                    continue
            self.peak_kb = max(self.peak_kb, total)
            self.stop.wait(self.interval)


def measure(cmd: list[str], *, cwd: str, env: dict[str, str] | None = None, timeout: float | None = None) -> Sample:
    """Run ``cmd`` once; reap it with ``os.wait4`` to get its (and its reaped children's) rusage."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.perf_counter()
        try:
            p = subprocess.Popen(cmd, stdout=fo, stderr=fe, cwd=cwd, env=env, start_new_session=True)
        except OSError as e:
            return Sample(127, 0.0, 0, 0, "", f"cannot start {cmd[0]}: {e}")
        sampler = TreeSampler(p.pid)
        sampler.start()
        timer = threading.Timer(timeout, lambda: os.killpg(p.pid, 9)) if timeout else None
        if timer:
            timer.start()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so Popen must not wait
        if timer:
            timer.cancel()
        sampler.stop.set()
        sampler.join()
        fo.seek(0)
        fe.seek(0)
        return Sample(p.returncode, wall, bl.maxrss_to_kb(ru.ru_maxrss, sys.platform), sampler.peak_kb,
                      fo.read().decode("utf-8", "replace"), fe.read().decode("utf-8", "replace"))


# -- the run ---------------------------------------------------------------------------------

Counter = Callable[[Sample], "tuple[int | str | None, int | None, str]"]


class Bench:
    """State shared by the tasks: roots, temp folders, tool commands, prepared caches."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        corpus = Path(args.corpus).resolve()
        self.sglang, self.flashinfer = str(corpus / "sglang"), str(corpus / "flashinfer")
        self.checkout = str(Path(args.checkout).resolve() if args.checkout else corpus / "checkout")
        self.tmp = tempfile.mkdtemp(prefix="castfind-bench-")
        self.castfind = shlex.split(args.castfind) if args.castfind else [sys.executable, "-m", "castfind"]
        self.jobs = str(args.jobs)
        self.caches: dict[str, str] = {}  # "scan"/"where" -> a warm cache dir
        self.broken: dict[str, str] = {}  # "scan"/"where" -> why its cold run failed
        self.semgrep: str | None = None
        self.semgrep_problem = ""
        self.files = bl.walk_py_files([self.sglang, self.flashinfer])
        self.rows: list[bl.Row] = []
        self.repo_dir: str | None = None  # the git repository of the repo-* rows, built on first use
        self.repo_problem = ""
        self.repo_cache: str | None = None

    def repeats(self, task: str) -> int:
        return 1 if self.args.quick and task in EXPENSIVE else self.args.repeat

    def fresh_dir(self, name: str) -> str:
        return tempfile.mkdtemp(prefix=f"{name}-", dir=self.tmp)

    def run_task(self, row: bl.Row, n: int, make_cmd: Callable[[int], list[str]], count: Counter,
                 ok_rcs: tuple[int, ...] = (0, 1), env: dict[str, str] | None = None,
                 before: Callable[[int], None] | None = None, cwd: str | None = None) -> bl.Row:
        """Run a command ``n`` times (stopping at the first failure) and fill ``row``."""
        base_note = row.note
        for i in range(n):
            if before:
                before(i)
            cmd = make_cmd(i)
            row.command = shorten(cmd)
            s = measure(cmd, cwd=cwd or self.tmp, env=env, timeout=self.args.timeout)
            crashed = "Traceback (most recent call last)" in s.err  # Python exits 1 on a crash, 1 is also "findings"
            if s.rc not in ok_rcs or crashed:
                what = "crashed" if crashed else "failed"
                row.error = (f"{what} after {s.wall:.0f} s, exit {s.rc}: "
                             f"{bl.last_line(s.err) or bl.last_line(s.out) or 'no output'}")
                log(f"{row.task} run {i + 1}/{n} FAILED ({row.error})")
                log(f"{row.task} stderr tail:\n{s.err[-3000:]}")
                break
            try:
                row.count, row.files, note = count(s)
                row.note = "; ".join(x for x in (base_note, note) if x)
            except (ValueError, KeyError, TypeError) as e:
                row.error = f"could not read its output ({type(e).__name__}: {e}); stderr: {bl.last_line(s.err)}"
                log(f"{row.task}: {row.error}")
                break
            row.walls.append(s.wall)
            row.rss_kb.append(s.maxrss_kb)
            row.tree_kb.append(s.tree_kb)
            log(f"{row.task} run {i + 1}/{n}: {s.wall:.2f} s, {bl.kb_to_mb(s.maxrss_kb):.0f} MB, count {row.count}")
        return row

    # -- grep / semgrep ---------------------------------------------------------------

    def grep(self) -> bl.Row:
        # Relative roots, run from the corpus folder: GNU grep matches --exclude-dir globs against
        # command-line folders too, so `.*` would skip a corpus kept under a dot folder (.corpus/).
        base = Path(self.sglang).parent
        cmd = ["grep", "-rnE", "--include=*.py", *[f"--exclude-dir={d}" for d in bl.grep_exclude_dirs()],
               bl.CAST_REGEX, os.path.relpath(self.sglang, base), os.path.relpath(self.flashinfer, base)]
        env = {**os.environ, "LC_ALL": "C"}
        return self.run_task(bl.Row("grep"), self.repeats("grep"), lambda i: cmd,
                             lambda s: (bl.count_lines(s.out), len(self.files), ""), env=env, cwd=str(base))

    def ensure_semgrep(self) -> None:
        """Find semgrep, or install it once into .venv-bench (never into the main venv)."""
        exe = self.args.semgrep or str(BENCH_VENV / "bin" / "semgrep")
        if not self.args.semgrep and not Path(exe).exists():
            log(f"installing semgrep into {BENCH_VENV} (once) ...")
            steps = [[sys.executable, "-m", "venv", str(BENCH_VENV)],
                     [str(BENCH_VENV / "bin" / "pip"), "install", "--quiet", "semgrep"]]
            for step in steps:
                r = subprocess.run(step, capture_output=True, text=True)
                if r.returncode != 0:
                    self.semgrep_problem = f"`{shorten(step)}` failed: {bl.last_line(r.stderr + r.stdout)}"
                    return
        try:
            r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120,
                               env={**os.environ, **SEMGREP_ENV}, cwd=self.tmp)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.semgrep_problem = f"cannot run {exe}: {e}"
            return
        if r.returncode != 0:
            self.semgrep_problem = f"`{exe} --version` exit {r.returncode}: {bl.last_line(r.stderr)}"
            return
        self.semgrep = exe

    def semgrep_task(self, task: str, roots: list[str]) -> bl.Row:
        row = bl.Row(task)
        if self.semgrep is None:
            row.error = f"semgrep unavailable: {self.semgrep_problem}"
            return row
        tree = self.semgrep_tree()
        names = [Path(r).name for r in roots]
        expected = sum(1 for f in self.files if any(f.startswith(r + os.sep) for r in roots))
        # --max-target-bytes 0 keeps the one file over 1 MB; --timeout 0 skips no file for time.
        cmd = [self.semgrep, "scan", "--config", str(RULE), "--json", "--quiet", "--metrics=off",
               "--disable-version-check", "--oss-only", "--no-git-ignore", "--project-root", ".",
               "--max-target-bytes", "0", "--timeout", "0", "-j", self.jobs, *names]

        def count(s: Sample) -> tuple[int, int, str]:
            d = json.loads(s.out)
            errs = d.get("errors") or []
            scanned = len(d["paths"]["scanned"])
            notes = [f"{len(errs)} semgrep errors (first: {str(errs[0].get('message', errs[0]))[:80]})"] if errs else []
            if scanned != expected:
                notes.append(f"semgrep scanned {scanned} files, castfind's discovery selects {expected}")
            return len(d["results"]), scanned, "; ".join(notes)

        return self.run_task(row, self.repeats(task), lambda i: cmd, count,
                             env={**os.environ, **SEMGREP_ENV}, cwd=tree)

    def semgrep_tree(self) -> str:
        """A tree holding exactly castfind's files (hard links, else copies), for semgrep.

        Semgrep scans folders faster than long lists of files (about 1.7x in a trial here),
        but on its own it would pick other files than castfind: with no ``.semgrepignore``
        it applies a built-in one that drops ``test/`` and ``tests/`` folders, and it walks
        dot folders that castfind skips. So it scans a mirror of the selected files with an
        empty ``.semgrepignore`` at the project root.
        """
        tree = Path(self.tmp) / "semgrep-tree"
        if tree.exists():
            return str(tree)
        for root in (self.sglang, self.flashinfer):
            for f in self.files:
                if not f.startswith(root + os.sep):
                    continue
                dest = tree / Path(root).name / os.path.relpath(f, root)
                dest.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(f, dest)
                except OSError:  # another file system: copy
                    shutil.copyfile(f, dest)
        (tree / ".semgrepignore").write_text("# empty on purpose: scan every file given, as castfind does\n")
        return str(tree)

    # -- castfind -----------------------------------------------------------------------

    def scan_cmd(self, roots: list[str], cache: str) -> list[str]:
        return [*self.castfind, "scan", *roots, "--jobs", self.jobs, "--cache-dir", cache, "--json"]

    def where_cmd(self, cache: str) -> list[str]:
        return [*self.castfind, "where", SYMBOL, "--root", self.sglang, "--root", self.flashinfer,
                "--jobs", self.jobs, "--cache-dir", cache, "--json"]

    def count_scan(self, s: Sample) -> tuple[int, int | None, str]:
        d = json.loads(s.out)
        files = (d.get("stats") or {}).get("files")
        files = files if isinstance(files, int) else None
        note = f"castfind scanned {files} files, the harness listed {len(self.files)}" \
            if files is not None and files != len(self.files) else ""
        return len(d["findings"]), files, note

    @staticmethod
    def count_checkout(s: Sample) -> tuple[int, int | None, str]:
        """Findings reported (production code), files indexed, and how many the scope left out."""
        d = json.loads(s.out)
        stats = d.get("stats") or {}
        files = stats.get("files") if isinstance(stats.get("files"), int) else None
        return len(d["findings"]), files, f"{stats.get('out_of_scope', 0)} more in tests/benchmarks, not reported"

    def counter(self, kind: str) -> Counter:
        return {"scan": self.count_scan, "checkout": self.count_checkout}.get(kind, self.count_where)

    @staticmethod
    def count_where(s: Sample) -> tuple[str, None, str]:
        d = json.loads(s.out)
        return f"{len(d['definitions'])} def, {len(d['call_sites'])} calls", None, ""

    def kind_cmd(self, kind: str, cache: str) -> list[str]:
        """The ``scan`` or ``where`` command over both wheels, or ``scan`` of the checkout, with this cache folder."""
        if kind == "checkout":
            return self.scan_cmd([self.checkout], cache)
        return self.scan_cmd([self.sglang, self.flashinfer], cache) if kind == "scan" else self.where_cmd(cache)

    def missing(self, kind: str, row: bl.Row) -> bool:
        """A checkout row without a checkout says how to build one."""
        if kind == "checkout" and not (Path(self.checkout) / ".complete").exists():
            row.error = f"{self.checkout} is missing; build it with `make corpus` (scripts/fetch_corpus.py DEST)"
            return True
        return False

    def cold(self, kind: str) -> bl.Row:
        """Each run gets a fresh, empty cache folder."""
        dirs: list[str] = []

        def cmd(i: int) -> list[str]:
            dirs.append(self.fresh_dir(f"{kind}-cold"))
            return self.kind_cmd(kind, dirs[-1])

        row = bl.Row(f"{kind}-cold")
        if self.missing(kind, row):
            self.broken[kind] = row.error or ""
            return row
        row = self.run_task(row, self.repeats(f"{kind}-cold"), cmd, self.counter(kind))
        if row.walls:
            self.caches[kind] = dirs[len(row.walls) - 1]  # the last cold run that finished
        elif row.error:
            self.broken[kind] = row.error
        return row

    def warm_cache(self, kind: str, row: bl.Row) -> str | None:
        """The cache a cold run left, or one filled now by an untimed run."""
        if kind in self.caches:
            return self.caches[kind]
        if kind in self.broken:  # the same command just failed cold; do not run it again
            row.error = f"not run: {kind}-cold failed ({self.broken[kind]})"
            return None
        d = self.fresh_dir(f"{kind}-prep")
        cmd = self.kind_cmd(kind, d)
        log(f"{row.task}: filling a cache with one untimed cold run")
        s = measure(cmd, cwd=self.tmp, timeout=self.args.timeout)
        if s.rc not in (0, 1):
            row.error = f"preparing the cache: exit {s.rc}: {bl.last_line(s.err) or 'no output'}"
            self.broken[kind] = row.error
            return None
        row.note = "cache filled by an untimed run"
        self.caches[kind] = d
        return d

    def warm(self, kind: str) -> bl.Row:
        row = bl.Row(f"{kind}-warm")
        if self.missing(kind, row):
            return row
        cache = self.warm_cache(kind, row)
        if cache is None:
            return row
        return self.run_task(row, self.repeats(row.task), lambda i: self.kind_cmd(kind, cache), self.counter(kind))

    def deploy_warm(self) -> bl.Row:
        """Warm scan of both wheels as one deployment (``DEPLOY``), on the scan's warm cache; one untimed run
        first settles what the deployment adds to the cache."""
        row = bl.Row("deploy-warm")
        cache = self.warm_cache("scan", row)
        if cache is None:
            return row
        cmd = [*self.scan_cmd([self.sglang, self.flashinfer], cache), *DEPLOY]
        s = measure(cmd, cwd=self.tmp, timeout=self.args.timeout)
        if s.rc not in (0, 1):
            row.error = f"settling the deployment: exit {s.rc}: {bl.last_line(s.err) or 'no output'}"
            return row
        row = self.run_task(row, self.repeats("deploy-warm"), lambda i: cmd, self.count_scan)
        row.note = (row.note + "; " if row.note else "") + "DeepSeek-V3-like config, cuda, flashinfer, fp8_e4m3"
        return row

    def scan_edit(self) -> bl.Row:
        """Warm scan of a copy of sglang after appending one comment line to one file."""
        row = bl.Row("scan-edit")
        cache = self.warm_cache("scan", row)
        if cache is None:
            return row
        copy = Path(self.tmp) / "edit" / "sglang"
        shutil.copytree(self.sglang, copy, symlinks=True)
        target = bl.pick_edit_file(copy, EDIT_FILE)
        if target is None:
            row.error = "no .py file to edit in the sglang copy"
            return row
        roots = [str(copy), self.flashinfer]
        # The copy lives at another path, so settle the cache on it first (untimed).
        s = measure(self.scan_cmd(roots, cache), cwd=self.tmp, timeout=self.args.timeout)
        if s.rc not in (0, 1):
            row.error = f"scanning the copy: exit {s.rc}: {bl.last_line(s.err) or 'no output'}"
            return row

        def edit(i: int) -> None:
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(f"# castfind bench: edit {i + 1}\n")

        row = self.run_task(row, self.repeats("scan-edit"), lambda i: self.scan_cmd(roots, cache),
                            self.count_scan, before=edit)
        row.note = (row.note + "; " if row.note else "") + f"edited {target.relative_to(copy.parent)}"
        return row

    # -- a git repository: new findings only, against the commit before --------------------

    def repo(self) -> str | None:
        """A git repository holding a copy of sglang in two commits, the second changing one file (once)."""
        if self.repo_dir is not None or self.repo_problem:
            return self.repo_dir
        repo = Path(self.tmp) / "repo"
        shutil.copytree(self.sglang, repo / "sglang", symlinks=True)
        target = bl.pick_edit_file(repo / "sglang", EDIT_FILE)
        env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid",
               "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid"}

        def git(*a: str) -> None:
            subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, env=env)

        try:
            if target is None:
                raise OSError("no .py file to edit in the sglang copy")
            git("init", "-q")
            git("add", "-A")
            git("commit", "-q", "-m", "sglang")
            with open(target, "a", encoding="utf-8") as fh:
                fh.write("\n\ndef castfind_bench_added(x):\n    return x.float()\n")
            git("commit", "-q", "-am", "one file changed")
        except (OSError, subprocess.CalledProcessError) as e:
            self.repo_problem = f"building the git repository: {e}"
            return None
        self.repo_dir = str(repo)
        return self.repo_dir

    def repo_cmd(self, cache: str, baseline: bool) -> list[str]:
        return self.scan_cmd([str(Path(self.repo_dir or "") / "sglang")], cache) + \
            (["--baseline-commit", "HEAD~1"] if baseline else [])

    def repo_task(self, baseline: bool) -> bl.Row:
        """Warm scans of the repository, with and without ``--baseline-commit HEAD~1``; one untimed
        ``--baseline-commit`` run fills the cache for both (the work tree and the tree at HEAD~1)."""
        row = bl.Row("repo-baseline" if baseline else "repo-warm")
        if self.repo() is None:
            row.error = self.repo_problem
            return row
        if self.repo_cache is None:
            d = self.fresh_dir("repo")
            log(f"{row.task}: filling a cache with one untimed --baseline-commit run")
            s = measure(self.repo_cmd(d, True), cwd=self.tmp, timeout=self.args.timeout)
            if s.rc not in (0, 1):
                self.repo_problem = f"preparing the cache: exit {s.rc}: {bl.last_line(s.err) or 'no output'}"
                row.error = self.repo_problem
                return row
            self.repo_cache = d
        cache = self.repo_cache
        def count(s: Sample) -> tuple[int, int | None, str]:
            d = json.loads(s.out)
            files = (d.get("stats") or {}).get("files")
            return len(d["findings"]), files if isinstance(files, int) else None, ""

        row = self.run_task(row, self.repeats(row.task), lambda i: self.repo_cmd(cache, baseline), count,
                            cwd=self.repo_dir)
        plain = next((r for r in self.rows if r.task == "repo-warm" and r.wall), None)
        if baseline and row.wall and plain and plain.wall:
            row.note = (row.note + "; " if row.note else "") + \
                f"{row.wall / plain.wall:.2f}x the warm scan of the same repository (repo-warm)"
        return row

    # -- everything ---------------------------------------------------------------------

    def machine(self) -> dict[str, str]:
        def read(path: str) -> str:
            try:
                return Path(path).read_text()
            except OSError:
                return ""

        def version(cmd: list[str], env: dict[str, str] | None = None) -> str | None:
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.tmp, env=env)
            except (OSError, subprocess.TimeoutExpired):
                return None
            return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None

        cf = version([*self.castfind, "--version"])
        # The checkout's commit says which code ran only when the default command runs this checkout's castfind.
        commit = None if self.args.castfind else version(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
        sg = version([self.semgrep, "--version"], {**os.environ, **SEMGREP_ENV}) if self.semgrep else None
        load = os.getloadavg() if hasattr(os, "getloadavg") else None
        return {
            "cpu": bl.parse_cpu_model(read("/proc/cpuinfo")),
            "cores": str(os.cpu_count()),
            "mem": bl.mem_text(bl.parse_mem_total_gib(read("/proc/meminfo"))),
            "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(),
            "castfind": (cf or "castfind (version unknown)") + (f" at commit {commit}" if commit else "")
                        + (f" run as `{self.args.castfind}`" if self.args.castfind else ""),
            "semgrep": f"semgrep {sg} (OSS)" if sg else "semgrep not available",
            "grep": version(["grep", "--version"]) or "grep",
            "load": " / ".join(f"{x:.2f}" for x in load) if load else "n/a",
            "jobs": self.jobs,
        }

    def warm_file_cache(self) -> None:
        t0 = time.perf_counter()
        size = 0
        for f in self.files:
            with open(f, "rb") as fh:
                size += len(fh.read())
        log(f"read {len(self.files)} files ({size / 2**20:.0f} MB) to warm the OS file cache "
            f"in {time.perf_counter() - t0:.1f} s")

    def compile_castfind(self) -> None:
        """Byte-compile castfind's own modules once, as ``pip install`` does. An editable install on a
        machine with PYTHONDONTWRITEBYTECODE set would otherwise compile them in every timed run, which an
        installed castfind never does (the dependencies in site-packages were compiled by pip)."""
        import compileall
        t0 = time.perf_counter()
        compileall.compile_dir(str(REPO / "castfind"), quiet=1)
        log(f"byte-compiled castfind's modules in {time.perf_counter() - t0:.1f} s")

    def run(self, tasks: list[str]) -> None:
        self.warm_file_cache()
        self.compile_castfind()
        if any(t.startswith("semgrep") for t in tasks):
            self.ensure_semgrep()
            if self.semgrep is None:
                log(f"SEMGREP UNAVAILABLE: {self.semgrep_problem}; its rows and the ratios will be n/a")
        steps: dict[str, Callable[[], bl.Row]] = {
            "grep": self.grep,
            "semgrep": lambda: self.semgrep_task("semgrep", [self.sglang, self.flashinfer]),
            "semgrep-sglang": lambda: self.semgrep_task("semgrep-sglang", [self.sglang]),
            "semgrep-flashinfer": lambda: self.semgrep_task("semgrep-flashinfer", [self.flashinfer]),
            "where-cold": lambda: self.cold("where"),
            "where-warm": lambda: self.warm("where"),
            "scan-cold": lambda: self.cold("scan"),
            "scan-warm": lambda: self.warm("scan"),
            "deploy-warm": self.deploy_warm,
            "scan-edit": self.scan_edit,
            "checkout-cold": lambda: self.cold("checkout"),
            "checkout-warm": lambda: self.warm("checkout"),
            "repo-warm": lambda: self.repo_task(False),
            "repo-baseline": lambda: self.repo_task(True),
        }
        for t in tasks:
            log(f"--- {t}")
            self.rows.append(steps[t]())


def shorten(cmd: list[str]) -> str:
    """The command as text, a long run of file arguments folded into ``<N .py files>``."""
    py = [a for a in cmd if a.endswith(".py") and os.path.isabs(a)]
    if len(py) > 3:
        first = cmd.index(py[0])
        cmd = [*cmd[:first], f"<{len(py)} .py files>", *cmd[first + len(py):]]
    return shlex.join(cmd)


def select(only: str | None, quick: bool) -> list[str]:
    """Task names for ``--only a,b`` (a name or its prefix: ``where`` = where-cold, where-warm); ``--quick``
    leaves out the per-wheel semgrep runs unless ``--only`` names one of them in full."""
    tasks = [t for t in TASKS if not (quick and t in PER_WHEEL)]
    if not only:
        return tasks
    tokens = [t.strip() for t in only.split(",") if t.strip()]
    unknown = [t for t in tokens if not any(n == t or n.startswith(t + "-") for n in TASKS)]
    if unknown:
        raise SystemExit(f"run.py: --only: unknown task {', '.join(unknown)}; tasks: {', '.join(TASKS)}")
    return [n for n in TASKS if n in tokens or (n in tasks and any(n.startswith(t + "-") for t in tokens))]


def report(bench: Bench, info: dict[str, str], markdown: bool) -> str:
    sg = next((r for r in bench.rows if r.task == "semgrep" and not r.error), None)
    sg_wall = sg.wall if sg else None
    table = (bl.format_markdown if markdown else bl.format_table)(bench.rows, sg_wall)
    lines = [bl.machine_paragraph(info), "", table, ""]
    lines += [("- " if markdown else "") + s for s in bl.summary_lines(bench.rows)]
    notes = [f"{r.task}: {r.note}" for r in bench.rows if r.note] + bl.errors_text(bench.rows)
    lines += [("- " if markdown else "") + n for n in notes]
    if not markdown:
        lines += ["", "Commands:"] + [f"  {r.task}: {r.command}" for r in bench.rows if r.command]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="folder holding sglang/ and flashinfer/ (scripts/fetch_corpus.py)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per task; the median is reported (default 3)")
    ap.add_argument("--quick", action="store_true", help="skip per-wheel semgrep rows; one run of semgrep and cold scan")
    ap.add_argument("--only", help=f"comma-separated tasks or prefixes: {', '.join(TASKS)}")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes for castfind and semgrep (default 2)")
    ap.add_argument("--castfind", help="castfind command (default: this Python -m castfind)")
    ap.add_argument("--semgrep", help="semgrep executable (default: .venv-bench/bin/semgrep, installed if missing)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds before one run is killed (default 1800)")
    ap.add_argument("--markdown", help="also write the report as Markdown to this file")
    ap.add_argument("--json", dest="json_out", help="also write the raw measurements as JSON to this file")
    ap.add_argument("--checkout", help="the checkout-shaped tree for the checkout rows (default: CORPUS/checkout)")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the temporary caches and the edited copy")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    for wheel in ("sglang", "flashinfer"):
        if not (Path(args.corpus) / wheel).is_dir():
            ap.error(f"{Path(args.corpus) / wheel} is missing; run `make corpus` or scripts/fetch_corpus.py DEST")
    tasks = select(args.only, args.quick)
    bench = Bench(args)
    try:
        bench.run(tasks)
        info = bench.machine()
    finally:
        if args.keep_tmp:
            log(f"temporary files kept in {bench.tmp}")
        else:
            shutil.rmtree(bench.tmp, ignore_errors=True)
    print(report(bench, info, markdown=False), end="")
    if args.markdown:
        Path(args.markdown).write_text(report(bench, info, markdown=True))
        log(f"wrote {args.markdown}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"machine": info, "rows": [asdict(r) for r in bench.rows]}, indent=2))
    failed = [r for r in bench.rows if r.error and not r.task.startswith("semgrep")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
