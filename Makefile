# crfkit
#   make chunker   train + evaluate a chunker on CoNLL-2000 (sets up .venv with crfkit's core
#                  dependencies only: numpy, scipy, numba)
#   make test      lint (ruff, import-linter), run the tests, build the docs strictly (adds the test
#                  and docs extras: pytest, hypothesis, scikit-learn, ruff, import-linter, mkdocs, ...)
#   make bench     crfkit vs CRFsuite on CoNLL-2000 (adds the bench extra: python-crfsuite, ...)
#   make docs      build the documentation site into build/site/ (adds the docs extra: mkdocs-material, mkdocstrings)
#
# PY picks the interpreter the virtualenv is built from: python3.11 when it is
# on the PATH, else python3; it must be Python >= 3.11 (make PY=/path/to/python).

SHELL := /bin/bash
PY ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
DEMO_ARGS ?=
BENCH_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help chunker test bench docs

help:
	@echo "make chunker   train + evaluate a chunker on CoNLL-2000 (DEMO_ARGS='--threads 4 ...')"
	@echo "make test      run the tests"
	@echo "make bench     crfkit vs CRFsuite on CoNLL-2000"
	@echo "make docs      build the documentation site (build/site/)"

$(VENV)/.installed: pyproject.toml
	@command -v "$(PY)" >/dev/null 2>&1 || { \
	  echo "error: '$(PY)' not found: crfkit needs Python >= 3.11 (run: make PY=/path/to/python3.11 ...)" >&2; exit 1; }
	@"$(PY)" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || { \
	  echo "error: crfkit needs Python >= 3.11, but '$(PY)' is Python $$("$(PY)" -c 'import platform; print(platform.python_version())')" \
	       "(run: make PY=/path/to/python3.11 ...)" >&2; exit 1; }
	"$(PY)" -m venv $(VENV)
	$(PIP) install -e .
	@# compile the demo's kernels now, training and decoding in two processes at once (a failed
	@# warmup is not fatal: the kernels then compile on first use); the rest follow (.warm)
	$(BIN)/crfkit warmup --step train --step tag || echo "warning: crfkit warmup failed; the kernels will compile on first use" >&2
	touch $@

# every other kernel, so that no later command pauses to compile (make chunker: after the demo)
$(VENV)/.warm: $(VENV)/.installed
	@echo "compiling the other kernels (the other algorithms and decoders), once, so that no later command pauses"
	$(BIN)/crfkit warmup || echo "warning: crfkit warmup failed; the kernels will compile on first use" >&2
	touch $@

# the test and docs extras on top of the core install (make test only: make chunker needs none of it)
$(VENV)/.test-installed: $(VENV)/.installed
	$(PIP) install -e '.[test]'
	$(PIP) install -e '.[docs]'
	touch $@

chunker: $(VENV)/.installed
	@$(BIN)/crfkit demo $(DEMO_ARGS)
	@$(MAKE) --no-print-directory $(VENV)/.warm

test: $(VENV)/.test-installed $(VENV)/.warm
	$(BIN)/ruff check src tests benchmarks docs
	$(BIN)/ruff format --check src tests benchmarks docs
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict -q

$(VENV)/.docs-installed: $(VENV)/.installed
	$(PIP) install -e '.[docs]'
	touch $@

docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

$(VENV)/.bench-installed: $(VENV)/.installed
	$(PIP) install -e '.[bench]'
	touch $@

bench: $(VENV)/.bench-installed
	$(BIN)/python benchmarks/peers/conll2000_vs_crfsuite.py $(BENCH_ARGS)
