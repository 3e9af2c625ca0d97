# zeroloop: `make repro` runs the main job, `make test` the test suite.
# Both create .venv and install what they need from nothing.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

CHROMIUM ?= /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup browser gnugo repro pull preset test test-fast lint bench serve ui docs clean

setup: $(STAMP)

# uv installs (deploy/install.py: pip's find-links, constraints and indexes carried over; pip if uv fails);
# the venv starts without pip (ensurepip is 8 s on a Zen 3): uv comes from the base Python's pip, pip from uv
$(STAMP): pyproject.toml deploy/install.py
	test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV)
	$(BIN)/python deploy/install.py solver,dev,postgres,auth
	touch $(STAMP)

# The main job: the DVC pipeline with params.yaml (Connect Four by default).
# Stages run `python -m zeroloop.pipeline.stages ...`, so the venv goes first on PATH.
# `zeroloop check` first: DVC resolves the foreach over `generations` before any stage runs, so a
# bad entry would otherwise surface as DVC's graph error instead of the stages' one line.
repro: $(STAMP)
	@$(BIN)/zeroloop check
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/dvc repro

# A teammate's clone: every generation's data and models from the DVC remote (docs/cluster.md).
# zeroloop pull checks the remote first: DVC does not name a remote folder that is gone.
pull: $(STAMP)
	@$(BIN)/zeroloop pull

# Debian's Chromium for the real-browser test (tests/test_browser.py, driven by Playwright)
browser:
	@test -x $(CHROMIUM) || { echo "installing Debian's chromium for the browser test"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }

# Debian's GnuGo for the Go tests (tests/test_go.py checks the rules against it over GTP)
GNUGO ?= /usr/games/gnugo
gnugo:
	@test -x $(GNUGO) || command -v gnugo >/dev/null || { echo "installing Debian's gnugo for the Go tests"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq gnugo >/dev/null; }

# two test processes (pytest-xdist): a module that starts a cluster or server once keeps its
# tests in one of them (its pytestmark's xdist_group, with --dist loadgroup)
TEST_WORKERS ?= 2

# params.yaml from a preset: the defaults with presets/$(NAME).yaml over them (make preset NAME=go-7);
# without NAME, the list of presets
preset: $(STAMP)
	$(BIN)/zeroloop preset $(NAME)

test: $(STAMP) browser gnugo
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=30

# the inner loop: in-process tests only (no server, cluster or subprocess chain)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks deploy
	$(BIN)/lint-imports

serve: $(STAMP)
	$(BIN)/zeroloop serve

# The MLflow UI on the pipeline's store, opened on the runs of the pipeline's experiment
# (params.yaml mlflow.experiment). MLflow 3.17 opens an experiment on its GenAI overview unless the
# URL says workflowType=machine_learning (docs/tracking.md), so the URL printed here says it.
# One worker and no job runner (it serves GenAI features: judges, issue detection) keep it light.
UI_STORE ?= sqlite:///mlflow.db
UI_PORT ?= 5000
ui: $(STAMP)
	@MLFLOW_TRACKING_URI="$(UI_STORE)" $(BIN)/python -c 'from mlflow.tracking import MlflowClient; \
	  from zeroloop.pipeline.params import load_params; \
	  from zeroloop.pipeline.tracking.store import open_experiment, tracking_uri; \
	  exp = open_experiment(MlflowClient(tracking_uri()), load_params().mlflow.experiment); \
	  print(f"MLflow UI, once it has started: http://127.0.0.1:$(UI_PORT)/#/experiments/{exp}/runs?workflowType=machine_learning", flush=True)'
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false exec $(BIN)/mlflow server --backend-store-uri "$(UI_STORE)" --host 127.0.0.1 --port $(UI_PORT) --workers 1

bench: $(STAMP)
	$(BIN)/python benchmarks/selfplay_throughput.py
	$(BIN)/python benchmarks/go_rules.py

# The documentation site (mkdocs.yml, docs/) into site/, strict: a broken link fails.
# Live preview while editing: .venv/bin/mkdocs serve (http://127.0.0.1:8000)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache
