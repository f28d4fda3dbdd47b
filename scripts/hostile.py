"""A hostile-but-fair pass over castfind's inputs: counts tracebacks, wrong exit codes, hangs, files written
outside the declared outputs, and lost or wrong findings.

Usage: python scripts/hostile.py [--only CLASS ...]. Prints one row per input class and exits 1 when any
row has a non-zero count. Everything runs in a temporary folder. Each class is a function registered with
:func:`hostile` (its row name); :func:`run` runs castfind once and counts what went wrong.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KV = "def forward_decode(self, q):\n    return self.token_to_kv_pool.get_key_buffer(0).to(q.dtype)\n"
#: The columns of a row, after "inputs tried".
COLUMNS = ("tracebacks", "wrong exits", "hangs", "outside writes", "lost or wrong")
ROWS: dict[str, dict[str, int]] = {}
CLASSES: dict[str, Callable[[Path], None]] = {}
#: Where a run may write without it counting as an outside write (the cache, and the outputs it declares).
ALLOWED: list[Path] = []


def hostile(name: str) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    """Register an input class: a function of the run's scratch folder."""

    def add(fn: Callable[[Path], None]) -> Callable[[Path], None]:
        CLASSES[name] = fn
        return fn

    return add


def count(cls: str, column: str, n: int = 1) -> None:
    ROWS.setdefault(cls, dict.fromkeys(("tried", *COLUMNS), 0))[column] += n


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            out[p] = (st.st_size, st.st_mtime_ns)
    return out


