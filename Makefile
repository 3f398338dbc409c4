# deepinfer build.  `make` builds the library, the CLI, the tools, the unit tests and the
# benchmarks; `make test` builds and runs every test (plus an ASan+UBSan build of the unit
# tests); `make bench` runs the benchmarks.
#
# Sources are found by directory, so adding a file needs no edit here:
#   src/**/*.c            -> build/libdeepinfer.{a,so}   the engine library (all of src/ but the two below)
#   src/cluster/**/*.c    -> build/libdeepinfer_cluster.a  cluster planners: EPLB, load balancers, simulator
#   src/golden/*.c        -> build/libdeepinfer_golden.a   the golden-set harness (check-golden, tests, benches)
#   src/ep/*.c            -> build/libdeepinfer_ep.a       expert parallelism over MPI (the CLI, tests/unit/test_ep_*)
#   src/gateway/*.c       -> build/libdeepinfer_gateway.a  `deepinfer gateway`: routing front of the workers
#   tools/deepinfer/*.c   -> build/deepinfer             (the CLI)
#   tests/unit/test_*.c   -> build/tests/test_*          (one binary per file, linked with the library)
#   bench/bench_*.c       -> build/bench/bench_*         (bench/bench_*.py run with python3 too)
#   tools/kernel_ab.c     -> build/kernel_ab             (two builds' kernels A/B in one process)
#   tools/decode_ab.c     -> build/decode_ab             (two builds' decode steps A/B in one process)
#   fuzz/fuzz_*.c         -> build-fuzz/fuzz_*           (clang libFuzzer, `make fuzz`)

CC       ?= gcc
BUILD    ?= build
SHARED_DIR ?= $(shell tools/shared-dir.sh 2>/dev/null) # specs and golden sets, outside the repository
# The default binary runs on every x86-64 CPU with AVX2 (the x86-64-v3 level: Intel Haswell, AMD
# Zen and newer) and still takes the AVX-512 kernels where the CPU has them: those files enable
# AVX-512 with their own target pragmas and are chosen at run time from cpuid
# (src/kernels/cpu/backend_cpu.c).  So a binary built on one machine runs on another, and the
# build machine's flags never decide whether a kernel route compiles.  `make ARCH=-march=native`
# builds for this machine alone.  A CPU below the baseline gets a message naming what it lacks
# (src/base/cpu_check.c, compiled for plain x86-64 by CPU_CHECK_ARCH) instead of a crash.
HOST_ARCH := $(shell $(CC) -dumpmachine 2>/dev/null | cut -d- -f1)
ifeq ($(HOST_ARCH),x86_64)
ARCH     ?= -march=x86-64-v3 -mtune=generic
CPU_CHECK_ARCH := -march=x86-64 -mtune=generic
else
ARCH     ?=
CPU_CHECK_ARCH :=
endif
# gcc 12's -O2 vectorises only loops with a known trip count and no alias check ("very cheap"
# cost model), which left the model's element-wise loops (mHC expand and collapse, norms)
# scalar; the dynamic model vectorises them.  No reduction is reordered (no -ffast-math) and
# -ffp-contract=off keeps multiply and add apart, so every result bit is unchanged: the logits
# of a medium-checkpoint prefill + decode hash the same, and check-golden prints the same errors.
OPT      ?= -O2 -fvect-cost-model=dynamic
SAN      ?=
CFLAGS_ALL = -std=c11 -ffp-contract=off -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter $(OPT) $(ARCH) -g \
             -fPIC -pthread -Iinclude -Isrc $(SAN) $(EXTRA_CFLAGS)
# libmvec (glibc's vector math) only on x86-64: the AVX2 tables' expf (kernels/cpu/expf_avx2.c).
# glibc 2.36 has no aarch64 libmvec; the NEON tables take expf's own bits (kernels/neon/).
MVEC_LIBS := $(if $(filter x86_64,$(HOST_ARCH)),-lmvec)
# Image decoding (src/vision): Debian libpng, libjpeg-turbo, libwebp (+ demux for animations), giflib.
IMAGE_LIBS = -lpng16 -ljpeg -lwebpdemux -lwebp -lgif
LDLIBS_ALL = -ljansson -lutf8proc -lxxhash -lisal -lmicrohttpd -lucp -lucs -lcrypto $(IMAGE_LIBS) $(MVEC_LIBS) -lm -lpthread
BENCH_LIBS = -lopenblas

