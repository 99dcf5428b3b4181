# shardlab: two commands do everything (`make run`, `make test`); `make lab` opens the course.
# `make` alone prints the targets; each target's `## ` comment is its line of help.
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
PORTFOLIO ?= portfolio_out
SUBMISSIONS ?= submissions
GRADE ?= grade_out
ONLY ?=
AUTOGRADER ?= autograder_out

.DEFAULT_GOAL := help
.PHONY: help venv run test test-quick test-long test-sandbox test-alternatives test-heldout test-browser lab sync cells lint check drills supervise bench torture attacks portfolio grade sandbox autograder clean

help: ## print the targets and what each does
	@echo "shardlab — make TARGET [SEED=17 BATCH_SIZE=7 IMPL=reference OUT=receipts]"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)/  \1\t\2/' | expand -t 16

venv: $(STAMP) ## build .venv with the exact pins and the 'Python (shardlab)' kernel (make run/test do this first)
	@# the library's bytecode, written once here (up-to-date files are skipped) and read by every interpreter a
	@# run or a check starts: where PYTHONDONTWRITEBYTECODE is set, each would otherwise compile the sources again
	@$(BIN)/python -m compileall -q -j 0 lib/shardlab rig >/dev/null

$(STAMP): requirements-cpu.txt pyproject.toml
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if v == (3, 11) else f"shardlab needs Python 3.11, {sys.executable} is {v[0]}.{v[1]}: run make PYTHON=python3.11 (or see docs/evidence.md for conda)")'
	@start=$$(date +%s); echo "[make] creating $(VENV) and installing the pinned packages (README.md states how long this took where the course was measured) ..."; \
	$(PYTHON) -m venv $(VENV) && \
	$(BIN)/python -m pip install --disable-pip-version-check --quiet -r requirements-cpu.txt && \
	$(BIN)/python -m pip install --disable-pip-version-check --quiet --no-deps --no-build-isolation -e . && \
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Python (shardlab)" >/dev/null && \
	touch $(STAMP) && echo "[make] $(VENV) ready in $$(( $$(date +%s) - start )) s"

run: venv ## execute every stage notebook into OUT (receipts/): HTML pages, index.html, audit.json, trace
	@start=$$(date +%s); env -u MPLBACKEND $(BIN)/python -m shardlab run --out $(OUT) --seed $(SEED) --batch-size $(BATCH_SIZE) --implementation $(IMPL) --workspace $(WORKSPACE) --replace \
	&& echo "[make] run finished in $$(( $$(date +%s) - start )) s"

test: venv ## the test suite on two workers (executes every notebook once); not the sandbox's, nor test-long's (whole-program runs, the planted mistakes beyond one per check)
	@start=$$(date +%s); $(BIN)/python -m pytest -m "not sandbox and not long" \
	&& echo "[make] test finished in $$(( $$(date +%s) - start )) s"

test-quick: venv ## the inner loop after every edit (its time: bench/loops/loops.json): every test that runs no notebook, controller group or learner run
	@start=$$(date +%s); PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest --quick -m "not sandbox" -p no:cacheprovider \
	&& echo "[make] test-quick finished in $$(( $$(date +%s) - start )) s"

test-long: venv ## the tests marked long, which make test leaves out: whole programs run end to end (controllers, Lab, reruns), the planted mistakes beyond one per check
	@start=$$(date +%s); $(BIN)/python -m pytest -p no:cacheprovider -m "long and not sandbox" \
	&& echo "[make] test-long finished in $$(( $$(date +%s) - start )) s"

test-alternatives: venv ## every correct file (tests/correct/, the held-out correct cases): every check, stages 1-4 like the reference; 20 search seeds
	@start=$$(date +%s); $(BIN)/python -m pytest -p no:cacheprovider --dist load tests/alternatives_all.py \
	&& echo "[make] test-alternatives finished in $$(( $$(date +%s) - start )) s"

test-heldout: venv ## every held-out wrong file only the randomised search catches is caught by it (tests/heldout_all.py)
	@start=$$(date +%s); $(BIN)/python -m pytest -p no:cacheprovider --dist load tests/heldout_all.py \
	&& echo "[make] test-heldout finished in $$(( $$(date +%s) - start )) s"

test-sandbox: venv sandbox ## the tests that need bubblewrap (grade's sandbox; make sandbox installs it as root)
	@start=$$(date +%s); $(BIN)/python -m pytest -p no:cacheprovider -m sandbox \
	&& echo "[make] test-sandbox finished in $$(( $$(date +%s) - start )) s"

