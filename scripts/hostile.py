"""A hostile-but-fair pass over castfind's inputs: counts tracebacks, wrong exit codes and lost findings.

Usage: python scripts/hostile.py [--castfind 'python -m castfind']. Prints one row per input class and
exits 1 when any traceback, wrong exit or lost finding is seen. Everything runs in a temporary folder.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KV = "def forward_decode(self, q):\n    return self.token_to_kv_pool.get_key_buffer(0).to(q.dtype)\n"
ROWS: dict[str, list[int]] = {}


def run(cls: str, args: list[str], ok: set[int], cwd: Path, env: dict | None = None, lost: bool = False,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    r = subprocess.run([sys.executable, "-m", "castfind", *args], cwd=cwd, env=e, capture_output=True, text=True,
                       timeout=600, input=stdin)
    row = ROWS.setdefault(cls, [0, 0, 0, 0])
    row[0] += 1
    row[1] += "Traceback" in r.stderr
    row[2] += r.returncode not in ok
    row[3] += lost
    if "Traceback" in r.stderr or r.returncode not in ok:
        print(f"  {cls}: castfind {' '.join(args)} -> {r.returncode}\n    {r.stderr.strip()[-300:]}", file=sys.stderr)
    return r


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="castfind-hostile-"))
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
                    ROWS["encodings and odd sources"][3] += 1
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
                ROWS["traces"][2] += 1
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
    print("| class | inputs tried | tracebacks | wrong exits | data lost |\n|:--|--:|--:|--:|--:|")
    for cls, (n, tb, wrong, lost) in ROWS.items():
        print(f"| {cls} | {n} | {tb} | {wrong} | {lost} |")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if any(r[1] or r[2] or r[3] for r in ROWS.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
