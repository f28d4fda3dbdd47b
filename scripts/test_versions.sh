#!/usr/bin/env bash
# The fast suite (no real corpus, no torch) on the other supported Pythons: 3.12 and 3.13.
# Each gets its own virtualenv (.venv-3.12, .venv-3.13, git-ignored). An interpreter is taken from PATH
# from pyenv ($PYENV_ROOT/versions/3.12.*) or PATH (python3.12); a missing one fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${PYENV_ROOT:-$HOME/.pyenv}"
for v in 3.12 3.13; do
  # pyenv's own interpreters first: a pyenv shim on PATH may exist and still refuse to run.
  py=$(ls -d "$root"/versions/"$v".*/bin/python 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$py" ]; then
    py=$(command -v "python$v" || true)
  fi
  if [ -z "$py" ] || ! "$py" -c "pass" 2>/dev/null; then
    echo "test_versions: no Python $v found on PATH or under $root/versions" >&2
    exit 1
  fi
  venv=".venv-$v"
  if [ ! -f "$venv/.installed" ] || [ pyproject.toml -nt "$venv/.installed" ]; then
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet -e '.[test]'
    touch "$venv/.installed"
  fi
  echo "== fast suite on $("$venv/bin/python" --version)"
  "$venv/bin/python" -m pytest -q -m "not corpus" -p no:cacheprovider
done
