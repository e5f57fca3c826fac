# poscli: set up, run, test. `make help` lists the targets.
VENV    ?= .venv
PYTHON  ?= python3
POSCLI  := $(VENV)/bin/poscli
PY      := $(VENV)/bin/python
# The torch build that fits this machine (CPU-only unless an NVIDIA driver is present);
# override with e.g. `make install TORCH="torch==2.13.0"`.
TORCH   ?= $(shell $(PYTHON) tools/torch_requirement.py)
ENCODINGS := none sinusoidal learned shaw t5 rope alibi

.PHONY: help install demo test core-table clean

help:
	@echo "make install     create $(VENV) and install poscli with a torch build for this machine"
	@echo "make demo        install, train the default model (rope) on the built-in corpus, evaluate it"
	@echo "make test        install and run the test suite"
	@echo "make core-table  train every encoding with the defaults and evaluate at 256, 1k, 4k (README table)"

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

# The README's table of encodings: one default run each (about 3 minutes apiece on 2 CPU cores),
# evaluated at 1x, 4x and 16x the train length. Runs already trained are kept, not retrained.
core-table: install
	@for pe in $(ENCODINGS); do \
	  if [ -f results/runs/core-$$pe/model.safetensors ]; then echo "core-$$pe already trained"; \
	  else $(POSCLI) train --pe $$pe --name core-$$pe --quiet || exit $$?; fi; \
	done
	$(POSCLI) eval $(addprefix core-,$(ENCODINGS)) --lengths 256,1k,4k --table core --quiet

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
