# castfind — developer entry points. Every target works on a fresh machine.
PY ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
CORPUS ?= .corpus

.PHONY: demo test test-fast test-versions lint corpus bench install clean

# The runtime dependencies at the versions the GitHub Action pins (.github/castfind-constraints.txt), so the suite
# runs with what users install, not with whatever PyPI published since (tests/test_action.py compares the two).
CONSTRAINTS := .github/castfind-constraints.txt

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet --constraint $(CONSTRAINTS) -e '.[test,lint]' 'torch==2.13.0'
	touch $@

install: $(VENV)/.installed

# The Mermaid library tests/test_mermaid_render.py renders the Markdown charts with (pinned in its lock file;
# the test also needs Debian's chromium: apt-get install -y chromium).
MERMAID := tests/mermaid/node_modules/.package-lock.json
$(MERMAID): tests/mermaid/package.json tests/mermaid/package-lock.json
	npm ci --prefix tests/mermaid --no-audit --no-fund
	touch $@

## demo: scan the bundled fixture and resolve an aliased kernel (no torch needed)
demo: install
	$(VENV)/bin/castfind where kernel_fused_moe --root fixtures/where --no-cache
	$(VENV)/bin/castfind scan fixtures/scan --no-cache || test $$? -eq 1

## corpus: download and unpack the sglang and flashinfer wheels, and build .corpus/checkout (sglang, sgl-kernel's
## Python files, fixtures/checkout_corpus's test/ and benchmark/) (git-ignored .corpus/)
corpus: install
	$(VPY) scripts/fetch_corpus.py $(CORPUS)

## test: the whole suite, real-corpus tests included
test: corpus $(MERMAID)
	CASTFIND_CORPUS=$(CORPUS) $(VPY) -m pytest -q -p no:cacheprovider

## test-fast: everything but the real-corpus tests
test-fast: install $(MERMAID)
	$(VPY) -m pytest -q -m "not corpus" -p no:cacheprovider

## lint: types (mypy, config in pyproject.toml) and lint (ruff) over the repository
lint: install
	$(VENV)/bin/mypy
	$(VENV)/bin/ruff check .

## test-versions: the fast suite on Python 3.12 and 3.13 (own virtualenvs, no torch)
test-versions:
	bash scripts/test_versions.sh

## bench: castfind vs semgrep vs grep on both wheels
bench: corpus
	$(VPY) benchmarks/run.py --corpus $(CORPUS)

clean:
	rm -rf $(VENV) .venv-3.12 .venv-3.13 .pytest_cache build dist *.egg-info
