# poscli: set up, run, test. `make help` lists the targets.
VENV    ?= .venv
PYTHON  ?= python3
POSCLI  := $(VENV)/bin/poscli
PY      := $(VENV)/bin/python
REFERENCE := results/reference
# The torch build that fits this machine (CPU-only unless an NVIDIA driver is present);
# override with e.g. `make install TORCH="torch==2.13.0"`.
TORCH   ?= $(shell $(PYTHON) tools/torch_requirement.py)

.PHONY: help install demo test test-fast lint smoke reproduce trained ladder convergence passkey tasks tokenizers bench bench-data gpu-check clean

help:
	@echo "make install     create $(VENV) and install poscli with a torch build for this machine"
	@echo "make demo        install, train the default model (rope) on the built-in corpus, evaluate it (results/, ~7 min)"
	@echo "make test        install, lint (ruff) and run the whole test suite (two workers; recipes/smoke.toml included)"
	@echo "make test-fast   the tests not marked slow (the inner loop, under 2 minutes)"
	@echo "make lint        ruff check, ruff format --check, and mypy on the CLI, the studies and the request types"
	@echo "make smoke       both reference studies in miniature (recipes/smoke.toml, ~2 min)"
	@echo "make reproduce   the reference study in $(REFERENCE): recipes/train-short-test-long.toml and extend-rope.toml"
	@echo "make trained     issue 30's rerun on trained models, both corpora, run by run (--each; ~19 h on 2 cores, resumable), then ladder"
	@echo "make ladder      issue 63's size ladder, a rung at a time (recipes/scale-ladder.toml; ~17 h on 2 cores, resumable)"
	@echo "make convergence issue 63's fine-tuning budget: continue@1k and PI for 2000 steps, the held-out curve (~1 h)"
	@echo "make passkey     the passkey studies in $(REFERENCE): retrieval at the train length, after extension, across encodings"
	@echo "make tasks       the length-generalization study in $(REFERENCE): nine encodings, five algorithmic tasks, 3 seeds"
	@echo "make bench       speed and memory benchmarks -> $(REFERENCE)/bench/ (~50 min on 2 cores; NANOGPT=path adds nanoGPT)"
	@echo "make gpu-check   on a CUDA machine: flex attention against the reference, small bf16 --compile training, ALiBi at 16k (minutes)"
	@echo "make bench-data  a 2 GB corpus prepared on disk and trained on: time and peak memory (docs/data.md)"
	@echo "make tokenizers  the default model on bytes and on a BPE, in bits per byte (recipes/bytes-vs-bpe.toml)"

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml tools/torch_requirement.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

# Repeatable: the run demo-rope is started over each time (--replace) and its rows in results/demo.csv
# are replaced, never added to; the committed reference study in $(REFERENCE) is never touched.
demo: install
	$(POSCLI) train --pe rope --name demo-rope --replace
	$(POSCLI) eval demo-rope --lengths 256,1k,4k --table demo

# Two pytest workers (pytest-xdist), one thread each, so the suite fits in 10 minutes on 2 cores;
# tests/study/test_smoke.py runs recipes/smoke.toml, so make smoke is part of it.
test: lint
	$(PY) -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder

test-fast: install
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow"

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# Both studies in miniature, in a scratch results folder (the pipeline, not the science).
SMOKE_RESULTS ?= $(or $(TMPDIR),/tmp)/poscli-smoke
smoke: install
	rm -rf $(SMOKE_RESULTS)
	$(POSCLI) run recipes/smoke.toml --results $(SMOKE_RESULTS)
	@grep -q "Beside Press et al." $(SMOKE_RESULTS)/REPORT.md && grep -q "Beside Peng et al." $(SMOKE_RESULTS)/REPORT.md && echo "smoke: report complete"
	rm -rf $(SMOKE_RESULTS)

# The reference study (README headline, results/reference/REPORT.md), kept apart from a user's own
# runs in results/. Steps already done are skipped, interrupted runs resumed: run it again after an
# interruption. JOBS=N runs N at once, the cores split between them (with --each, each run and its
# evaluations and extensions one process, the next starting when one ends): on 2 cores two runs at a
# time train 1.27x (the default model) to 1.29x (the length-generalization model) as many runs an hour
# as one at a time with both cores (docs/guide.md, "Long studies across sessions").
JOBS ?= 2
reproduce: install
	$(POSCLI) run recipes/train-short-test-long.toml --jobs $(JOBS) --results $(REFERENCE)
	$(POSCLI) run recipes/extend-rope.toml --jobs $(JOBS) --results $(REFERENCE)

