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


def _findings(r: subprocess.CompletedProcess[str]) -> list[tuple[str, int, str]] | None:
    try:
        return [(f["path"], f["line"], f["rule"]) for f in json.loads(r.stdout)["findings"]]
    except (ValueError, KeyError, TypeError):
        return None


@hostile("racing edits")
def racing_edits(tmp: Path, rounds: int = 20, scans: int = 8) -> None:
    """8 cached scans at once while a file flips between two contents every 20 ms; once the edits stop, the
    cached answer equals --no-cache's, for the tree and for a fresh copy of it (a cache row holding the facts of
    the other content, or a carried result computed while the file changed, would show here)."""
    import threading
    import time

    cls = "racing edits"
    proj = tmp / "proj"
    shutil.copytree(REPO / "fixtures" / "scan", proj)
    backend = proj / "minisrv" / "minisrv" / "backend.py"
    one = backend.read_text()
    two = one.replace("get_key_buffer(layer.layer_id)[kv_indices]", "get_key_buffer(layer.layer_id)")
    assert one != two
    c = ["--cache-dir", str(tmp / "cache"), "--json"]
    e = dict(os.environ, PYTHONPATH=str(REPO))
    for n in range(rounds):
        stop = threading.Event()

        def flip(stop: threading.Event = stop) -> None:
            i = 0
            while not stop.is_set():
                backend.write_text((one, two)[i % 2])
                i += 1
                time.sleep(0.02)

        flipper = threading.Thread(target=flip)
        flipper.start()
        procs = [subprocess.Popen([sys.executable, "-m", "castfind", "scan", str(proj), *c, "-j", str(1 + k % 2)],
                                  cwd=tmp, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for k in range(scans)]
        for proc in procs:
            try:
                _out, err = proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                count(cls, "hangs")
                continue
            count(cls, "tried")
            count(cls, "tracebacks", "Traceback" in err)
            # 0 is right too while the edits run: a file caught between truncate and write is empty.
            count(cls, "wrong exits", proc.returncode not in (0, 1))
            if proc.returncode not in (0, 1) or "Traceback" in err:
                print(f"  {cls}: round {n}: exit {proc.returncode}: {err.strip()[-300:]}", file=sys.stderr)
        stop.set()
        flipper.join()
        backend.write_text((one, two)[n % 2])  # the edits stop, on either content
        copy = tmp / f"copy{n}"
        shutil.copytree(proj, copy)
        for tree in (proj, copy):
            cached = _findings(run(cls, ["scan", str(tree), *c], {1}, tmp))
            fresh = _findings(run(cls, ["scan", str(tree), "--no-cache", "--json"], {1}, tmp))
            if cached is None or cached != fresh:
                count(cls, "lost or wrong")
                print(f"  {cls}: round {n} {tree.name}: cached {cached} != --no-cache {fresh}", file=sys.stderr)
        shutil.rmtree(copy)
def _kv_project(tmp: Path, name: str = "proj") -> Path:
    proj = tmp / name
    proj.mkdir()
    (proj / "kv.py").write_text(KV)
    return proj


@hostile("config paths")
def config_paths(tmp: Path) -> None:
    """A scanned repository's [tool.castfind] paths leaving it (.., absolute, a symlink): exit 2, no secret printed."""
    c = ["--cache-dir", str(tmp / "cache")]
    (tmp / "shadow").write_text("root:$6$HOSTILESECRET:19000:0:99999:7:::\n")
    for i, (key, value) in enumerate([("rules", '["../shadow"]'), ("rules", '["/etc/shadow"]'), ("rules", '["link"]'),
                                      ("roots", '["/"]'), ("baseline", '"../shadow"'), ("baseline", '"/etc/passwd"')]):
        proj = _kv_project(tmp, f"p{i}")
        os.symlink(tmp / "shadow", proj / "link")
        (proj / "pyproject.toml").write_text(f"[tool.castfind]\n{key} = {value}\n")
        r = run("config paths", ["scan", str(proj)] + c, {2}, tmp, watch=tmp)
        count("config paths", "lost or wrong", "HOSTILESECRET" in r.stdout + r.stderr or "root:" in r.stderr)


@hostile("outputs aimed at inputs and sources")
def outputs_at_inputs(tmp: Path) -> None:
    """Each output option aimed at a scanned .py, each input kind, the cache db and a foreign file: exit 2, nothing changed."""
    cls = "outputs aimed at inputs and sources"
    cache = tmp / "cache"
    proj = _kv_project(tmp)
    inputs = {"base": tmp / "base.json", "rules": tmp / "r.yaml", "cfg": tmp / "config.json", "trace": tmp / "t.jsonl",
              "foreign": tmp / "notes.txt"}
    inputs["base"].write_text('{"castfind_baseline": 1, "findings": []}\n')
    inputs["rules"].write_text("rules: []\n")
    inputs["cfg"].write_text("{}\n")
    inputs["trace"].write_text('{"castfind_trace": 1, "records": 0}\n')
    inputs["foreign"].write_text("precious\n")
    base = ["scan", str(proj), "--cache-dir", str(cache), "--baseline", str(inputs["base"]), "--rules",
            str(inputs["rules"]), "--model-config", str(inputs["cfg"]), "--trace", str(inputs["trace"])]
    run(cls, base, {1}, tmp, watch=tmp)
    targets = [str(proj / "kv.py"), str(proj / "new.py"), *(str(p) for p in inputs.values()), str(cache / "facts.sqlite3")]
    options = [["--sarif"], ["--json-output"], ["--github-output"], ["--gitlab-output"], ["--junit-output"],
               ["--markdown-output"], ["--format", "json", "--output"], ["--write-baseline"]]
    for opt in options:
        for target in targets:
            run(cls, base + opt + [target], {2}, tmp, watch=tmp)
    prog = tmp / "prog.py"
    prog.write_text("print('hi')\n")
    for args in (["record", "-o", str(prog), "--", "python", str(prog)],
                 ["record", "-o", str(inputs["foreign"]), "--", "python", str(prog)],
                 ["trace", "import", str(inputs["foreign"]), "-o", str(inputs["foreign"])],
                 ["trace", "import", str(inputs["foreign"]), "-o", str(inputs["trace"])]):
        run(cls, args, {2}, tmp, watch=tmp)


@hostile("bombs and FIFOs")
def bombs_and_fifos(tmp: Path) -> None:
    """A gzip bomb trace, /dev/zero and a FIFO as each input, a FIFO as init's pyproject.toml: exit 2, no hang."""
    cls = "bombs and FIFOs"
    c = ["--cache-dir", str(tmp / "cache")]
    proj = _kv_project(tmp)
    bomb = tmp / "bomb.jsonl.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        for _ in range(64):
            fh.write(b"\n" * (16 << 20))  # 1 GiB of newlines, ~1 MB compressed
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    for args in (["trace", "show", str(bomb)], ["scan", str(proj), "--trace", str(bomb)] + c,
                 ["trace", "import", str(bomb), "-o", str(tmp / "o.jsonl")]):
        run(cls, args, {2}, tmp, watch=tmp, timeout=60)
    for src in ("/dev/zero", str(fifo)):
        for opt in ("--trace", "--baseline", "--model-config", "--rules"):
            run(cls, ["scan", str(proj), opt, src] + c, {2}, tmp, watch=tmp, timeout=60)
        for args in (["trace", "show", src], ["trace", "import", src, "-o", str(tmp / "o.jsonl")]):
            run(cls, args, {2}, tmp, watch=tmp, timeout=60)
    d = tmp / "initme"
    d.mkdir()
    os.mkfifo(d / "pyproject.toml")
    run(cls, ["init", str(d)], {2}, tmp, watch=tmp, timeout=60)
    d2 = _kv_project(tmp, "fifocfg")
    os.mkfifo(d2 / "pyproject.toml")
    run(cls, ["scan", str(d2)] + c, {2}, tmp, watch=tmp, timeout=60)


def _strict_json(text: str) -> bool:
    def refuse(constant: str) -> None:
        raise ValueError(constant)

    try:
        json.loads(text, parse_constant=refuse)
    except ValueError:
        return False
    return True


@hostile("huge numbers")
def huge_numbers(tmp: Path) -> None:
    """Huge, infinite and negative bindings: exit 2 in one line; --json and SARIF always strict JSON."""
    cls = "huge numbers"
    c = ["--cache-dir", str(tmp / "cache")]
    fix = str(REPO / "fixtures" / "cost")
    sets = ["--set", "head_num=8", "--set", "head_dim=128"]
    for value in ("0x" + "f" * 300, "9" * 400, "1e308", "-1", "-0.5", "1e999"):
        for fmt in (["--json"], ["--sarif", "-"]):
            r = run(cls, ["scan", fix, "--set", f"layer_num={value}", *sets, "--kv-tokens", "1000", *fmt] + c, {2}, tmp)
            count(cls, "lost or wrong", "internal error" in r.stderr or len(r.stderr.strip().splitlines()) != 1)
    r = run(cls, ["scan", fix, "--set", "layer_num=2", *sets, "--kv-tokens", "9" * 400] + c, {2}, tmp)
    count(cls, "lost or wrong", "internal error" in r.stderr)
    cfg = tmp / "config.json"
    for bad in ("9" * 4000, "-61", "1e400"):
        cfg.write_text('{"num_hidden_layers": ' + bad + "}")
        r = run(cls, ["scan", fix, "--model-config", str(cfg), "--kv-tokens", "1000", "--json"] + c, {2}, tmp)
        count(cls, "lost or wrong", "internal error" in r.stderr)
    for fmt in (["--json"], ["--sarif", "-"]):
        r = run(cls, ["scan", fix, "--set", "layer_num=61", *sets, "--kv-tokens", "495552", *fmt] + c, {1}, tmp)
        count(cls, "lost or wrong", not _strict_json(r.stdout))


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="h", GIT_AUTHOR_EMAIL="h@example.com", GIT_COMMITTER_NAME="h",
               GIT_COMMITTER_EMAIL="h@example.com", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, check=True,
                          env=env).stdout.decode().strip()


