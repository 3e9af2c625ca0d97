# zeroloop: `make repro` runs the main job, `make test` the test suite.
# Both create .venv and install what they need from nothing.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup repro test lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[solver,dev]"
	touch $(STAMP)

# Until the DVC pipeline lands this runs the engine demo: self-play games of
# Connect Four through the batched search (random net), then an analysis.
repro: $(STAMP)
	$(BIN)/zeroloop selfplay --game connect4 --games 64 --sims 100 --out data/demo/selfplay.jsonl
	printf '4\n4453\n112233\n' | $(BIN)/zeroloop analyse --game connect4 --sims 200

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/selfplay_throughput.py

clean:
	rm -rf $(VENV) data/demo .pytest_cache
