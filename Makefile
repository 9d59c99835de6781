# Every verb of the suite. `make help` lists them. The first target that needs the virtual
# environment creates it (.venv) and installs the project into it, so on a fresh machine
# `make demo` and `make test` are the whole set-up.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SCALE ?= cpu
CLUSTER ?= sim  # sim (threads of one process; seeds in lock-step) | local (worker processes) | slurm
OUT ?= outputs
# Reports go to $(OUT)/results/<preset>/$(SCALE) unless asked otherwise: RESULTS=<dir>, or
# PUBLISH=1 for the checkout's committed results/ (never written by accident).
RESULTS ?=
PUBLISH ?=
# JOBS=N: each preset's sweep as N concurrent sweeps sharing the cores (experiments.sweep --jobs;
# docs/cluster.md, "Sweeps in parallel")
JOBS ?= 1
# A preset's sweep (its missing points; every point runs, failures listed at the end), then its
# report
SWEEP_ARGS = --scale $(SCALE) --out-root "$(OUT)" $(if $(RESULTS),--results "$(RESULTS)") \
	$(if $(filter 1 yes true,$(PUBLISH)),--publish)$(if $(filter-out 1,$(JOBS)), --jobs $(JOBS))
# CLUSTER=slurm: the jobs' shape, each passed to every run as its cluster.* key when set
# (conf/cluster/slurm.yaml; site defaults belong in conf/local/slurm.yaml). Without GPUS_PER_NODE
# the jobs ask SLURM for no GPU. The paper's tables: NODES=2 GPUS_PER_NODE=8 (16 workers).
NODES ?=
GPUS_PER_NODE ?=
PARTITION ?=
ACCOUNT ?=
TIMEOUT_MIN ?=
SLURM_KEYS = $(if $(NODES),cluster.nodes=$(NODES)) \
	$(if $(GPUS_PER_NODE),cluster.gpus_per_node=$(GPUS_PER_NODE)) \
	$(if $(PARTITION),cluster.partition=$(PARTITION)) \
	$(if $(ACCOUNT),cluster.account=$(ACCOUNT)) \
	$(if $(TIMEOUT_MIN),cluster.timeout_min=$(TIMEOUT_MIN))
ifneq ($(strip $(SLURM_KEYS)),)
ifneq ($(strip $(CLUSTER)),slurm)
$(error NODES, GPUS_PER_NODE, PARTITION, ACCOUNT and TIMEOUT_MIN apply to CLUSTER=slurm)
endif
endif
# `make table1 SCALE=paper CLUSTER=slurm NODES=2 GPUS_PER_NODE=8` is
# `python run.py -m experiment=table1 scale=paper cluster=slurm cluster.nodes=2
#  cluster.gpus_per_node=8 out_root=outputs/table1` (the runs in outputs/table1/runs), then the report
SWEEP = $(PY) -m experiments.sweep --cluster $(strip $(CLUSTER)) $(SWEEP_ARGS) $(1) \
	$(strip $(SLURM_KEYS))
# The verdicts' presets (controls, losp, pseudo_sync) run at VERDICT_SCALE: Fashion-MNIST,
# where the controls pass (conf/scale/fmnist.yaml); `make controls VERDICT_SCALE=cpu` shows the
# digits failing them. $(call VSWEEP,<preset>,<scale>)
VERDICT_SCALE ?= fmnist
VSWEEP = $(PY) -m experiments.sweep --cluster $(strip $(CLUSTER)) \
	$(subst --scale $(SCALE),--scale $(2),$(SWEEP_ARGS)) $(1) $(strip $(SLURM_KEYS))
# PUBLISH=1: every refusal that needs no work (a modified checkout, runs made from one, where the
# report goes) before any work: `experiments.sweep --check` of each preset a target sweeps, first.
# $(call PUBLISH_CHECK,<preset>[,<scale>])
PUBLISHING = $(filter 1 yes true,$(PUBLISH))
PUBLISH_CHECK = $(if $(PUBLISHING),$(PY) -m experiments.sweep --cluster $(strip $(CLUSTER)) \
	$(if $(2),$(subst --scale $(SCALE),--scale $(2),$(SWEEP_ARGS)),$(SWEEP_ARGS)) $(1) --check \
	$(strip $(SLURM_KEYS)),@:)

