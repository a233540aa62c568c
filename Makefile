# The README's commands: `make demo` and `make test`. Both create .venv (python3 -m venv)
# on first use and install t2n into it in editable mode with the pins of constraints.txt.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.t2n-installed
DEMO_OUT ?= out/resnet18.nnef.tar

.PHONY: all demo test install clean test-torch-2.14

all: test

# tools/torchvision_schemas.py: a start-up hook in the venv (never in t2n) that lets
# `import torchvision` (timm, transformers) work when the torchvision wheel does not match
# torch; it does nothing for a matching pair.
# compileall: an editable install leaves t2n without bytecode, and where the environment
# sets PYTHONDONTWRITEBYTECODE every process compiled its ~160 modules again (0.4 s of each
# export's process; a wheel install is compiled by pip).
$(STAMP): pyproject.toml constraints.txt tools/torchvision_schemas.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -c constraints.txt -e '.[test,bench]'
	$(PY) tools/torchvision_schemas.py install
	$(PY) -m compileall -q t2n
	@touch $(STAMP)

install: $(STAMP)

# Export the ResNet-18-shaped fixture (1x3x224x224), run it in tract, compare with PyTorch.
demo: $(STAMP)
	@mkdir -p $(dir $(DEMO_OUT))
	$(VENV)/bin/t2n export tests.fixtures.models:make_resnet18 -o $(DEMO_OUT) \
		--input x:1x3x224x224:f32 --check

# Two pytest workers (the CI machine has 2 cores). Each test file runs whole on one worker,
# so a file's coverage-floor test sees all of that file's results (xdist's loadgroup would
# balance better, but with pytest 9 it no longer groups).
TEST_WORKERS ?= 2

test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The second PyTorch CI verifies: torch 2.14.1 with torchvision 0.29.1 (CUDA builds that run
# on the CPU, ~5.5 GB, taken from this machine's disk) in a venv of their own; every other
# pin is constraints.txt's (the two lines are rewritten, so the pins cannot drift apart).
NEXT_VENV  ?= .venv-torch-2.14
NEXT_STAMP := $(NEXT_VENV)/.t2n-installed

$(NEXT_STAMP): pyproject.toml constraints.txt
	@test -x $(NEXT_VENV)/bin/python || $(PYTHON) -m venv $(NEXT_VENV)
	sed -e 's/^torch==.*/torch==2.14.1/' -e 's/^torchvision==.*/torchvision==0.29.1/' \
		constraints.txt > $(NEXT_VENV)/constraints.txt
	$(NEXT_VENV)/bin/python -m pip install -c $(NEXT_VENV)/constraints.txt -e '.[test,bench]'
	@touch $(NEXT_STAMP)

test-torch-2.14: $(NEXT_STAMP)
	$(NEXT_VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

clean:
	rm -rf $(VENV) $(NEXT_VENV) out