def _crafted(repo: Path, names: list[bytes], leaf: bytes = b"x.py", mode: str = "100644") -> str:
    """A commit whose tree holds ``leaf`` under the folders ``names``, written with no check of the names."""
    blob = _git(repo, "hash-object", "-w", "--stdin", stdin=KV.encode())
    oid = blob
    entries = [(mode, leaf, blob)]
    for name in [None, *reversed(names)]:
        if name is not None:
            entries = [("40000", name, oid)]
        raw = b"".join(m.encode() + b" " + n + b"\0" + bytes.fromhex(o) for m, n, o in entries)
        oid = _git(repo, "hash-object", "-t", "tree", "--literally", "-w", "--stdin", stdin=raw)
    return _git(repo, "commit-tree", oid, "-m", "crafted")


@hostile("crafted git trees")
def crafted_git_trees(tmp: Path) -> None:
    """--baseline-commit of commits whose trees name paths that leave the export folder (.., ., .git, an
    absolute-looking or backslashed name, a file and a folder of one name): one line, exit 2, nothing written
    outside the cache, for both cache modes and with the scratch folder inside the watched folder."""
    cls = "crafted git trees"
    repo = tmp / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "srv.py").write_text(KV)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    scratch = tmp / "scratch"
    scratch.mkdir()
    shapes = [[b".."] * n for n in range(1, 9)] + [[b"a", b"..", b".."], [b".git", b"hooks"], [b"sub", b".GIT"],
                                                   [b"."], [b"a\\..\\.."]]
    commits = [_crafted(repo, names) for names in shapes]
    commits.append(_crafted(repo, [b"..", b".."], leaf=b"sitecustomize.py"))
    commits.append(_crafted(repo, [], leaf=b"x.py", mode="120000"))  # a link: skipped, never written
    for commit in commits:
        for cache in (["--no-cache"], ["--cache-dir", str(tmp / "cache")]):
            r = run(cls, ["scan", str(repo), *cache, "--baseline-commit", commit], {0, 1, 2}, tmp, watch=tmp,
                    env={"TMPDIR": str(scratch)})
            if r.returncode == 2 and r.stderr.count("\n") != 1:
                count(cls, "wrong exits")
                print(f"  {cls}: not one line: {r.stderr!r}", file=sys.stderr)
        leftover = [p for p in scratch.rglob("*.py")]
        if leftover:
            count(cls, "outside writes", len(leftover))
            print(f"  {cls}: left in the scratch folder: {leftover}", file=sys.stderr)


