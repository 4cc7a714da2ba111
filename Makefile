# The set-up commands of the README. scripts/bootstrap.py is the one place that decides what to
# install into .venv (the CPU torch wheel without a GPU; a CUDA torch that is already there is kept).
PY ?= python3
# pytest-xdist workers: one per CPU, at least 4 and at most 8. More workers than CPUs pay: part of the suite
# waits (on timeouts it provokes, on servers it talks to), and on 2 CPUs 2 / 3 / 4 workers took 219 / 204 / 196 s
# for the same suite (3 and 4 within noise since its fork servers come from shared zygotes, tests/zygotes.py).
# --dist loadfile keeps a file's tests on one worker, so the fixtures a module builds once (a Ray instance, the
# snippet run) are built once; files are handed out longest first (tests/file_order.py), not by xdist's count.
WORKERS ?= $(shell $(PY) -c "import os; print(min(8, max(4, os.cpu_count() or 1)))")
# Bytecode is written even where the environment sets PYTHONDONTWRITEBYTECODE: the suite starts over a hundred
# Python processes (workers, fork servers, servers, CLI calls) that would each compile this package's sources and
# rewrite the test modules' asserts again. On 2 CPUs, from a checkout without __pycache__, two pairs of runs took
# 336 and 304 CPU-seconds (172 s, 157 s) with it against 357 and 362 (183 s, 185 s) without.
PYTEST = PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder
# With an NVIDIA GPU the suite runs in two passes: every test not marked gpu with the GPU hidden (their kernels
# then run under the Triton interpreter in the test process, as in CI), then the gpu tests on the GPU. Triton picks
# interpreter or compiler once per process, so one pytest process cannot do both (tests/conftest.py says so).
HAS_NVIDIA := $(shell ls /dev/nvidia0 >/dev/null 2>&1 && echo 1)

.PHONY: demo test test-quick lint
demo:
	$(PY) scripts/bootstrap.py
	.venv/bin/ptt demo

# The whole suite (GPU tests are skipped without a GPU).
test:
	$(PY) scripts/bootstrap.py --dev
ifeq ($(HAS_NVIDIA),1)
	CUDA_VISIBLE_DEVICES= $(PYTEST) -m "not gpu"
	$(PYTEST) -m gpu
else
	$(PYTEST)
endif

# Everything but the tests marked slow: the reference kernels, the CLI, the MCP and HTTP faces and the lighter
# engine checks, in about a minute (the full `make test` is the gate).
test-quick:
	$(PY) scripts/bootstrap.py --dev
ifeq ($(HAS_NVIDIA),1)
	CUDA_VISIBLE_DEVICES= $(PYTEST) -m "not gpu and not slow"
	$(PYTEST) -m "gpu and not slow"
else
	$(PYTEST) -m "not slow"
endif

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
