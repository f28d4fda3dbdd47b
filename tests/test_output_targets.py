"""Every output option goes through one check before the scan (castfind.core.fsutil.check_output_target): an output
aimed at an input of the run, a .py file under a scanned root, the cache, or an existing file of another kind is
refused in one line (exit 2) and nothing is written; castfind's own earlier output is replaced as before."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import run_castfind

KV = "def forward_decode(self, q):\n    return self.token_to_kv_pool.get_key_buffer(0).to(q.dtype)\n"


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "kv.py").write_text(KV)
    files = {"proj": proj, "kv": proj / "kv.py", "cache": tmp_path / "cache", "base": tmp_path / "base.json",
             "rules": tmp_path / "mine.yaml", "cfg": tmp_path / "config.json", "trace": tmp_path / "t.jsonl",
             "foreign": tmp_path / "notes.txt"}
    files["base"].write_text('{"castfind_baseline": 1, "findings": []}\n')
    files["rules"].write_text("rules: []\n")
    files["cfg"].write_text("{}\n")
    files["trace"].write_text('{"castfind_trace": 1, "records": 0}\n')
    files["foreign"].write_text("precious\n")
    return files


def _state(files: dict[str, Path]) -> dict[str, bytes]:
    out = {}
    for root, _dirs, names in os.walk(files["proj"].parent):
        for n in names:
            p = Path(root, n)
            if "cache" not in p.parts:
                out[str(p)] = p.read_bytes()
    return out


def _cases(f: dict[str, Path]) -> list[list[str]]:
    db = str(f["cache"] / "facts.sqlite3")
    return [
        ["--sarif", str(f["kv"])],  # a scanned source
        ["--format", "json", "--output", str(f["proj"] / "new.py")],  # a new .py file under the root
        ["--write-baseline", str(f["kv"])],
        ["--json-output", str(f["base"])],  # each input kind
        ["--junit-output", str(f["rules"])],
        ["--markdown-output", str(f["cfg"])],
        ["--github-output", str(f["trace"])],
        ["--gitlab-output", db],  # the cache database
        ["--write-baseline", str(f["rules"])],
        ["--sarif", str(f["foreign"])],  # an existing file that is not a SARIF log
        ["--format", "markdown", "-o", str(f["foreign"])],
        ["--json-output", str(f["foreign"])],
    ]


def test_outputs_aimed_at_inputs_sources_cache_or_foreign_files_are_refused(setup: dict[str, Path]) -> None:
    f = setup
    base = ["scan", str(f["proj"]), "--cache-dir", str(f["cache"]), "--baseline", str(f["base"]), "--rules",
            str(f["rules"]), "--model-config", str(f["cfg"]), "--trace", str(f["trace"])]
    r = run_castfind(*base)  # the inputs are fine
    assert r.returncode == 1, r.stderr
    db = f["cache"] / "facts.sqlite3"
    for extra in _cases(f):
        before, db_before = _state(f), db.read_bytes()
        r = run_castfind(*base, *extra)
        assert r.returncode == 2, (extra, r.stdout, r.stderr)
        (line,) = r.stderr.strip().splitlines()
        assert line.startswith("castfind: ") and extra[-1] in line and "Traceback" not in line, line
        assert _state(f) == before and db.read_bytes() == db_before, extra


def test_castfinds_own_outputs_are_replaced(setup: dict[str, Path]) -> None:
    f = setup
    out = f["proj"].parent / "out"
    args = ["scan", str(f["proj"]), "--cache-dir", str(f["cache"])]
    opts = ["--sarif", f"{out}.sarif", "--json-output", f"{out}.json", "--github-output", f"{out}.gh",
            "--gitlab-output", f"{out}.gl.json", "--junit-output", f"{out}.xml", "--markdown-output", f"{out}.md",
            "--output", f"{out}.txt", "--write-baseline", f"{out}.base.json"]
    for _ in range(2):
        r = run_castfind(*args, *opts)
        assert r.returncode == 0, r.stderr  # --write-baseline succeeds: exit 0
    assert json.loads(Path(f"{out}.sarif").read_text())["runs"][0]["tool"]["driver"]["name"] == "castfind"


def test_each_format_recognises_its_own_documents_only() -> None:
    from castfind.report import registry
    from castfind.runtime.trace import owns_trace

    samples = {"json": '{"findings": [], "diagnostics": [], "stats": {}}', "sarif":
               '{"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "castfind"}}}]}',
               "gitlab": "[]", "github": "::error file=a.py,line=1,title=CF101::x\n",
               "junit": '<?xml version="1.0"?>\n<testsuites name="castfind" tests="0">', "markdown": "### castfind: 0 errors",
               "text": "0 errors, 0 warnings, 0 info in 0 of 3 files\n"}
    for name, text in samples.items():
        owns = registry.get(name).owns
        assert owns is not None and owns(text) is None, name
        assert owns("precious\n") is not None and owns("root:x:0:0::/root:/bin/sh") is not None, name
    assert owns_trace('{"castfind_trace": 1}\n') is None and owns_trace("print(1)\n") is not None


def test_record_and_trace_import_refuse_their_input_and_foreign_files(setup: dict[str, Path]) -> None:
    f = setup
    prog = f["proj"].parent / "prog.py"
    prog.write_text("print('hi')\n")
    for args in (["record", "-o", str(prog), "--", "python", str(prog)],
                 ["record", "-o", str(f["foreign"]), "--", "python", str(prog)],
                 ["trace", "import", str(f["foreign"]), "-o", str(f["foreign"])]):
        r = run_castfind(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.strip().splitlines()[-1].startswith("castfind: "), r.stderr
    assert prog.read_text() == "print('hi')\n" and f["foreign"].read_text() == "precious\n"