@hostile("damaged cache state")
def damaged_cache_state(tmp: Path) -> None:
    """Cache rows of another SQLite type, and the cache's exported --baseline-commit trees truncated, garbled,
    planted with a file, a folder replaced by a file, a file replaced by a link: every later run answers as
    --no-cache does."""
    import sqlite3

    cls = "damaged cache state"
    repo = tmp / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "srv").mkdir()
    (repo / "srv" / "backend.py").write_text(KV)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    (repo / "srv" / "backend.py").write_text(KV + KV.replace("forward_decode", "forward_decode2"))
    (repo / "srv" / "extra.py").write_text(KV)
    cache = tmp / "cache"
    args = ["scan", str(repo), "--json", "--baseline-commit", "HEAD"]
    want = _findings(run(cls, [*args, "--no-cache"], {1}, tmp))

    def check(what: str) -> None:
        for _ in range(2):
            got = _findings(run(cls, [*args, "--cache-dir", str(cache)], {1}, tmp))
            if got != want:
                count(cls, "lost or wrong")
                print(f"  {cls}: {what}: {got} != {want}", file=sys.stderr)

    check("fresh")
    db = cache / "facts.sqlite3"
    for value in ("'garbled'", "7", "1.5", "x'00'"):
        conn = sqlite3.connect(db)
        for table in ("facts", "idents", "memo", "stats", "trees"):
            conn.execute(f"UPDATE {table} SET data = {value}")
        conn.commit()
        conn.close()
        check(f"rows set to {value}")
    for damage in ("truncate", "garble", "plant", "remove", "folder-to-file", "link", "empty-tree"):
        (tree,) = [p for p in (cache / "refs").iterdir() if not p.name.startswith(".")]
        (copy,) = tree.rglob("backend.py")
        if damage == "truncate":
            copy.write_text(KV[:30])
        elif damage == "garble":
            copy.write_text(KV.replace("get_key_buffer", "get_kex_buffer"))
        elif damage == "plant":
            (copy.parent / "extra.py").write_text(KV)
        elif damage == "remove":
            copy.unlink()
        elif damage == "folder-to-file":
            shutil.rmtree(copy.parent)
            copy.parent.write_text("x")
        elif damage == "link":
            copy.unlink()
            copy.symlink_to(repo / "srv" / "backend.py")
        else:
            shutil.rmtree(tree)
            tree.write_text("")
        check(f"exported tree: {damage}")