def run(cls: str, args: list[str], ok: set[int], cwd: Path, env: dict | None = None, lost: bool = False,
        stdin: str | None = None, outputs: tuple[Path, ...] = (), watch: Path | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``castfind ARGS`` in ``cwd``; count a traceback, an exit not in ``ok``, a hang (past ``timeout``),
    and, with ``watch``, a file created or changed under it that is neither under :data:`ALLOWED` nor one of
    ``outputs``."""
    e = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    before = _snapshot(watch) if watch else {}
    count(cls, "tried")
    try:
        r = subprocess.run([sys.executable, "-m", "castfind", *args], cwd=cwd, env=e, capture_output=True,
                           text=True, timeout=timeout, input=stdin, errors="replace")
    except subprocess.TimeoutExpired:
        count(cls, "hangs")
        print(f"  {cls}: castfind {' '.join(args)} -> hang", file=sys.stderr)
        return subprocess.CompletedProcess(args, -1, "", "")
    count(cls, "tracebacks", "Traceback" in r.stderr)
    count(cls, "wrong exits", r.returncode not in ok)
    count(cls, "lost or wrong", lost)
    if watch:
        allowed = [*ALLOWED, *outputs]
        after = _snapshot(watch)
        for p, st in after.items():
            if before.get(p) != st and not any(p == str(a) or p.startswith(str(a) + os.sep) for a in allowed):
                count(cls, "outside writes")
                print(f"  {cls}: castfind {' '.join(args)} wrote {p}", file=sys.stderr)
    if "Traceback" in r.stderr or r.returncode not in ok:
        print(f"  {cls}: castfind {' '.join(args)} -> {r.returncode}\n    {r.stderr.strip()[-300:]}", file=sys.stderr)
    return r


@hostile("basics")
def basics(tmp: Path) -> None:
    """Bad roots and symbols, odd sources, rule files, configs, traces, cache faults, CLI misuse, init, record."""
    cache = tmp / "cache"
    c = ["--cache-dir", str(cache)]
    proj = tmp / "proj"
    shutil.copytree(REPO / "fixtures" / "scan", proj)
    # roots
    for args in (["scan", "nope"], ["scan", "/dev/null"], ["where", "x", "--root", "nope"], ["scan", "--only", "zz.py"],
                 ["scan", str(proj), "--exclude", "["], ["where", "", "--root", str(proj)], ["where", "1abc"]):
        run("bad roots and symbols", args + c, {1, 2}, tmp)
    # encodings and odd sources
    odd = tmp / "odd"
    odd.mkdir()
    srcs = {"latin.py": b"x='\xe9'\n" + KV.encode(), "bogus.py": b"# coding: nope\n" + KV.encode(),
            "bom.py": b"\xef\xbb\xbf" + KV.encode(), "nul.py": b"x=1\x00\n" + KV.encode(),
            "deep.py": ("x=" + "(" * 3000 + ")" * 3000 + "\n").encode(), "cr.py": KV.replace("\n", "\r").encode(),
            "sum.py": ("y = " + "+".join(["a"] * 700) + "\n" + KV).encode(), "empty.py": b"",
            "tabs.py": KV.replace("    ", "\t").encode(), "u.py": ("def ф(kv):\n    return kv.float()\n" + KV).encode()}
    for i in range(30):
        srcs[f"pad{i}.py"] = f"v = {i}\n".encode()
    for n, b in srcs.items():
        (odd / n).write_bytes(b)
    for j in ("1", "2"):
        r = run("encodings and odd sources", ["scan", str(odd), "--eager", "--json", "-j", j] + c, {1}, tmp)
        if r.returncode == 1:
            got = {f["path"] for f in json.loads(r.stdout)["findings"]}
            for expect in ("bom.py", "cr.py", "sum.py", "tabs.py", "u.py"):
                if expect not in got:
                    count("encodings and odd sources", "lost or wrong")
                    print(f"  lost finding in {expect}", file=sys.stderr)
    # rule files
    rules = {"list.yaml": "- a\n- b\n", "scalar.yaml": "hello\n", "dup.yaml": "rules: []\nrules: []\n",
             "fmt.yaml": "rules:\n- id: CF900\n  message: '{expr.nope}'\n", "bin.yaml": "\x00\x01",
             "bool.yaml": "rules:\n- id: CF777\n  once: 'no'\n", "idx.yaml": "index: 3\n", "empty.yaml": ""}
    for n, t in rules.items():
        (tmp / n).write_text(t)
        run("rule files", ["rules", "validate", "--rules", str(tmp / n)], {0, 2}, tmp)
        run("rule files", ["scan", str(proj), "--rules", str(tmp / n)] + c, {0, 1, 2}, tmp)
    # configs
    for n, t in {"a": "[tool.castfind]\nroots = 3\n", "b": "[tool.castfind\n", "c": "[tool.castfind]\nnope = 1\n",
                 "d": "[tool.castfind]\nfail-on = 'never'\n"}.items():
        d = tmp / f"cfg{n}"
        shutil.copytree(proj, d)
        (d / "pyproject.toml").write_text(t)
        run("configs", ["scan", str(d)] + c, {2}, tmp)
    # traces
    good = {"path": "minisrv/minisrv/backend.py", "line": 14, "function": "f", "op": "aten::_to_copy",
            "src_dtype": "float8_e4m3fn", "dst_dtype": "bfloat16", "shape": [2, 2], "device": "cpu", "calls": 1,
            "bytes_per_call": 12}
    traces = {"trunc.jsonl": '{"castfind_trace": 1}\n{"path": "a", "li',
              "evil.jsonl": json.dumps(dict(good, path="../../../../etc/passwd")),
              "huge.jsonl": json.dumps(dict(good, calls=10**400)), "nan.jsonl": json.dumps(good).replace("12", "NaN"),
              "ctrl.jsonl": json.dumps(dict(good, function="\x1b[31mred\r")), "empty.jsonl": ""}
    for n, t in traces.items():
        (tmp / n).write_text(t)
    (tmp / "t.jsonl.gz").write_bytes(gzip.compress(json.dumps(good).encode()))
    (tmp / "tr.gz").write_bytes(gzip.compress(json.dumps(good).encode())[:20])
    for n in [*traces, "t.jsonl.gz", "tr.gz"]:
        for args in (["trace", "show", str(tmp / n)], ["trace", "show", "--json", str(tmp / n)],
                     ["scan", str(proj), "--trace", str(tmp / n)] + c):
            r = run("traces", args, {0, 1, 2}, tmp)
            if "root:" in r.stdout or "\x1b[31m" in r.stdout or "NaN" in r.stdout:
                count("traces", "lost or wrong")
                print(f"  trace leaked: {n} {args[:2]}", file=sys.stderr)
    # cache faults
    run("cache faults", ["scan", str(proj)] + c, {1}, tmp)
    db = cache / "facts.sqlite3"
    db.write_bytes(db.read_bytes()[:5000])
    run("cache faults", ["scan", str(proj)] + c, {1}, tmp)
    (tmp / "afile").write_text("x")
    run("cache faults", ["scan", str(proj), "--cache-dir", str(tmp / "afile")], {2}, tmp)
    run("cache faults", ["scan", str(proj)], {1}, tmp, env={"XDG_CACHE_HOME": "/proc/nope"})
    # outputs and CLI misuse
    for args in (["scan", str(proj), "--sarif", str(tmp)], ["scan", str(proj), "--write-baseline", "/proc/x.json"],
                 ["scan", str(proj), "--sarif", "-", "--json"], ["scan", str(proj), "--jobs", "-1"],
                 ["scan", str(proj), "--explain", "missing.py:3"], ["scan", str(proj), "--fail-on", "bad"],
                 ["scan", str(proj), "--write-baseline", str(REPO / "README.md")], ["scan", str(proj), "--max-file-size", "x"],
                 ["where", "x", "--at", "nope"], ["nosuch"], ["scan", str(proj), "--baseline", str(tmp / "none.json")]):
        run("outputs and CLI misuse", args + c, {2}, tmp)
    # init and record
    d = tmp / "initme"
    d.mkdir()
    for args in (["init", str(d)], ["init", str(d)], ["init", str(tmp / "missing")]):
        run("init and record", args, {0, 2}, tmp)
    (tmp / "prog.py").write_text("print('hi')\n")
    for args in (["record", "-o", str(tmp / "o.jsonl"), "--", "python", str(tmp / "nosuch.py")],
                 ["record", "-o", str(tmp), "--", "python", str(tmp / "prog.py")],
                 ["record", "-o", str(tmp / "o.jsonl"), "--", "python", "-m", "no_such_module_x"]):
        run("init and record", args, {2}, tmp)


def _raw_control(text: str) -> bool:
    """Whether any output line holds a control character (tabs aside) or an undecodable byte."""
    return "\ufffd" in text or any(not c.isprintable() and c != "\t" for line in text.split("\n") for c in line)


@hostile("hostile file names")
def hostile_names(tmp: Path) -> None:
    """A non-UTF-8 file and folder name, a name with a newline and ``::warning``, control characters, a symlink
    out of the root: every format and ``where``, cached twice and --no-cache; the normal files' findings stay."""
    cls = "hostile file names"
    cache = tmp / "cache"
    proj = tmp / "proj"
    shutil.copytree(REPO / "fixtures" / "scan", proj)
    (proj / "plain.py").write_text(KV)
    ref = subprocess.run([sys.executable, "-m", "castfind", "scan", str(proj), "--no-cache", "--json"], cwd=tmp,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True)
    expected = {(f["path"], f["line"], f["rule"]) for f in json.loads(ref.stdout)["findings"]}
    raw = os.fsencode(proj)
    with open(raw + b"/bad\xff\xfe.py", "wb") as fh:
        fh.write(KV.encode())
    os.mkdir(raw + b"/dir\xff")
    with open(raw + b"/dir\xff/inner.py", "wb") as fh:
        fh.write(KV.encode())
    (proj / "x\n::warning file=README.md::injected\n.py").write_text(KV)
    (proj / "esc\x1b[31m\r\x07.py").write_text(KV)
    (tmp / "outside.py").write_text(KV)
    (proj / "leak.py").symlink_to(tmp / "outside.py")
    outs = {"--json-output": tmp / "o.json", "--sarif": tmp / "o.sarif", "--github-output": tmp / "o.gh",
            "--gitlab-output": tmp / "o.gl", "--junit-output": tmp / "o.xml", "--markdown-output": tmp / "o.md"}
    extra = [a for opt, path in outs.items() for a in (opt, str(path))]
    for mode in (["--cache-dir", str(cache)], ["--cache-dir", str(cache)], ["--no-cache"]):
        r = run(cls, ["scan", str(proj), *mode, *extra], {1}, tmp, outputs=tuple(outs.values()), watch=tmp)
        docs = [r.stdout, r.stderr] + [p.read_text(errors="surrogateescape") for p in outs.values() if p.exists()]
        if len(docs) != 2 + len(outs) or any(_raw_control(d) for d in docs):
            count(cls, "lost or wrong")
            print(f"  {cls}: raw control character or missing output ({mode})", file=sys.stderr)
        try:
            got = {(f["path"], f["line"], f["rule"]) for f in json.loads(outs["--json-output"].read_text())["findings"]}
            json.loads(outs["--sarif"].read_text())
            json.loads(outs["--gitlab-output"].read_text())
        except (OSError, ValueError):
            got = set()
        if not expected <= got or any(p[0] == "leak.py" for p in got):
            count(cls, "lost or wrong")
            print(f"  {cls}: lost {sorted(expected - got)} ({mode})", file=sys.stderr)
        for fmt in ("text", "json", "sarif", "github", "gitlab", "junit", "markdown"):
            r = run(cls, ["scan", str(proj), *mode, "--format", fmt], {1}, tmp, watch=tmp)
            count(cls, "lost or wrong", _raw_control(r.stdout) or "plain.py" not in r.stdout)
        for w in (["where", "forward_decode"], ["where", "forward_decode", "--json"]):
            r = run(cls, [*w, "--root", str(proj), *mode], {0}, tmp, watch=tmp)
            count(cls, "lost or wrong", _raw_control(r.stdout) or "plain.py" not in r.stdout)


_THREADS = """\
import sys, threading
import torch
x = torch.zeros(4, 4, dtype=torch.float16)
def work():
    for _ in range(100):
        x.float()
t = threading.Thread(target=work)
t.start()
t.join()
"""


@hostile("record threads")
def record_threads(tmp: Path) -> None:
    """A thread's casts are in the trace; a program that closes or replaces sys.stdout keeps its exit code."""
    cls = "record threads"
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"  {cls}: skipped, torch is not installed", file=sys.stderr)
        return
    out = tmp / "t.castfind.jsonl"
    (tmp / "threads.py").write_text(_THREADS)
    run(cls, ["record", "-o", str(out), "--", "python", str(tmp / "threads.py")], {0}, tmp, outputs=(out,), watch=tmp)
    lines = [json.loads(line) for line in out.read_text().splitlines()[1:]] if out.exists() else []
    count(cls, "lost or wrong", sum(rec["calls"] for rec in lines if rec["line"] == 6) != 100)
    for body, code in (("sys.stdout.close()", 0), ("sys.stdout.close()\nsys.exit(3)", 3), ("sys.stdout = None", 0),
                       ("os.close(1)\nsys.exit(4)", 4)):
        (tmp / "prog.py").write_text(f"import os, sys\nprint('hi')\n{body}\n")
        run(cls, ["record", "-o", str(out), "--", str(tmp / "prog.py")], {code}, tmp, outputs=(out,), watch=tmp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=sorted(CLASSES), help="run only these classes")
    ns = ap.parse_args()
    for name, fn in CLASSES.items():
        if ns.only and name not in ns.only:
            continue
        tmp = Path(tempfile.mkdtemp(prefix="castfind-hostile-"))
        ALLOWED[:] = [tmp / "cache"]
        try:
            fn(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print("| class | inputs tried | " + " | ".join(COLUMNS) + " |\n|:--|--:|" + "--:|" * len(COLUMNS))
    for cls, row in ROWS.items():
        print(f"| {cls} | {row['tried']} | " + " | ".join(str(row[c]) for c in COLUMNS) + " |")
    return 1 if any(row[c] for row in ROWS.values() for c in COLUMNS) else 0


if __name__ == "__main__":
    sys.exit(main())