# Issue 30's studies on models that have learned (docs/results.md, "Training recipe"): each run is
# evaluated as soon as it is trained (--each), so stopping anywhere keeps every finished run's rows
# and running it again, even from a fresh clone without the weights, trains only what is left.
trained: install
	$(POSCLI) run recipes/tstl-stdlib.toml --each --jobs $(JOBS) --results $(REFERENCE)
	$(POSCLI) run recipes/extend-rope-trained.toml --each --jobs $(JOBS) --results $(REFERENCE)
	$(POSCLI) run recipes/extend-rope-trained-more.toml --each --jobs $(JOBS) --results $(REFERENCE)
	$(POSCLI) run recipes/tstl-shakespeare.toml --each --jobs $(JOBS) --results $(REFERENCE)
	$(POSCLI) run recipes/extend-rope-trained-shakespeare.toml --each --jobs $(JOBS) --results $(REFERENCE)
	$(MAKE) ladder

# Issue 63's size ladder: Press et al.'s verdicts at 0.22M, 0.82M and 2.47M parameters, the learning
# rate chosen per encoding and size first ([select]); a rung at a time (its sweep, then its runs, each
# evaluated when trained), so each rung is complete before the next starts. SIZES=gpu runs the
# recipe's 10x ladder (give it a results folder of its own: REFERENCE=results/gpu).
SIZES ?= cpu
ladder: install
	$(POSCLI) run recipes/scale-ladder.toml --sizes $(SIZES) --each --jobs $(JOBS) --results $(REFERENCE) --runs 'ladder-*-s-s*'
	$(POSCLI) run recipes/scale-ladder.toml --sizes $(SIZES) --each --jobs $(JOBS) --results $(REFERENCE) --runs 'ladder-*-m-s*'
	$(POSCLI) run recipes/scale-ladder.toml --sizes $(SIZES) --each --jobs $(JOBS) --results $(REFERENCE) --runs 'ladder-*-l-s*'

# Issue 63's fine-tuning budget (recipes/extend-convergence.toml): one trained RoPE base fine-tuned at
# 1k for 2000 steps by the continue control and by PI, the held-out loss every 100 steps; the curve
# and where each stopped improving (under 1% over the last fifth) in $(REFERENCE)/extend-convergence-curve.*;
# then recipes/extend-converged.toml reruns the fine-tuned methods at that budget (1000 steps) on 3 bases.
convergence: install
	$(POSCLI) run recipes/extend-convergence.toml --each --results $(REFERENCE)
	$(POSCLI) plot loss xc-stdlib-rope-s0+continue-1k-2000 xc-stdlib-rope-s0+pi-1k-2000 --results $(REFERENCE) \
		--out $(REFERENCE)/extend-convergence-curve.png
	$(POSCLI) run recipes/extend-converged.toml --each --jobs $(JOBS) --results $(REFERENCE)

# The passkey studies: a RoPE model that retrieves at its train length (recipes/passkey-retrieval.toml,
# about 30 min), extended by every method (passkey-extension.toml, 3 seeds) and five encodings'
# perplexity beside their retrieval (passkey-encodings.toml). Resumable like reproduce.
passkey: install
	$(POSCLI) run recipes/passkey-retrieval.toml --jobs $(JOBS) --results $(REFERENCE)
	$(POSCLI) run recipes/passkey-extension.toml --jobs $(JOBS) --results $(REFERENCE)
	$(POSCLI) run recipes/passkey-encodings.toml --jobs $(JOBS) --results $(REFERENCE)

# Issue 32's length-generalization study (recipes/length-generalization.toml, about 3.5 hours on 2
# cores): nine encodings trained on small instances of five algorithmic tasks, exact match to 4x, 3
# seeds; each run evaluated as soon as it is trained (--each), so it resumes like trained.
tasks: install
	$(POSCLI) run recipes/length-generalization.toml --each --jobs $(JOBS) --results $(REFERENCE)

# Bytes against a trained BPE on the built-in corpus, compared in bits per byte (docs/data.md).
tokenizers: install
	$(POSCLI) run recipes/bytes-vs-bpe.toml --jobs $(JOBS) --results $(REFERENCE)

# Speed and memory (python -m benchmarks.bench --help): training tokens/s per encoding and dtype, eval
# time and peak memory at 4k-64k, matmul peak and MFU, start-up. NANOGPT=path/to/nanoGPT adds
# nanoGPT's model.py, measured side by side; then poscli inspect against eval (benchmarks/inspect_bench.py).
bench: install
	$(PY) -m benchmarks.bench --out $(REFERENCE)/bench $(if $(NANOGPT),--nanogpt $(NANOGPT))
	$(PY) -m benchmarks.inspect_bench --out $(REFERENCE)/bench

# A 2 GB corpus prepared on disk and trained on: time and peak memory of each step (docs/data.md).
# What a CUDA machine adds (benchmarks/gpu_check.py); on a machine without CUDA it says so and exits 0.
gpu-check: install
	$(PY) -m benchmarks.gpu_check --out $(REFERENCE)/gpu-check

bench-data: install
	$(PY) tools/bench_data.py --size 2G --steps 200

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