.DEFAULT_GOAL := help
.PHONY: help install test test-quick test-fast test-unit test-dist test-e2e test-slurm lint fmt \
	demo smoke clean table1 table2 figures fig4 fig5 tune report bench bench-quick gpu-check docs \
	recompute verify data controls losp overlap-straggler pseudo-sync pseudo-sync-speed \
	overlap-sync report-check replicate robustness power \
	wandb-report

help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) ## Create .venv and install the suite with its dev tools (done by the others when needed)

# The tests run in TEST_JOBS pytest-xdist processes (`--dist loadgroup`: the SLURM tests, which
# share one started cluster, stay in one; tests/conftest.py). TEST_JOBS=0: one process, as before.
# Three on 2 cores: many tests wait (on a timeout, a hung worker's grace, SLURM's scheduler) and a
# third process computes meanwhile; measured back to back on this project's 2 cores, 623 s with 3
# against 686 s with 2 and 671 s with 4 (docs/tests.md). The quick tests only compute: 2 there
# (3 were no faster).
TEST_JOBS ?= 3
QUICK_JOBS ?= 2
xdist = $(if $(filter 0,$(1)),-p no:xdist,-n $(1) --dist loadgroup)
test: $(STAMP) ## The whole test suite (unit, distributed, end-to-end): what CI runs
	$(PY) -m pytest -q $(call xdist,$(TEST_JOBS)) --durations=25

# The inner loop: every test that starts no worker process (run.py's bad input runs in the
# test's own process); `make test` stays the whole suite.
QUICK = not dist and not e2e and not slurm and not slow
test-quick: $(STAMP) ## The tests that start no worker process (the inner loop while editing)
	$(PY) -m pytest -q $(call xdist,$(QUICK_JOBS)) -m "$(QUICK)"

test-fast: $(STAMP) ## Everything but the tests marked slow (the 50-run teardown loop)
	$(PY) -m pytest -q -m "not slow"

test-unit: $(STAMP) ## Unit tests only (no process groups)
	$(PY) -m pytest -q -m "not dist and not e2e"

test-dist: $(STAMP) ## Distributed tests (2-4 gloo processes)
	$(PY) -m pytest -q -m dist

test-e2e: $(STAMP) ## End-to-end runs of run.py and the analysis
	$(PY) -m pytest -q -m e2e

test-slurm: $(STAMP) ## The SLURM tests alone (they start a two-node SLURM here; root + apt)
	COMMSGD_REQUIRE_SLURM=1 $(PY) -m pytest -q -m slurm

lint: $(STAMP) ## ruff lint and format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

fmt: $(STAMP) ## Format the code with ruff
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The demo's one real multi-process point (then every point with its workers in one process).
DEMO_REAL = algorithm=overlap_local_sgd seed=0

demo: $(STAMP) ## Every algorithm, briefly, 3 seeds, digits, 4 workers; writes $(OUT)/results/demo/$(SCALE) (PUBLISH=1: results/)
	$(call PUBLISH_CHECK,demo)
	@# one point with real worker processes; the sweep finds it finished (same run, same record)
	$(PY) run.py experiment=demo scale=$(SCALE) cluster=local $(DEMO_REAL) progress=false \
		out_root="$(OUT)/demo"
	@# the comparison, every worker a thread of one process (cluster=sim)
	$(PY) -m experiments.sweep demo --cluster sim $(SWEEP_ARGS)

# The Overlap-Local-SGD presets run the seeds of their scale (scale.table_seeds): 3 at SCALE=cpu
# (quick runs), the verdicts' 8 at SCALE=fmnist (`make report` runs table1 and table2 at both).
table1: $(STAMP) ## Overlap-Local-SGD Table 1 (IID): run missing points, write $(OUT)/results/table1/$(SCALE) (PUBLISH=1: results/; SCALE=fmnist: the verdicts' scale, 8 seeds)
	$(call SWEEP,table1)

table2: $(STAMP) ## Table 2 (non-IID): run missing points, write $(OUT)/results/table2/$(SCALE) (PUBLISH=1: results/; SCALE=fmnist: the verdicts' scale, 8 seeds, the paper's skew on 8 workers)
	$(call SWEEP,table2)

