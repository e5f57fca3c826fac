# poscli: set up, run, test. `make help` lists the targets.
VENV    ?= .venv
PYTHON  ?= python3
POSCLI  := $(VENV)/bin/poscli
PY      := $(VENV)/bin/python
# The torch build that fits this machine (CPU-only unless an NVIDIA driver is present);
# override with e.g. `make install TORCH="torch==2.13.0"`.
TORCH   ?= $(shell $(PYTHON) tools/torch_requirement.py)
ENCODINGS := none sinusoidal learned shaw t5 rope alibi

.PHONY: help install demo test smoke reproduce bench core-table extend-table extend-32k newer-table suite clean

help:
	@echo "make install     create $(VENV) and install poscli with a torch build for this machine"
	@echo "make demo        install, train the default model (rope) on the built-in corpus, evaluate it"
	@echo "make test        install and run the test suite, then make smoke"
	@echo "make smoke       both reference studies in miniature (recipes/smoke.toml, ~2 min)"
	@echo "make reproduce   the reference studies: recipes/train-short-test-long.toml and extend-rope.toml"
	@echo "make bench       speed and memory benchmarks -> results/bench/ (~13 min; NANOGPT=path adds nanoGPT)"
	@echo "make core-table  train every encoding with the defaults and evaluate at 256, 1k, 4k (README table)"
	@echo "make extend-table extend core-rope to 4k with every method, with and without fine-tuning (README table)"
	@echo "make extend-32k  extend core-rope to 32768 with every method (default fine-tuning), evaluate 1k..32k"
	@echo "make newer-table xpos, fire, kerple, RoPE variants, randomized positions: train, extend, evaluate at 16x"
	@echo "make suite       the evaluation suite on models trained with passkey mixed in, the decay figure, the report"

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml tools/torch_requirement.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

demo: install
	$(POSCLI) train --pe rope | tee .demo-run
	$(POSCLI) eval $$(tail -n 1 .demo-run) --lengths 256,1k,4k
	@rm -f .demo-run

test: install
	$(PY) -m pytest -q
	@$(MAKE) --no-print-directory smoke

# Both studies in miniature, in a scratch results folder (the pipeline, not the science).
SMOKE_RESULTS ?= $(or $(TMPDIR),/tmp)/poscli-smoke
smoke: install
	rm -rf $(SMOKE_RESULTS)
	$(POSCLI) run recipes/smoke.toml --results $(SMOKE_RESULTS)
	@grep -q "Beside Press et al." $(SMOKE_RESULTS)/REPORT.md && grep -q "Beside Peng et al." $(SMOKE_RESULTS)/REPORT.md && echo "smoke: report complete"
	rm -rf $(SMOKE_RESULTS)

# The reference studies (README headline, results/REPORT.md). Steps already done are skipped,
# interrupted runs resumed: run it again after an interruption. JOBS=N trains N runs at once.
JOBS ?= 1
reproduce: install
	$(POSCLI) run recipes/train-short-test-long.toml --jobs $(JOBS)
	$(POSCLI) run recipes/extend-rope.toml --jobs $(JOBS)

# Speed and memory (python -m poscli.bench --help): training tokens/s per encoding and dtype, eval
# time and peak memory at 4k-64k, matmul peak and MFU, start-up. NANOGPT=path/to/nanoGPT adds
# nanoGPT's model.py, measured side by side.
bench: install
	$(PY) -m poscli.bench --out results/bench $(if $(NANOGPT),--nanogpt $(NANOGPT))

# The README's table of encodings: one default run each (about 3 minutes apiece on 2 CPU cores),
# evaluated at 1x, 4x and 16x the train length. Runs already trained are kept, not retrained.
core-table: install
	@for pe in $(ENCODINGS); do \
	  if [ -f results/runs/core-$$pe/model.safetensors ]; then echo "core-$$pe already trained"; \
	  else $(POSCLI) train --pe $$pe --name core-$$pe --quiet || exit $$?; fi; \
	done
	$(POSCLI) eval $(addprefix core-,$(ENCODINGS)) --lengths 256,1k,4k --table core --quiet

# The README's extension table: core-rope (train length 256) extended 16x to 4k by every method,
# without fine-tuning and with the default fine-tuning (400 steps at 1k), evaluated at 256, 1k, 4k.
EXTEND_METHODS := pi ntk dynamic-ntk yarn llama3 base
extend-table: install
	@[ -f results/runs/core-rope/model.safetensors ] || $(POSCLI) train --pe rope --name core-rope --quiet
	@for m in $(EXTEND_METHODS); do \
	  opts=$$( [ $$m = base ] && echo "--rope-base 500000" ); \
	  for steps in 0 400; do \
	    run=core-rope+$$m-$$steps; \
	    if [ -f results/runs/$$run/model.safetensors ]; then echo "$$run already extended"; \
	    else $(POSCLI) extend core-rope --method $$m --target 4k --steps $$steps $$opts --name $$run --quiet || exit $$?; fi; \
	  done; \
	done
	$(POSCLI) eval core-rope $(foreach m,$(EXTEND_METHODS),core-rope+$(m)-0 core-rope+$(m)-400) --lengths 256,1k,4k --table extend --quiet

