# shardlab: two commands do everything (`make run`, `make test`); `make lab` opens the course.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.shardlab-installed
KERNEL := shardlab

OUT ?= receipts
SEED ?= 17
BATCH_SIZE ?= 7
IMPL ?= reference
STAGE ?= all
PORT ?= 8888
WORKSPACE ?= workspace

.PHONY: venv run test lab sync lint check drills bench torture clean

venv: $(STAMP)

$(STAMP): requirements-cpu.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "shardlab pins are for Python 3.11; set PYTHON=python3.11"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check --quiet -r requirements-cpu.txt
	$(BIN)/python -m pip install --disable-pip-version-check --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Python (shardlab)" >/dev/null
	@touch $(STAMP)

run: venv
	env -u MPLBACKEND $(BIN)/python -m shardlab run --out $(OUT) --seed $(SEED) --batch-size $(BATCH_SIZE) --implementation $(IMPL) --replace $(if $(wildcard bench/bench.json),--bench bench/bench.json,)

test: venv
	$(BIN)/python -m pytest

lint: venv
	$(BIN)/ruff check lib tests
	$(BIN)/ruff format --check lib tests

lab: venv
	@$(BIN)/python -m shardlab workspace $(WORKSPACE)
	@echo "Open the URL below; pick the kernel 'Python (shardlab)' if asked. Your copies are in $(WORKSPACE)/."
	env -u MPLBACKEND $(BIN)/jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) --notebook-dir=$(WORKSPACE) $(if $(filter 0,$(shell id -u)),--allow-root,)

sync: venv
	$(BIN)/jupytext --sync lib/shardlab/course/notebooks/*.ipynb

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# Beyond the course: each writes machine-readable results into OUT.
check: venv
	$(BIN)/python -m shardlab check --implementation $(IMPL) --stage $(STAGE) $(if $(filter-out receipts,$(OUT)),--output $(OUT),)

drills: venv
	$(BIN)/python -m shardlab drills --out $(if $(filter receipts,$(OUT)),drills_out,$(OUT))

bench: venv
	$(BIN)/python -m shardlab bench --out $(if $(filter receipts,$(OUT)),bench,$(OUT))

torture: venv
	$(BIN)/python -m shardlab torture --out $(if $(filter receipts,$(OUT)),torture_out,$(OUT))