figures: $(STAMP) ## Figures 4 and 5 of the Overlap-Local-SGD paper (runs what is missing)
	$(call PUBLISH_CHECK,fig4)
	$(call PUBLISH_CHECK,fig5)
	$(call SWEEP,fig4)
	$(call SWEEP,fig5)

fig4: $(STAMP) ## Figure 4 alone (the error-runtime trade-off on the modeled network)
	$(call SWEEP,fig4)

fig5: $(STAMP) ## Figure 5 alone (non-IID training curves; SCALE=fmnist: the verdicts' scale, Table 2's partition: the paper's skew on 8 workers, 8 seeds)
	$(call SWEEP,fig5)

tune: $(STAMP) ## Each method's base LR on a validation split, seeds 100-101, grid extended past an edge: at the demo's setting -> conf/tuned/$(SCALE).yaml; PRESET=name: at that preset's -> conf/tuned/$(SCALE)/name.yaml
	$(PY) -m analysis.tuning.tune_preset $(or $(PRESET),tune) --scale $(SCALE) --cluster sim --out-root "$(OUT)"

controls: $(STAMP) ## The controls at VERDICT_SCALE (fmnist): effects it must detect, identities it must call equivalent (results/controls)
	$(call VSWEEP,controls,$(VERDICT_SCALE))

losp: $(STAMP) ## LOSP vs OSP vs sync SGD, one slow worker, modeled network, time budget, 8 seeds, at VERDICT_SCALE (results/losp)
	$(call VSWEEP,losp,$(VERDICT_SCALE))

overlap-straggler: $(STAMP) ## Overlap-Local-SGD vs Local/sync SGD with random per-step stragglers, time budget, 8 seeds, at VERDICT_SCALE (results/overlap_straggler)
	$(call VSWEEP,overlap_straggler,$(VERDICT_SCALE))

pseudo-sync: $(STAMP) ## Pseudo-synchronous vs synchronous SGD: accuracy, speed, weak scaling, 8 seeds, at VERDICT_SCALE (results/pseudo_sync)
	$(call VSWEEP,pseudo_sync,$(VERDICT_SCALE))

pseudo-sync-speed: $(STAMP) ## Pseudo-synchronous vs synchronous SGD: time to accuracy on a time budget, 8 seeds, at VERDICT_SCALE (results/pseudo_sync_speed)
	$(call VSWEEP,pseudo_sync_speed,$(VERDICT_SCALE))

overlap-sync: $(STAMP) ## Overlap-Local-SGD at tau 1, 2 vs sync SGD, IID and non-IID, 8 seeds, at VERDICT_SCALE (results/overlap_sync)
	$(call VSWEEP,overlap_sync,$(VERDICT_SCALE))

# A preset's committed claims tested again on seeds never used (analysis/reproduce/replicate.py):
# the same sweep on SEEDS (default: as many as committed, from 200 up), the comparison beside its
# report in $(OUT)/replicate/results/<PRESET>/<scale>; PUBLISH=1 copies it into the committed
# result (results/<PRESET>/<scale>/replication/), which the verdicts page reads.
replicate: $(STAMP) ## PRESET's claims rerun on fresh seeds (SEEDS=200-207) at VERDICT_SCALE: does each verdict replicate? (PUBLISH=1: into results/)
	@test -n "$(PRESET)" || { echo "error: make replicate needs PRESET=<name> (a preset with a committed result)" >&2; exit 2; }
	$(PY) -m analysis.reproduce.replicate $(PRESET) --scale $(VERDICT_SCALE) --cluster $(strip $(CLUSTER)) \
		--out-root "$(OUT)" $(if $(SEEDS),--seeds $(SEEDS)) $(if $(filter-out 1,$(JOBS)),--jobs $(JOBS)) \
		$(if $(filter 1 yes true,$(PUBLISH)),--publish)

# A preset's committed claims tested again at other learning rates on the same seeds
# (analysis/reproduce/robustness.py): each method at its neighbouring grid rates, every method at
# a shared rate; only the changed methods' runs are made. PUBLISH=1 copies the comparison into
# results/<PRESET>/<scale>/robustness/, which the verdicts page reads.
robustness: $(STAMP) ## PRESET's decisive verdicts at other learning rates (each method's neighbours, a shared rate; METHODS=a,b: only those) at VERDICT_SCALE (PUBLISH=1: into results/)
	@test -n "$(PRESET)" || { echo "error: make robustness needs PRESET=<name> (a preset with a committed result)" >&2; exit 2; }
	$(PY) -m analysis.reproduce.robustness $(PRESET) --scale $(VERDICT_SCALE) --cluster $(strip $(CLUSTER)) \
		--out-root "$(OUT)" $(if $(METHODS),--methods $(METHODS)) \
		$(if $(filter 1 yes true,$(PUBLISH)),--publish)