# The CLI example at every method: core-rope extended to 32768 (factor 128) with the default
# fine-tuning, evaluated at 1k, 4k, 16k and 32k on the same 16 spans of 32k (512k tokens per
# cell: hours on 2 CPU cores, minutes on a GPU).
extend-32k: install
	@[ -f results/runs/core-rope/model.safetensors ] || $(POSCLI) train --pe rope --name core-rope --quiet
	@for m in $(EXTEND_METHODS); do \
	  opts=$$( [ $$m = base ] && echo "--rope-base 500000" ); \
	  if [ -f results/runs/core-rope+$$m-32k/model.safetensors ]; then echo "core-rope+$$m-32k already extended"; \
	  else $(POSCLI) extend core-rope --method $$m --target 32768 $$opts --name core-rope+$$m-32k --quiet || exit $$?; fi; \
	done
	$(POSCLI) eval core-rope $(foreach m,$(EXTEND_METHODS),core-rope+$(m)-32k) --lengths 1k,4k,16k,32k --max-tokens 512k --table extend-32k --quiet

# The newer encodings (issue 8) at the default size: each trained once (about 3-4 minutes apiece),
# the rotary ones also extended to 4k with YaRN (default fine-tuning), and all evaluated at 1x, 4x
# and 16x the train length next to core-rope and core-alibi. $(call once,NAME,OPTIONS) trains NAME
# unless it is already trained.
once = [ -f results/runs/$(1)/model.safetensors ] && echo "$(1) already trained" || $(POSCLI) train $(2) --name $(1) --quiet
extended = [ -f results/runs/$(1)+yarn/model.safetensors ] && echo "$(1)+yarn already extended" || $(POSCLI) extend $(1) --method yarn --target 4k --name $(1)+yarn --quiet
NEWER_RUNS := new-xpos new-fire new-kerple new-rope-f25 new-prope75 new-rope-rp4k new-learned-rp4k
NEWER_ROTARY := new-xpos new-rope-f25 new-prope75
newer-table: install
	@$(call once,core-rope,--pe rope)
	@$(call once,core-alibi,--pe alibi)
	@$(call once,new-xpos,--pe xpos)
	@$(call once,new-fire,--pe fire)
	@$(call once,new-kerple,--pe kerple)
	@$(call once,new-rope-f25,--pe rope --rotary-fraction 0.25)
	@$(call once,new-prope75,--pe rope --rope-keep 0.75)
	@$(call once,new-rope-rp4k,--pe rope --random-positions 4k)
	@$(call once,new-learned-rp4k,--pe learned --random-positions 4k)
	@$(call extended,new-xpos)
	@$(call extended,new-rope-f25)
	@$(call extended,new-prope75)
	$(POSCLI) eval core-rope core-alibi $(NEWER_RUNS) $(addsuffix +yarn,$(NEWER_ROTARY)) --lengths 256,1k,4k --table newer --quiet

# The evaluation suite (README plots): ALiBi and RoPE trained with passkey examples mixed in
# (20% of sequences), evaluated with non-overlapping windows and sliding windows (stride 256,
# 16 spans of 4k: each 4k window scores only 256 tokens), loss by position and
# passkey retrieval; then the decay figure and results/REPORT.md.
SUITE_RUNS := suite-alibi suite-rope
suite: install
	@for pe in alibi rope; do \
	  if [ -f results/runs/suite-$$pe/model.safetensors ]; then echo "suite-$$pe already trained"; \
	  else $(POSCLI) train --pe $$pe --mix passkey:0.2 --name suite-$$pe --quiet || exit $$?; fi; \
	done
	$(POSCLI) eval $(SUITE_RUNS) --lengths 256,1k,4k --table suite --quiet
	$(POSCLI) eval $(SUITE_RUNS) --lengths 256,1k,4k --stride 256 --max-tokens 64k --table suite --quiet
	$(POSCLI) eval $(SUITE_RUNS) --task passkey --lengths 256,1k,4k --depths 0,25,50,75,100 --trials 20 --table suite-passkey --quiet
	$(POSCLI) plot decay
	$(POSCLI) report

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
