# The two set-up commands of the README. scripts/bootstrap.py is the one place that
# decides what to install into .venv (it keeps a CUDA torch that is already there).
PY ?= python3

.PHONY: demo test lint
demo:
	$(PY) scripts/bootstrap.py
	.venv/bin/ptt demo

test:
	$(PY) scripts/bootstrap.py --dev
	.venv/bin/python -m pytest -q

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