# A preset's claims that cannot tell, rerun at the n that reaches their margin (at most 24;
# analysis/reproduce/power.py): the committed seeds and the next ones, reported with the committed
# runs. PUBLISH=1 copies the comparison into results/<PRESET>/<scale>/power/, which the verdicts
# page reads.
power: $(STAMP) ## PRESET's claims that cannot tell at the n their margin needs (<= 24) at VERDICT_SCALE (PUBLISH=1: into results/)
	@test -n "$(PRESET)" || { echo "error: make power needs PRESET=<name> (a preset with a committed result)" >&2; exit 2; }
	$(PY) -m analysis.reproduce.power $(PRESET) --scale $(VERDICT_SCALE) --cluster $(strip $(CLUSTER)) \
		--out-root "$(OUT)" $(if $(filter 1 yes true,$(PUBLISH)),--publish)

# `make report PUBLISH=1`: every preset's checks before the first one runs (its prerequisites
# run in order, this one first).
report-check: $(STAMP)
	$(call PUBLISH_CHECK,controls,$(VERDICT_SCALE))
	$(call PUBLISH_CHECK,controls)
	$(call PUBLISH_CHECK,demo)
	$(call PUBLISH_CHECK,table1)
	$(call PUBLISH_CHECK,table1,$(VERDICT_SCALE))
	$(call PUBLISH_CHECK,table2)
	$(call PUBLISH_CHECK,table2,$(VERDICT_SCALE))
	$(call PUBLISH_CHECK,fig4)
	$(call PUBLISH_CHECK,fig4,$(VERDICT_SCALE))
	$(call PUBLISH_CHECK,fig5)
	$(call PUBLISH_CHECK,fig5,$(VERDICT_SCALE))
	$(call PUBLISH_CHECK,low_comm)
	$(call PUBLISH_CHECK,low_comm,$(VERDICT_SCALE))
	$(call PUBLISH_CHECK,losp,$(VERDICT_SCALE))
	$(call PUBLISH_CHECK,overlap_straggler,$(VERDICT_SCALE))
	$(call PUBLISH_CHECK,pseudo_sync,$(VERDICT_SCALE))
	$(call PUBLISH_CHECK,pseudo_sync_speed,$(VERDICT_SCALE))
	$(call PUBLISH_CHECK,overlap_sync,$(VERDICT_SCALE))

# Every committed result (the demo and the tables at SCALE, the verdicts' presets at VERDICT_SCALE, the
# controls, table1, table2, fig4, fig5 and low_comm at both), then results/README.md: one row per claim of the seed papers, with its
# verdict (analysis/reports/verdict_page.py; with PUBLISH=1 or RESULTS=results the committed page).
report: report-check controls demo table1 table2 figures losp overlap-straggler pseudo-sync pseudo-sync-speed overlap-sync ## Every preset (controls first), then the verdicts page $(OUT)/results/README.md (PUBLISH=1: results/README.md)
	$(call VSWEEP,controls,$(SCALE))
	$(call VSWEEP,table1,$(VERDICT_SCALE))
	$(call VSWEEP,table2,$(VERDICT_SCALE))
	$(call VSWEEP,fig4,$(VERDICT_SCALE))
	$(call VSWEEP,fig5,$(VERDICT_SCALE))
	$(call SWEEP,low_comm)
	$(call VSWEEP,low_comm,$(VERDICT_SCALE))
	$(PY) -m analysis.reports.verdict_page --results \
		"$(if $(filter 1 yes true,$(PUBLISH)),results,$(if $(RESULTS),$(RESULTS),$(OUT)/results))"

