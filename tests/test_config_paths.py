"""A scanned repository's ``[tool.castfind]`` paths stay inside the repository: a path that leaves it is
refused in one line naming the key, and no file outside it is read or quoted (castfind.core.config)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from castfind.core.config import ConfigError, load_config
from tests.support import run_castfind

SECRET = "root:$6$SECRETHASH:19000:0:99999:7:::"
KV = "def forward_decode(self, q):\n    return self.token_to_kv_pool.get_key_buffer(0).to(q.dtype)\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "shadow").write_text(SECRET + "\nsecond line\n")
    r = tmp_path / "a" / "b" / "repo"
    r.mkdir(parents=True)
    (r / "kv.py").write_text(KV)
    os.symlink(tmp_path / "shadow", r / "link.yaml")
    return r


ESCAPES = [
    ("rules", '["../../../shadow"]'),
    ("rules", f'["{"/" + "/".join([".."] * 12)}/etc/shadow"]'),
    ("rules", '["link.yaml"]'),  # a symlink inside the repository to a file outside it
    ("roots", '["../.."]'),
    ("baseline", '"../../../shadow"'),
    ("baseline", '"/etc/passwd"'),
]


@pytest.mark.parametrize(("key", "value"), ESCAPES)
def test_a_config_path_outside_the_repository_is_refused_unread(repo: Path, key: str, value: str) -> None:
    (repo / "pyproject.toml").write_text(f"[tool.castfind]\n{key} = {value}\n")
    with pytest.raises(ConfigError, match="outside the project folder") as err:
        load_config(repo)
    assert err.value.key == key
    r = run_castfind("scan", str(repo), "--no-cache")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "SECRETHASH" not in r.stderr + r.stdout and "second line" not in r.stderr + r.stdout
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("castfind: ") and f"[tool.castfind] {key}" in line and "outside" in line, line


def test_paths_inside_the_repository_still_work(repo: Path) -> None:
    (repo / "my_rules").mkdir()
    (repo / "pyproject.toml").write_text('[tool.castfind]\nroots = ["."]\nrules = ["my_rules", "./my_rules/../my_rules"]\n'
                                         'baseline = "sub/../castfind-baseline.json"\n')
    cfg = load_config(repo)
    assert cfg.rules == (repo / "my_rules", repo / "./my_rules/../my_rules") and cfg.roots == (repo / ".",)
    assert cfg.baseline == repo / "sub/../castfind-baseline.json"
