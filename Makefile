# The set-up commands of the README. scripts/bootstrap.py is the one place that decides what to
# install into .venv (the CPU torch wheel without a GPU; a CUDA torch that is already there is kept).
PY ?= python3
# pytest-xdist workers: one per CPU, at least 2 (the suite waits on child processes a good part of
# the time) and at most 4 (each worker starts its own fork servers). --dist loadfile keeps a file's tests on
# one worker, so the fixtures a module builds once (a Ray instance, the snippet run) are built once.
WORKERS ?= $(shell $(PY) -c "import os; print(min(4, max(2, os.cpu_count() or 1)))")
PYTEST = .venv/bin/python -m pytest -q -n $(WORKERS) --dist loadfile

.PHONY: demo test test-quick lint
demo:
	$(PY) scripts/bootstrap.py
	.venv/bin/ptt demo

# The whole suite (GPU tests are skipped without a GPU).
test:
	$(PY) scripts/bootstrap.py --dev
	$(PYTEST)

# Everything but the tests marked slow (about half the time of `make test`).
test-quick:
	$(PY) scripts/bootstrap.py --dev
	$(PYTEST) -m "not slow"

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
