# The README's commands: `make demo` and `make test`. Both create .venv (python3 -m venv)
# on first use and install t2n into it in editable mode with the pins of constraints.txt.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.t2n-installed
DEMO_OUT ?= out/resnet18.nnef.tar

.PHONY: all demo test install clean

all: test

# tools/torchvision_schemas.py: a start-up hook in the venv (never in t2n) that lets
# `import torchvision` (timm, transformers) work when the torchvision wheel does not match
# torch; it does nothing for a matching pair.
$(STAMP): pyproject.toml constraints.txt tools/torchvision_schemas.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -c constraints.txt -e '.[test,bench]'
	$(PY) tools/torchvision_schemas.py install
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

clean:
	rm -rf $(VENV) out