test-browser: venv ## a real headless Chromium: stage 1 run through JupyterLab's UI, receipts opened offline
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then echo "[make] installing Debian's chromium and chromium-driver ..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else echo "test-browser needs Debian's chromium: run 'sudo apt-get install chromium chromium-driver' once, or make test-browser as root"; exit 1; fi
	$(BIN)/python -m pip install --disable-pip-version-check --quiet -r requirements-browser.txt
	$(BIN)/python -m pytest -n 0 -p no:cacheprovider browser_tests

lint: venv ## ruff check and format check of lib/, rig/ and tests/
	$(BIN)/ruff check lib rig tests
	$(BIN)/ruff format --check lib rig tests

lab: venv ## copy the notebooks into WORKSPACE (workspace/) and open JupyterLab on them
	@$(BIN)/python -m shardlab workspace $(WORKSPACE)
	@echo "Open the URL below; pick the kernel 'Python (shardlab)' if asked. Your copies are in $(WORKSPACE)/."
	@echo "Each copy runs implementation = \"reference\" (its parameters cell) until you set that line to your file's path, e.g. \"../my_model.py\"."
	env -u MPLBACKEND $(BIN)/jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) --notebook-dir=$(WORKSPACE) $(if $(filter 0,$(shell id -u)),--allow-root,)

sync: venv ## re-pair the notebooks with their MyST .md sources (jupytext)
	$(BIN)/jupytext --sync notebooks/*.ipynb

cells: venv ## rewrite the notebooks' rule and hint cells and the starter's rules from learner/rules.py and hints.py
	$(BIN)/python -m shardlab cells --notebooks notebooks

clean: ## remove .venv and caches (not receipts/)
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis "$${TMPDIR:-/tmp}/shardlab-test-programs-$$(id -u)"
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# Beyond the course: each writes machine-readable results into OUT.
check: venv ## check an implementation stage by stage: IMPL=my_impl.py STAGE=1 (ONLY=1: just that stage)
	$(BIN)/python -m shardlab check --implementation $(IMPL) --stage $(STAGE) $(if $(filter 1 yes,$(ONLY)),--only,) $(if $(filter-out receipts,$(OUT)),--output $(OUT),)

portfolio: venv ## what you hand in, from a finished run: IMPL=my_model.py OUT=my_receipts -> PORTFOLIO (portfolio_out/)
	$(BIN)/python -m shardlab portfolio --receipts $(OUT) --implementation $(IMPL) --workspace $(WORKSPACE) --out $(PORTFOLIO)

grade: venv sandbox ## every submission in SUBMISSIONS (submissions/), each in its own sandbox -> GRADE (grade_out/)
	$(BIN)/python -m shardlab grade $(SUBMISSIONS) --out $(GRADE)

sandbox: ## install Debian's bubblewrap (bwrap), the sandbox grade runs each submission in (as root, or says how)
	@if command -v bwrap >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then echo "[make] installing Debian's bubblewrap ..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	else echo "grade needs bubblewrap: run 'sudo apt-get install bubblewrap' once, or make sandbox as root"; exit 1; fi

autograder: venv ## a Gradescope autograder bundle (setup.sh, run_autograder, the checker) -> AUTOGRADER (autograder_out/)
	$(BIN)/python -m shardlab.handin.autograder bundle --out $(AUTOGRADER) --checkout .

drills: venv ## every stage 5 drill (kills, freezes, preemption, async saves, crash loop, launch paths) into drills_out/
	$(BIN)/python -m shardlab drills --out $(if $(filter receipts,$(OUT)),drills_out,$(OUT))

supervise: venv ## a supervised 2x2 training job (ARGS='--steps 200 --async-save --keep 2 ...') into supervise_out/
	$(BIN)/python -m shardlab supervise --out $(if $(filter receipts,$(OUT)),supervise_out,$(OUT)) $(ARGS)

bench: venv ## measure three optimisations beside their baselines, then the loops (bench/loops/loops.json), into bench/
	$(BIN)/python -m rig.bench --out $(if $(filter receipts,$(OUT)),bench,$(OUT))
	$(BIN)/python -m rig.loops --out $(if $(filter receipts,$(OUT)),bench,$(OUT))/loops

torture: venv ## kill, corrupt and misuse the checkpoint path into torture_out/
	$(BIN)/python -m rig.torture --out $(if $(filter receipts,$(OUT)),torture_out,$(OUT))

attacks: venv sandbox ## grade hostile submissions beside honest ones, each in its own sandbox, into attacks_out/
	$(BIN)/python -m rig.grade_attacks --out $(if $(filter receipts,$(OUT)),attacks_out,$(OUT))
