# Transformer Anatomy: every command a reader or contributor needs.
#   make book    create .venv, install the pinned stack and the package, build the HTML
#   make test    everything CI checks: lint, unit tests, strict nbval (on this CPU's kernels
#                and on another family's), the book build; ends with seconds per stage
#   make test-fast  the unit tests without the slow ones: a contributor's loop
#   make record  re-execute every chapter in place, re-recording its outputs
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHAPTERS := $(sort $(wildcard chapters/*.ipynb))

# The chapters that read Tiny Shakespeare take it from a local copy when there is one;
# without one (and with ANATOMY_DATA unset) they download it once and check its sha256.
ifneq ($(wildcard ../shared/data/tinyshakespeare.txt),)
ANATOMY_DATA ?= $(abspath ../shared/data/tinyshakespeare.txt)
export ANATOMY_DATA
endif
# Same numbers on every run: one BLAS thread, and no surprise parallel reductions.
export OMP_NUM_THREADS ?= 1
export OPENBLAS_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1
export PYDEVD_DISABLE_FILE_VALIDATION = 1

NBVAL := --nbval --nbval-current-env --nbval-sanitize-with .ci/nbval-sanitize.cfg
# Both cores: the notebooks are shared between two workers, a whole notebook to each.
NBVAL_RUN := $(BIN)/python -m pytest $(NBVAL) -n 2 --dist loadfile chapters -q
# The recorded outputs must hold on other CPUs too: the same run under another kernel family
# (torch's ATEN_CPU_CAPABILITY, MKL_CBWR, OPENBLAS_CORETYPE, NumPy's NPY_DISABLE_CPU_FEATURES),
# each switch checked to have taken effect (.ci/kernels.py).
KERNELS_OTHER := $(BIN)/python .ci/kernels.py run --

.PHONY: help venv book lab book-student test test-fast lint unit nbval nbval-other build links \
	colab-check browser-check record sync clean

help:
	@echo "make book    build the HTML book into _build/html (creates .venv on first use)"
	@echo "make test    lint + unit tests + strict nbval on two kernel families + book build (CI)"
	@echo "make lab     open the chapters in JupyterLab (installs it into .venv on first use)"
	@echo "make test-fast   the unit tests without those marked slow (a few minutes)"
	@echo "make record  re-execute the chapters in place to re-record their outputs"
	@echo "make lint    ruff (with bugbear) over code, tests, bench and chapters"
	@echo "make sync    rewrite each chapter's setup cell from _config.yml"
	@echo "make book-student   the book without solutions, in _build/student-src/_build/html"
	@echo "make colab-check    run chapters 1 and 9 in a Colab-like environment (ipywidgets 7.7)"
	@echo "make browser-check  load every page of the built book in headless Chromium"

venv: $(STAMP)
$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "make: the \
	pinned stack needs Python 3.11 or newer; $(PYTHON) is $$($(PYTHON) --version 2>&1). Try \
	make book PYTHON=python3.12"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

book: $(STAMP) build
	@echo "Open _build/html/index.html"

# JupyterLab, to run the chapters and do the exercises. Not in requirements.txt, so CI and the
# book build do not carry it; installed against those pins, so it moves none of them.
lab: $(STAMP)
	$(BIN)/python -c 'import jupyterlab' 2>/dev/null || \
	$(BIN)/python -m pip install --quiet jupyterlab -c requirements.txt
	$(BIN)/jupyter lab chapters/

build: $(STAMP)
	rm -rf _build/html _build/.doctrees
	$(BIN)/jupyter-book build . --all -W -n --keep-going

lint: $(STAMP)
	$(BIN)/ruff check .

unit: $(STAMP)
	$(BIN)/python -m pytest tests -q -n 2

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -q -n 2 -m "not slow"

nbval: $(STAMP)
	$(NBVAL_RUN)

nbval-other: $(STAMP)
	$(KERNELS_OTHER) $(NBVAL_RUN)

book-student: $(STAMP)
	$(BIN)/python .ci/student_edition.py

links:
	$(BIN)/python .ci/check_links.py

# By hand, other Colab-like set-ups: make colab-check COLAB_ARGS="--env .ci/colab-env-torch28.txt
#   --python ~/.pyenv/versions/3.12.1/bin/python3 --chapters all" (see .ci/colab_check.py).
colab-check: $(STAMP)
	$(BIN)/python .ci/colab_check.py $(COLAB_ARGS)

# Chromium comes from Debian (apt-get install chromium chromium-driver). Without it this check
# is skipped with a plain message, unless REQUIRE_BROWSER=1 (as in CI), where that is a failure.
browser-check: $(STAMP)
	@rc=0; $(BIN)/python .ci/browser_check.py || rc=$$?; \
	if [ $$rc -eq 3 ] && [ "$${REQUIRE_BROWSER:-0}" != 1 ]; then \
	  echo "browser-check: SKIPPED (no Chromium here; CI installs it and runs this check)"; \
	elif [ $$rc -ne 0 ]; then exit $$rc; fi

test: $(STAMP)
	@$(BIN)/python .ci/stages.py lint unit nbval nbval-other build links book-student \
	  colab-check browser-check

record: $(STAMP)
	$(BIN)/python .ci/record.py $(CHAPTERS)

sync: $(STAMP)
	$(BIN)/python .ci/setup_cell.py --write $(CHAPTERS)

clean:
	rm -rf _build
