# Two commands do everything on a fresh Debian machine:
#   make demo   set up, then run the main job end to end on bundled defaults
#   make test   set up, then run every test (make test-fast: all but the slow ones)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
BUILD  := build
STAMP  := $(VENV)/.installed

.PHONY: setup native proto runtime test test-fast demo bench clean

setup: $(STAMP) proto native runtime

$(STAMP): requirements.txt setup.py scripts/system-deps.txt
	scripts/install-system-deps.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

proto: profile_format/profile_pb2.py interop/pprof/profile_pb2.py

profile_format/profile_pb2.py: profile_format/profile.proto $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. $<

# pprof's profile.proto (vendored, Apache-2.0): `lifetime pprof` writes it
interop/pprof/profile_pb2.py: interop/pprof/profile.proto $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. $<

native: $(STAMP)
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
	cmake --build $(BUILD) -j2

# The XLA AOT runtime + Abseil subset every exported model links: built once (5-15 min
# on 2 cores), cached under $${LIFETIME_CACHE_DIR:-~/.cache/lifetime-models}.
runtime: $(STAMP)
	$(BIN)/python -m export.runtime_build

# Google's TCMalloc (hugepage-aware) as an LD_PRELOAD library, from the libtcmalloc-sys
# crate's sources: built once (~3-4 min on 2 cores, needs cargo), cached under
# $${LIFETIME_CACHE_DIR:-~/.cache/lifetime-models}/tcmalloc; tests/test_tcmalloc_preload.py
.PHONY: tcmalloc-preload
tcmalloc-preload:
	interop/tools/tcmalloc_preload.sh

test: setup
	$(BIN)/python -m pytest tests

# everything but the tests marked slow (pytest.ini, tests/conftest.py)
test-fast: setup
	$(BIN)/python -m pytest -m "not slow" tests

demo: setup
	scripts/demo.sh

bench: setup
	$(BIN)/python benchmarks/profiler_overhead.py

clean:
	rm -rf $(BUILD) out profile_format/profile_pb2.py profile_format/profile_pb2.pyi \
		interop/pprof/profile_pb2.py interop/pprof/profile_pb2.pyi
