# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# torch==2.13.0 is installed first, on its own, and every later install is checked so that nothing
# upgrades it (any other torch requirement would pull gigabytes of CUDA packages).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
TORCH := torch==2.13.0

.PHONY: venv install install-test demo demo-multinode chaos test lint bench bench-plots clean test-xla gpu-check docs docs-serve

$(VENV)/.torch:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install $(TORCH)
	touch $@

$(VENV)/.installed: $(VENV)/.torch pyproject.toml
	$(PIP) install -e . $(TORCH)
	$(PY) -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 'torch was changed: ' + torch.__version__)"
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	@# DeepSpeed (in the test extra) builds from source against this torch, so it goes first and without
	@# build isolation; the test extra then finds it installed. ZeRO 1-3 on CPU need no compiled ops.
	$(PIP) install setuptools wheel
	$(PIP) install --no-build-isolation deepspeed==0.19.8 $(TORCH)
	$(PY) -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 'torch was changed: ' + torch.__version__)"
	@# The docs extra (pure-Python wheels) too: tests/docs builds the site with `mkdocs build --strict`.
	$(PIP) install -e ".[test,docs]" $(TORCH)
	$(PY) -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 'torch was changed: ' + torch.__version__)"
	touch $@

venv: $(VENV)/.installed

# The documentation site (docs/, mkdocs.yml): MkDocs + Material, API pages from our docstrings.
$(VENV)/.installed-docs: $(VENV)/.installed
	$(PIP) install -e ".[docs]" $(TORCH)
	$(PY) -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 'torch was changed: ' + torch.__version__)"
	touch $@

docs: $(VENV)/.installed-docs
	$(VENV)/bin/mkdocs build --strict -d site

docs-serve: $(VENV)/.installed-docs
	$(VENV)/bin/mkdocs serve

demo: $(VENV)/.installed
	$(VENV)/bin/accelerate launch --cpu --num_processes 2 examples/train_classifier.py

# Two "nodes" on loopback (elastic --nnodes 1:2): one is killed mid-epoch, the survivor trains on,
# a replacement joins; prints the membership log and the final accuracy (examples/multinode_demo.py).
demo-multinode: $(VENV)/.installed
	$(PY) examples/multinode_demo.py

# Is resume really exact? Rounds of the bundled example under seeded random faults (SIGKILL of a rank,
# of the launcher, a full disk during a save, a stalled rank, a kill mid-save) until CHAOS_SECONDS have
# passed; each round must end with an uninterrupted run's weights, no process left and only verified
# checkpoints (tests/chaos/). The seed is printed: `make chaos CHAOS_SEED=N` replays a failure.
CHAOS_SECONDS ?= 120
CHAOS_SEED ?=

chaos: $(VENV)/.installed-test
	$(PY) -m tests.chaos --seconds $(CHAOS_SECONDS) $(if $(CHAOS_SEED),--seed $(CHAOS_SEED))

test: $(VENV)/.installed-test
	@# Open MPI for the mpirun launch tests: installed when apt and root are at hand, else those tests skip.
	@command -v mpirun >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		(apt-get update -qq && apt-get install -y -qq --no-install-recommends openmpi-bin) >/dev/null 2>&1; } || \
		echo "mpirun not installed (needs apt-get and root): the mpirun tests will be skipped"
	@# Headless Chromium for the docs site's browser check (tests/docs/test_browser.py), the same way.
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		(apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium) >/dev/null 2>&1; } || \
		echo "chromium not installed (needs apt-get and root): the docs browser check will be skipped"
	@# DeepSpeed JIT-builds a small C++ op (shared-memory collectives) the first time a CPU run starts;
	@# built here once, outside any test's timeout (a few seconds when it is already in the cache).
	$(PY) -c "from deepspeed.comm.torch import build_shm_op; build_shm_op()" >/dev/null
	@# The same for its CPU Adam (the optimizer-offload tests): a minute or two of C++ the first time.
	$(PY) -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load()" >/dev/null
	@# Two pytest sessions side by side: the tests that start processes, and at nice 19 the ones that
	@# run in the test process only, on the cores the first leaves idle (tests/helpers/lanes.py).
	$(PY) -m tests.helpers.lanes -q --durations=15

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check src tests bench examples docs_hooks
	$(VENV)/bin/ruff format --check src tests bench examples docs_hooks
	$(VENV)/bin/mypy

# The XLA backend on torch_xla's CPU device, in a side environment (torch_xla has no build for torch
# 2.13): torch 2.9 + torch_xla 2.9 (torch pulls its CUDA libraries, about 7 GB) + this package + pytest.
# Nothing in $(VENV) changes. A pip config that pins torch for the main venv is bypassed here.
XLA_VENV := .venv-xla
XLA_PY := $(XLA_VENV)/bin/python
XLA_PIP := PIP_CONFIG_FILE=/dev/null $(XLA_PY) -m pip --disable-pip-version-check -q
XLA_TORCH := torch==2.9.* torch_xla==2.9.*

$(XLA_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(XLA_VENV)
	$(XLA_PIP) install $(XLA_TORCH) pytest pytest-timeout
	$(XLA_PIP) install -e . $(XLA_TORCH)
	$(XLA_PY) -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.9.') else 'torch was changed: ' + torch.__version__)"
	touch $@

test-xla: $(XLA_VENV)/.installed
	PJRT_DEVICE=CPU $(XLA_PY) -m pytest -q tests/xla

bench: $(VENV)/.installed
	$(PY) bench/run_all.py

# The plots on docs/benchmarks.md, drawn from its tables into docs/img/ (after editing the tables;
# tests/bench/test_plot.py fails while the images show other numbers).
bench-plots: $(VENV)/.installed-docs
	$(PY) bench/plot.py

# One call on a lent GPU machine: the CUDA test areas and the GPU benchmark (ours vs the installed
# upstream accelerate), one summary table. Uses the machine's own python (no venv is made or used);
# GPU_CHECK_DRY=1 prints the plan and the exact commands instead. See bench/gpu/check.py.
GPU_PY ?= python3
GPU_CHECK_OUT ?= gpu-check-out

gpu-check:
	$(GPU_PY) bench/gpu/check.py --out $(GPU_CHECK_OUT)

clean:
	rm -rf $(VENV) $(XLA_VENV) build dist site src/*.egg-info