@hostile("full disk")
def full_disk(tmp: Path) -> None:
    """The cache on a small tmpfs that is filled up (root only; skipped otherwise): scans answer as --no-cache,
    say 'cannot write' once, never call the cache corrupt, and keep the database; with space again, it is used."""
    cls = "full disk"
    if os.geteuid() != 0:
        print(f"  {cls}: skipped (needs root to mount a tmpfs)", file=sys.stderr)
        return
    disk = tmp / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True).returncode:
        print(f"  {cls}: skipped (cannot mount a tmpfs)", file=sys.stderr)
        return
    try:
        cache = disk / "cache"
        proj = tmp / "proj"
        shutil.copytree(REPO / "fixtures" / "scan", proj)
        base = ["scan", str(proj), "--json", "--cache-dir", str(cache)]
        want = _findings(run(cls, ["scan", str(proj), "--json", "--no-cache"], {1}, tmp))
        run(cls, base, {1}, tmp)
        db = cache / "facts.sqlite3"
        size = db.stat().st_size
        with open(disk / "filler", "wb") as fh:
            try:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            except OSError:
                pass
        for n in range(4):
            (proj / "minisrv" / "minisrv" / f"new{n}.py").write_text(KV)
            want = _findings(run(cls, ["scan", str(proj), "--json", "--no-cache"], {1}, tmp))
            for j in ("1", "2"):
                r = run(cls, [*base, "-j", j], {1}, tmp)
                notes = [d for d in json.loads(r.stdout or "{}").get("diagnostics", []) if d.get("kind") == "cache"]
                bad = _findings(r) != want or "corrupt" in r.stderr + r.stdout or len(notes) > 1
                count(cls, "lost or wrong", bad)
                if bad:
                    print(f"  {cls}: {r.stdout[-300:]} {r.stderr[-300:]}", file=sys.stderr)
        if not db.is_file() or db.stat().st_size < size or list(cache.glob("*corrupt*")):
            count(cls, "lost or wrong")
            print(f"  {cls}: the database was lost or moved aside", file=sys.stderr)
        (disk / "filler").unlink()
        r = run(cls, base, {1}, tmp)
        r = run(cls, base, {1}, tmp)
        count(cls, "lost or wrong", _findings(r) != want or '"outcome": "carried"' not in r.stdout)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
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
