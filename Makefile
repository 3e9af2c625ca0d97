# zeroloop: `make repro` runs the main job, `make test` the test suite.
# Both create .venv and install what they need from nothing.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup repro test test-fast lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[solver,dev]"
	touch $(STAMP)

# The main job: the DVC pipeline with params.yaml (Connect Four by default).
# Stages run `python -m zeroloop.stages ...`, so the venv goes first on PATH.
repro: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/dvc repro

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/selfplay_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache
