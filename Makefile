# rl-workbench: `make demo` trains the tiny model with GRPO end to end; `make test` runs the suite.
# Both create .venv and install everything on a fresh clone (only Python 3.11 and make needed).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
VERL   := .workbench/verl
TORCH  := torch==2.13.0  # the CPU wheel; an unpinned torch pulls a multi-GB CUDA build

.PHONY: install demo test test-fast bench verl clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# verl's own deps conflict with ours: its core functions are installed, without deps, beside
# the venv, only for the parity tests (tests/algorithms/test_verl_parity.py).
verl: $(VERL)/.installed
$(VERL)/.installed: tests/algorithms/install_verl.sh | $(STAMP)
	PYTHON=$(BIN)/python tests/algorithms/install_verl.sh $(VERL)
	touch $@

demo: install
	$(BIN)/workbench run studies/sanity.yaml

test: install verl
	WORKBENCH_VERL_PATH=$(VERL) $(BIN)/python -m pytest

test-fast: install
	$(BIN)/python -m pytest -m "not slow"

bench: install
	$(BIN)/python benchmarks/bench_sanity.py

clean:
	rm -rf $(VENV) .workbench mlflow.db mlartifacts