# A W&B comparison report of PRESET's runs at SCALE ($(OUT)/<PRESET>/runs, as the preset's target
# left them; docs/wandb.md): offline (the default) its spec, wandb_report.json, beside the preset's
# results ($(OUT)/results/<PRESET>/$(SCALE), or RESULTS=<dir>) and the commands that publish it;
# WANDB_MODE=online saves it to W&B (WANDB_API_KEY or `wandb login`) and prints its URL.
wandb-report: $(STAMP) ## A W&B comparison report of PRESET's runs at SCALE: its spec beside the results (WANDB_MODE=online: saved to W&B)
	@test -n "$(PRESET)" || { echo "error: make wandb-report needs PRESET=<name> (a preset of conf/experiment)" >&2; exit 2; }
	$(PY) -m analysis.reports.wandb_report "$(OUT)/$(PRESET)/runs" --experiment $(PRESET) --scale $(SCALE) \
		--out "$(if $(RESULTS),$(RESULTS),$(OUT)/results)/$(PRESET)/$(SCALE)" \
		--set=cluster=$(strip $(CLUSTER)) --mode $(if $(filter online,$(WANDB_MODE)),online,offline)

# Every committed result rebuilt from its committed runs.jsonl.gz alone (no training) into
# $(OUT)/recompute, then compared with results/: tables and claims byte for byte.
recompute: $(STAMP) ## Rebuild every committed table and claims from its records (seconds), compare with results/
	$(PY) -m analysis.reproduce.recompute --out "$(OUT)/recompute"

# A stated sample of committed points (analysis/reproduce/verify.py SAMPLE) trained again and compared
# with their records: identical on the same platform, within the seeds' spread on another.
verify: $(STAMP) ## Rerun a sample of committed points and compare with their records (<= 10 min)
	$(PY) -m analysis.reproduce.verify

bench: $(STAMP) ## Performance benchmarks as ratios side by side (1-2 h on 2 cores): benchmarks/RESULTS.md
	$(PY) -m benchmarks

bench-quick: $(STAMP) ## The headline ratios with 95% intervals (~15 min on 2 cores): benchmarks/RESULTS-quick.md
	$(PY) -m benchmarks --quick

gpu-check: $(STAMP) ## Every CUDA code path one GPU reaches (<= 8 min): benchmarks/GPU-CHECK.md; no GPU: says so, exit 0
	$(PY) -m benchmarks.gpu_check

docs: $(STAMP) ## Regenerate docs/config.md (every config key) from the schema
	$(PY) -m experiments.config.config_doc > docs/config.md

smoke: $(STAMP) ## One tiny run on synthetic data with 2 workers (seconds)
	$(PY) run.py scale=smoke dataset=synthetic wandb.mode=disabled "out_root='$(OUT)/smoke'"

clean: ## Remove run outputs (OUT, default outputs) and caches (keeps .venv and results/)
	@case "$$(realpath -m -- "$(OUT)")" in /|"$$(realpath .)"|"$$HOME") \
		echo "error: make clean would remove OUT=$(OUT); name the outputs folder" >&2; exit 2;; esac
	rm -rf -- "$(OUT)" multirun .pytest_cache .ruff_cache
	find . -name __pycache__ -not -path './$(VENV)/*' -exec rm -rf {} +

# dataset=fashion_mnist reads the gzipped idx files of Debian's package from FASHION_MNIST_SOURCE
# (its dataset.source) and decompresses them into dataset.root (docs/datasets.md).
FASHION_MNIST_SOURCE ?= /usr/share/datasets/fashion-mnist
FASHION_MNIST_FILES = $(addprefix $(FASHION_MNIST_SOURCE)/,train-images-idx3-ubyte.gz \
	train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
data: ## Install Fashion-MNIST offline: Debian's dataset-fashion-mnist where apt and root are available, else one line saying how
	@if ls $(FASHION_MNIST_FILES) >/dev/null 2>&1; then \
		echo "Fashion-MNIST is installed in $(FASHION_MNIST_SOURCE)"; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get update -q && apt-get install -y -q dataset-fashion-mnist; \
	else \
		echo "error: cannot install Fashion-MNIST here (needs apt-get and root): run" \
			"'sudo apt-get install dataset-fashion-mnist', or place the four idx files from" \
			"https://github.com/zalandoresearch/fashion-mnist, gunzipped, in" \
			"<dataset.root>/FashionMNIST/raw/ (default ./data)" >&2; \
		exit 1; \
	fi