# The engine library is what the server, the Python binding and embedders load.  The cluster
# planners and the golden harness build on it (never the reverse: the .so links with
# --no-undefined, so an engine source calling into them fails to link) and are static libraries
# that only the CLI, the tests and the benchmarks link; the linker takes from an archive only
# the objects a program uses.
LIB_SRC     := $(shell find src -name '*.c' -not -path 'src/cluster/*' -not -path 'src/golden/*' -not -path 'src/ep/*' \
                 -not -path 'src/gateway/*' | sort)
LIB_OBJ     := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLUSTER_SRC := $(shell find src/cluster -name '*.c' | sort)
CLUSTER_OBJ := $(CLUSTER_SRC:%.c=$(BUILD)/obj/%.o)
GOLDEN_SRC  := $(sort $(wildcard src/golden/*.c))
GOLDEN_OBJ  := $(GOLDEN_SRC:%.c=$(BUILD)/obj/%.o)
GATEWAY_SRC := $(sort $(wildcard src/gateway/*.c))
GATEWAY_OBJ := $(GATEWAY_SRC:%.c=$(BUILD)/obj/%.o)
# libcurl is the gateway's HTTP client: only the programs that link the gateway archive take it.
GATEWAY_LIBS := -lcurl
# Archives in link order: the add-on libraries before the engine library they call.
TOOL_LIBS   := $(BUILD)/libdeepinfer_gateway.a $(BUILD)/libdeepinfer_cluster.a $(BUILD)/libdeepinfer_golden.a \
               $(BUILD)/libdeepinfer.a
# Expert parallelism (include/deepinfer_ep.h) is the one part that links MPI (Open MPI, with
# mpicc's own flags), so it is a library of its own that only the CLI and the tests named
# test_ep_* link; the engine library (and libdeepinfer.so) never does.
EP_SRC      := $(shell find src/ep -name '*.c' | sort)
EP_OBJ      := $(EP_SRC:%.c=$(BUILD)/obj/%.o)
MPI_CFLAGS  := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS    := $(shell mpicc --showme:link 2>/dev/null)
EP_LIBS     := $(BUILD)/libdeepinfer_ep.a $(TOOL_LIBS)
CLI_SRC   := $(sort $(wildcard tools/deepinfer/*.c))
CLI_OBJ   := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_SRC  := $(sort $(wildcard tests/unit/test_*.c))
TEST_BIN  := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(sort $(wildcard bench/bench_*.c))
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
BENCH_PY  := $(sort $(wildcard bench/bench_*.py))
FUZZ_SRC  := $(sort $(wildcard fuzz/fuzz_*.c))

.PHONY: all lib cli examples tools unit-tests bench-bins test test-unit test-asan bench fuzz fuzz-run clean
# Everything, tests and benchmarks included, so no test or bench binary is ever older than the
# library it measures (a stale binary once passed a test the new library failed).
all: lib cli examples tools unit-tests bench-bins

lib: $(BUILD)/libdeepinfer.a $(BUILD)/libdeepinfer.so $(BUILD)/libdeepinfer_internal.so \
     $(BUILD)/libdeepinfer_cluster.a $(BUILD)/libdeepinfer_golden.a $(BUILD)/libdeepinfer_ep.a \
     $(BUILD)/libdeepinfer_gateway.a
cli: $(BUILD)/deepinfer
unit-tests: $(TEST_BIN)
examples: $(BUILD)/offline_inference
tools: $(BUILD)/kernel_ab $(BUILD)/decode_ab

# The A/B tools dlopen the library instead of linking it, so nothing else rebuilds them when a
# header they read changes (a stale decode_ab once set the thread pool at an old offset of Model):
# -MMD gives them their header dependencies (build/*_ab.d, included below).
$(BUILD)/kernel_ab: tools/kernel_ab.c tools/ab_common.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -o $@ $< -ldl -lm

$(BUILD)/decode_ab: tools/decode_ab.c tools/ab_common.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -o $@ $< -ldl -lm

# The example is what an embedder writes: the public header and the engine library only.
$(BUILD)/offline_inference: examples/offline_inference.c $(BUILD)/libdeepinfer.a
	$(CC) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libdeepinfer.a $(LDLIBS_ALL)
bench-bins: $(BENCH_BIN)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

# The baseline check must itself run on a CPU below the baseline: plain x86-64 (after ARCH, so
# it wins whatever ARCH says).
$(BUILD)/obj/src/base/cpu_check.o: src/base/cpu_check.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(CPU_CHECK_ARCH) -MMD -MP -c $< -o $@

$(BUILD)/obj/src/ep/%.o: src/ep/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(MPI_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libdeepinfer_ep.a: $(EP_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libdeepinfer.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libdeepinfer_cluster.a: $(CLUSTER_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libdeepinfer_golden.a: $(GOLDEN_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libdeepinfer_gateway.a: $(GATEWAY_OBJ)
	rm -f $@ && ar rcs $@ $^

# The shared library exports the public API of include/deepinfer.h and nothing else: the linker
# version script lists the functions the header declares (tools/export-map.sh) and makes every
# other symbol local, so no internal name (model_load, state_create, ...) becomes ABI.
$(BUILD)/libdeepinfer.map: include/deepinfer.h tools/export-map.sh
	@mkdir -p $(dir $@)
	CC="$(CC)" tools/export-map.sh include/deepinfer.h > $@.tmp && mv $@.tmp $@

$(BUILD)/libdeepinfer.so: $(LIB_OBJ) $(BUILD)/libdeepinfer.map
	$(CC) -shared $(CFLAGS_ALL) -Wl,--no-undefined -Wl,--version-script=$(BUILD)/libdeepinfer.map \
	    -o $@ $(LIB_OBJ) $(LDLIBS_ALL)

# The same objects with every symbol exported, unversioned, for the A/B tools alone (kernel_ab,
# decode_ab and the Python tests of internals call internal functions through dlopen/ctypes);
# nothing installs or links it.
$(BUILD)/libdeepinfer_internal.so: $(LIB_OBJ)
	$(CC) -shared $(CFLAGS_ALL) -Wl,--no-undefined -o $@ $(LIB_OBJ) $(LDLIBS_ALL)

$(BUILD)/deepinfer: $(CLI_OBJ) $(EP_LIBS)
	$(CC) $(CFLAGS_ALL) -o $@ $(CLI_OBJ) $(EP_LIBS) $(LDLIBS_ALL) $(MPI_LIBS) $(GATEWAY_LIBS)

$(BUILD)/tests/test_ep_%: tests/unit/test_ep_%.c $(EP_LIBS) $(wildcard tests/unit/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(MPI_CFLAGS) -Itests/unit -o $@ $< $(EP_LIBS) $(LDLIBS_ALL) $(MPI_LIBS) $(GATEWAY_LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(TOOL_LIBS) $(wildcard tests/unit/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests/unit -o $@ $< $(TOOL_LIBS) $(LDLIBS_ALL) $(GATEWAY_LIBS)

$(BUILD)/bench/%: bench/%.c $(TOOL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -O3 -Ibench -o $@ $< $(TOOL_LIBS) $(LDLIBS_ALL) $(GATEWAY_LIBS) $(BENCH_LIBS)

# PCRE2 is the pre-tokenizer benchmark's baseline and used nowhere else.
$(BUILD)/bench/bench_tokenizer_pretok: BENCH_LIBS += -lpcre2-8

# The full test suite: unit tests, the same unit tests under ASan+UBSan, CLI and Python tests.
test: all unit-tests
	@echo "make test: the -march=native build must compile too (build-native/)"
	$(MAKE) --no-print-directory BUILD=build-native ARCH=-march=native lib cli
	$(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" unit-tests cli
	@if [ -n "$$DI_FUZZ_SECONDS" ]; then $(MAKE) --no-print-directory fuzz; fi
	SHARED_DIR=$(SHARED_DIR) tests/run_tests.sh

test-unit: all unit-tests
	SHARED_DIR=$(SHARED_DIR) DI_TEST_ONLY=unit tests/run_tests.sh

bench: all bench-bins
	SHARED_DIR=$(SHARED_DIR) tools/run_benches.sh $(BENCH_BIN) $(BENCH_PY)

# libFuzzer: the library is built once with clang and coverage instrumentation (build-fuzz/),
# then each fuzz/fuzz_*.c target links against it (gcc is the warnings gate; clang warns, never fails).  `make fuzz-run FUZZ_SECONDS=N` runs each
# target for N seconds from an empty corpus (CI does this through DI_FUZZ_SECONDS in make test).
FUZZ_SAN   = -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
FUZZ_BIN  := $(FUZZ_SRC:fuzz/%.c=build-fuzz/%)
FUZZ_SECONDS ?= 30
fuzz:
	$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang OPT=-O1 SAN="$(FUZZ_SAN)" EXTRA_CFLAGS=-Wno-error \
	    build-fuzz/libdeepinfer.a build-fuzz/libdeepinfer_cluster.a build-fuzz/libdeepinfer_golden.a \
	    build-fuzz/libdeepinfer_gateway.a
	$(MAKE) --no-print-directory $(FUZZ_BIN)

FUZZ_LIBS := build-fuzz/libdeepinfer_gateway.a build-fuzz/libdeepinfer_cluster.a build-fuzz/libdeepinfer_golden.a build-fuzz/libdeepinfer.a
build-fuzz/fuzz_%: fuzz/fuzz_%.c $(FUZZ_LIBS)
	clang -std=c11 -D_GNU_SOURCE -g -O1 $(ARCH) -Iinclude -Isrc -fsanitize=fuzzer,address,undefined \
	    -pthread -o $@ $< $(FUZZ_LIBS) $(LDLIBS_ALL) $(GATEWAY_LIBS)

fuzz-run: fuzz
	DI_FUZZ_SECONDS=$(FUZZ_SECONDS) DI_TEST_ONLY=fuzz tests/run_tests.sh

clean:
	rm -rf build build-asan build-fuzz build-native

# ---- aarch64: the cross build (make aarch64) and its tests under qemu (make test-aarch64) ---------
# The whole tree built for aarch64 with Debian's cross compiler into build-aarch64/: HOST_ARCH is
# read from the compiler, so that build takes the aarch64 settings above and below, and the CPU
# backend its NEON kernels (src/kernels/neon/; the x86 kernel files compile to nothing there).
# tests/cli/test_aarch64.sh runs its kernel and forward unit tests and check-golden on tiny-a in
# every mode under qemu-aarch64; on an x86-64 host `make test` builds it first, so
# tests/run_tests.sh runs that script with the other CLI tests.  tools/install-deps.sh installs
# the compiler, qemu and the :arm64 libraries; libisal and Open MPI cannot be installed beside
# their amd64 packages (not Multi-Arch: same, or their dependencies are not), so it unpacks their
# arm64 packages into AARCH64_EXTRA, which the build and qemu read.  On an aarch64 host plain
# `make` is the native NEON build and its unit tests run the NEON table directly.
AARCH64_CC     ?= aarch64-linux-gnu-gcc
AARCH64_BUILD  ?= build-aarch64
AARCH64_ARCH   ?= -march=armv8-a
AARCH64_EXTRA  ?= /opt/deepinfer-arm64
AARCH64_LIBDIR := $(AARCH64_EXTRA)/usr/lib/aarch64-linux-gnu
AARCH64_VARS    = BUILD=$(AARCH64_BUILD) CC=$(AARCH64_CC) ARCH="$(AARCH64_ARCH)" \
                  EXTRA_CFLAGS="-I$(AARCH64_EXTRA)/usr/include -L$(AARCH64_LIBDIR) -Wl,-rpath-link,$(AARCH64_LIBDIR)" \
                  MPI_CFLAGS="-I$(AARCH64_LIBDIR)/openmpi/include" MPI_LIBS="-L$(AARCH64_LIBDIR)/openmpi/lib -lmpi"

.PHONY: aarch64 test-aarch64 clean-aarch64
aarch64:
	@test -d $(AARCH64_LIBDIR) || { echo "aarch64: $(AARCH64_EXTRA) missing: run tools/install-deps.sh" >&2; exit 1; }
	$(MAKE) --no-print-directory $(AARCH64_VARS) all

test-aarch64: aarch64
	SHARED_DIR=$(SHARED_DIR) AARCH64_BUILD=$(AARCH64_BUILD) AARCH64_EXTRA=$(AARCH64_EXTRA) tests/cli/test_aarch64.sh

ifeq ($(HOST_ARCH),x86_64)
test: aarch64
else
# gcc 12's aarch64 vectoriser stops with an internal error (vect_transform_reduction) on the fmax
# reduction of test_forward_api under the dynamic cost model: that test keeps gcc's default.
$(BUILD)/tests/test_forward_api: OPT = -O2
endif

clean: clean-aarch64
clean-aarch64:
	rm -rf $(AARCH64_BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null) $(wildcard $(BUILD)/*_ab.d)
