# anvil - one Makefile for the library, the CLI, the tests and the model.
#
#   make            release build: bin/anvil (+ build/release/libanvil.a);
#                   needs only the compiler, make, libmicrohttpd, cJSON, PCRE2
#   make debug      -O0 -g, ANVIL_DEBUG asserts: bin/anvil-debug
#   make asan       ASan+UBSan build: bin/anvil-asan and its unit tests
#   make tests      the unit tests, test tools and bin/anvil-microbench
#                   (needs cmocka) of MODE
#   make microbench bin/anvil-microbench: --kernels, --attention, --constrain
#   make check      the fast tier: every unit test (release) and the Python
#                   tests not marked `full`, in minutes (docs/testing.md)
#   make test       everything the CI runs (unit tests release + asan,
#                   differential tests against gguf / llama-cpp-python)
#   make model      fetch the default model into models/
#   make model-gemma fetch gemma-3-270m-q4_k_m.gguf (K-quant tensors the
#                   kernel tests read) into models/
#   make vocabs     fetch llama.cpp's vocabulary files and chat templates
#   make run        build, fetch the model if missing, answer a chat prompt
#   make bench      single-stream benchmark on the default model
#                   (`anvil bench`; bench/plot.py, compiled in, draws the
#                   --png charts)
#   make fuzz       libFuzzer harnesses (clang): build/fuzz/fuzz_*
#
# Kernels for each instruction set live in their own directories and only
# those files get the matching -m flags; the binary picks at run time.

CC      ?= cc
MODE    ?= release
VENV    ?= $(HOME)/.cache/anvil/venv
MODEL   ?= models/SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA   := models/gemma-3-270m-q4_k_m.gguf
PROMPT  ?= Explain in two sentences why the sky is blue.

BUILD   := build/$(MODE)
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Werror
BASEFLAGS := -std=c11 -D_GNU_SOURCE -g $(WARN) -Iinclude -Isrc -MMD -MP -pthread
LIBS    := -lpcre2-8 -lcjson -lm -lpthread
SERVER_LIBS := -lmicrohttpd -lcjson
TEST_LIBS := -lcmocka

ifeq ($(MODE),release)
  OPT := -O2
  SUFFIX :=
else ifeq ($(MODE),debug)
  OPT := -O0 -DANVIL_DEBUG
  SUFFIX := -debug
else ifeq ($(MODE),asan)
  OPT := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -DANVIL_DEBUG
  SUFFIX := -asan
else ifeq ($(MODE),fuzz)
  OPT := -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -DANVIL_DEBUG -Wno-string-concatenation
  SUFFIX := -fuzz
else
  $(error MODE must be release, debug, asan or fuzz)
endif
ifeq ($(NATIVE),1)
  OPT += -march=native
endif

# HP1=0 leaves HP1 attention out (src/attn/hp1/; src/attn/hp1_none.c
# refuses HP1 models instead), in its own build directory and binary
HP1     ?= 1
ifeq ($(HP1),0)
  BUILD := $(BUILD)-nohp1
  SUFFIX := $(SUFFIX)-nohp1
endif

CFLAGS_ALL := $(BASEFLAGS) $(OPT) $(CFLAGS)
LDFLAGS_ALL := $(OPT) -pthread $(LDFLAGS)

ISA_AVX2   := -mavx2 -mfma -mf16c
ISA_AVX512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mfma -mf16c -mavx2
ISA_AMX    := -mamx-tile -mamx-int8

LIB_SRC    := $(sort $(shell find src -name '*.c' -not -path 'src/server/*'))
LIB_SRC    := $(if $(filter 0,$(HP1)),$(filter-out src/attn/hp1/%,$(LIB_SRC)),$(filter-out src/attn/hp1_none.c,$(LIB_SRC)))
SERVER_SRC := $(sort $(wildcard src/server/*.c))
LIB_OBJ    := $(LIB_SRC:%.c=$(BUILD)/%.o)
OPENAPI_O  := $(BUILD)/gen/openapi_json.o
# The chat page (src/server/webui/) is compiled into the binary as byte
# arrays by tools/embed/embed.c (plain C: no xxd or JS tool chain needed).
WEBUI_SRC  := $(sort $(wildcard src/server/webui/*))
WEBUI_GEN  := $(BUILD)/gen/webui_assets.c
EMBED_BIN  := $(BUILD)/host/embed
WEBUI_O    := $(BUILD)/gen/webui_assets.o
SERVER_OBJ := $(SERVER_SRC:%.c=$(BUILD)/%.o) $(OPENAPI_O) $(WEBUI_O)
CLI_SRC    := $(sort $(wildcard tools/cli/*.c))
ARGS_OBJ   := $(patsubst %.c,$(BUILD)/%.o,$(sort $(wildcard tools/args/*.c)))
# bench/: the user's benchmarks are `anvil bench` (bench_main.c); the
# micro-benchmarks (MICRO_SRC: kernels, attention, the constraint engine)
# are bin/anvil-microbench, never linked into bin/anvil. Both share
# BENCH_COMMON and the chart script bench/plot.py, compiled in as PLOT_O.
MICRO_SRC  := bench/microbench.c bench/bench_kernels.c bench/bench_attn.c bench/bench_constrain.c
BENCH_COMMON := bench/bench_util.c bench/bench_png.c
BENCH_SRC  := $(filter-out $(MICRO_SRC) $(BENCH_COMMON),$(sort $(wildcard bench/*.c)))
PLOT_O     := $(BUILD)/gen/plot_py.o
COMMON_OBJ := $(BENCH_COMMON:%.c=$(BUILD)/%.o) $(PLOT_O) $(ARGS_OBJ)
CLI_OBJ    := $(CLI_SRC:%.c=$(BUILD)/%.o) $(BENCH_SRC:%.c=$(BUILD)/%.o) $(COMMON_OBJ)
MICRO_OBJ  := $(MICRO_SRC:%.c=$(BUILD)/%.o) $(COMMON_OBJ)
MICRO_BIN  := bin/anvil-microbench$(SUFFIX)
UNIT_SRC   := $(sort $(wildcard tests/unit_*.c))
UNIT_SRC   := $(if $(filter 0,$(HP1)),$(filter-out tests/unit_attn_hp1.c,$(UNIT_SRC)),$(UNIT_SRC))
UNIT_BIN   := $(UNIT_SRC:tests/%.c=$(BUILD)/tests/%)
TOOL_SRC   := $(sort $(wildcard tests/tool_*.c))
TOOL_BIN   := $(TOOL_SRC:tests/%.c=$(BUILD)/tests/%)
# the test objects are kept: make would otherwise delete them as
# intermediates after every build (and rebuild them the next time)
.SECONDARY: $(UNIT_SRC:tests/%.c=$(BUILD)/tests/%.o) $(TOOL_SRC:tests/%.c=$(BUILD)/tests/%.o)
LIBA       := $(BUILD)/libanvil.a
CLI_BIN    := bin/anvil$(SUFFIX)

.PHONY: all tests microbench debug asan test check unit model model-gemma run bench clean deps deps-run venv fuzz fuzz-bins vocabs
.DEFAULT_GOAL := all

# what ships: no test framework, no micro-benchmark
all: $(CLI_BIN)
# what the tests run (cmocka for the unit tests)
tests: $(UNIT_BIN) $(TOOL_BIN) $(MICRO_BIN)
microbench: $(MICRO_BIN)

debug:
	@$(MAKE) --no-print-directory MODE=debug all
asan:
	@$(MAKE) --no-print-directory MODE=asan all tests

# The commit goes into benchmark records (bench_util.c); the stamp rebuilds
# bench_util.o when it changes.
GIT_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- src include tools bench 2>/dev/null || echo -dirty)
COMMIT_STAMP := $(BUILD)/commit-$(GIT_COMMIT).stamp
$(COMMIT_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/commit-*.stamp
	@touch $@
$(BUILD)/bench/bench_util.o: $(COMMIT_STAMP)
$(BUILD)/bench/bench_util.o: CFLAGS_ALL += -DANVIL_COMMIT=\"$(GIT_COMMIT)\"

$(BUILD)/src/kernels/cpu/avx2/%.o: CFLAGS_ALL += $(ISA_AVX2)
$(BUILD)/src/kernels/cpu/avx512/%.o: CFLAGS_ALL += $(ISA_AVX512)
$(BUILD)/src/kernels/cpu/amx/%.o: CFLAGS_ALL += $(ISA_AVX512) $(ISA_AMX)
# the attention room's kernels (src/attn), same flags per ISA
$(BUILD)/src/attn/cpu/avx2/%.o $(BUILD)/src/attn/hp1/cpu/avx2/%.o: CFLAGS_ALL += $(ISA_AVX2)
$(BUILD)/src/attn/cpu/avx512/%.o $(BUILD)/src/attn/hp1/cpu/avx512/%.o: CFLAGS_ALL += $(ISA_AVX512)
# the command table names `anvil bench`'s entry point (bench/bench.h); the
# benchmarks use the commands' strict argument parsers (tools/args/args.h)
# floors (tests/layers/floors.txt): tools/args < bench < tools/cli
$(BUILD)/tools/cli/%.o: CFLAGS_ALL += -Ibench -Itools/args
$(BUILD)/bench/%.o: CFLAGS_ALL += -Itools/args
# the default model's path is written once, above: C tests, fuzz harnesses
# and bench_constrain fall back to it when not told a model
DEFAULT_MODEL_DEF := -DANVIL_DEFAULT_MODEL='"$(MODEL)"'
$(BUILD)/bench/bench_constrain.o: CFLAGS_ALL += $(DEFAULT_MODEL_DEF)
ifeq ($(MODE),fuzz)
# No parser reaches the SIMD kernels, and instrumenting them costs clang a
# quarter of an hour: they are built plain.
$(BUILD)/src/kernels/cpu/avx2/%.o $(BUILD)/src/kernels/cpu/avx512/%.o $(BUILD)/src/kernels/cpu/amx/%.o: CFLAGS_ALL += -fno-sanitize=all
$(BUILD)/src/attn/cpu/avx2/%.o $(BUILD)/src/attn/cpu/avx512/%.o $(BUILD)/src/attn/hp1/cpu/avx2/%.o $(BUILD)/src/attn/hp1/cpu/avx512/%.o: CFLAGS_ALL += -fno-sanitize=all
endif

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# $(call c_array,NAME,FILE): the recipe writing $@, a C source that holds
# FILE's bytes as NAME[] (NUL-terminated) and their count as NAME_len.
define c_array
	@mkdir -p $(dir $@)
	@{ echo '/* generated by the Makefile from $(2) */'; \
	  echo '#include <stddef.h>'; \
	  echo 'extern const char $(1)[];'; \
	  echo 'extern const size_t $(1)_len;'; \
	  echo 'const char $(1)[] = {'; \
	  od -An -v -tx1 $(2) | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '0};'; \
	  echo 'const size_t $(1)_len = sizeof($(1)) - 1;'; } > $@.tmp
	@mv $@.tmp $@
endef

# The server's OpenAPI document, served at GET /openapi.json, is compiled
# in as a C array.
$(BUILD)/gen/openapi_json.c: src/server/openapi.json
	$(call c_array,srv_openapi_json,$<)
$(OPENAPI_O): $(BUILD)/gen/openapi_json.c
	$(CC) $(CFLAGS_ALL) -c $< -o $@
# The benchmarks' chart script, compiled in: a --png run writes it into a
# temporary directory for Python (bench_png.c), so no binary reads the
# source tree.
$(BUILD)/gen/plot_py.c: bench/plot.py
	$(call c_array,bench_plot_py,$<)
$(PLOT_O): $(BUILD)/gen/plot_py.c
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(EMBED_BIN): tools/embed/embed.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 $(WARN) -o $@ $<
$(WEBUI_GEN): $(EMBED_BIN) $(WEBUI_SRC)
	@mkdir -p $(dir $@)
	$(EMBED_BIN) $@ $(WEBUI_SRC)
$(WEBUI_O): $(WEBUI_GEN)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(LIBA): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(CLI_BIN): $(CLI_OBJ) $(SERVER_OBJ) $(LIBA)
	@mkdir -p bin
	$(CC) $(LDFLAGS_ALL) -o $@ $(CLI_OBJ) $(SERVER_OBJ) $(LIBA) $(SERVER_LIBS) $(LIBS)

$(MICRO_BIN): $(MICRO_OBJ) $(LIBA)
	@mkdir -p bin
	$(CC) $(LDFLAGS_ALL) -o $@ $(MICRO_OBJ) $(LIBA) $(LIBS)

# Unit tests (tests/unit_*.c, run by tests/run_all.py) and test tools
# (tests/tool_*.c, driven by the Python tests) see the library's internals.
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIBA)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(LIBA) $(TEST_LIBS) $(LIBS)

$(BUILD)/tests/%.o: CFLAGS_ALL += -Itests $(DEFAULT_MODEL_DEF)
# unit_bench tests the benchmarks' shared helper, which is not in libanvil
$(BUILD)/tests/unit_bench: $(BUILD)/bench/bench_util.o
$(BUILD)/tests/unit_bench.o: CFLAGS_ALL += -Ibench
# the attention tests share one fixture (tests/attn_fixture.c)
$(BUILD)/tests/unit_attn $(BUILD)/tests/unit_attn_hp1: $(BUILD)/tests/attn_fixture.o
# the Responses API's store is a server file (not in libanvil)
$(BUILD)/tests/unit_resp_store: $(BUILD)/src/server/resp_store.o
# the Responses API's translation and dialect need the whole server
$(BUILD)/tests/unit_api_responses: $(SERVER_OBJ)
$(BUILD)/tests/unit_api_responses: TEST_LIBS += $(SERVER_LIBS)
# the tool-call format parsers are server code (src/server/toolfmt*.c)
$(BUILD)/tests/unit_toolfmt: $(BUILD)/src/server/toolfmt.o $(BUILD)/src/server/toolfmt_json.o
$(BUILD)/tests/unit_toolfmt: TEST_LIBS += -lcjson

# ---------------------------------------------------------------------------
# fuzzing: tests/fuzz/fuzz_*.c are libFuzzer harnesses, built with clang
# (ASan+UBSan, coverage on the whole library) into build/fuzz/fuzz_*.
# Run one: build/fuzz/fuzz_gguf -max_total_time=60 tests/fuzz/corpus/gguf

FUZZ_CC  ?= clang-14
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/%)

fuzz:
	@$(MAKE) --no-print-directory MODE=fuzz CC=$(FUZZ_CC) fuzz-bins
fuzz-bins: $(FUZZ_BIN)
.SECONDARY: $(FUZZ_SRC:%.c=build/fuzz/%.o)

build/fuzz/fuzz_%: build/fuzz/tests/fuzz/fuzz_%.o $(SERVER_OBJ) $(LIBA)
	$(CC) $(LDFLAGS_ALL) -fsanitize=fuzzer -o $@ $< $(SERVER_OBJ) $(LIBA) $(SERVER_LIBS) $(LIBS)

# ---------------------------------------------------------------------------
# dependencies: Debian packages, the Python venv, the model

# APT_RUN: what building and running need (fetching the model uses pip);
# APT_TEST: what the tests add - cmocka, the venv and the C++ tool chain
# that builds llama-cpp-python in it, matplotlib for the charts, clang for
# fuzzing, the proxies, a browser and fortunes (prompt text). `make run`
# installs the first set, `make test` and `make check` both (`make deps`).
APT_RUN  := gcc binutils make python3-pip libpcre2-dev libcjson-dev libmicrohttpd-dev
APT_TEST := libcmocka-dev pkg-config python3-matplotlib cmake g++ python3-venv unzip clang-14 libclang-rt-14-dev nginx haproxy chromium chromium-driver fortunes
deps-run:
	@scripts/install_deps.sh $(APT_RUN)
deps:
	@scripts/install_deps.sh $(APT_RUN) $(APT_TEST)

VENV_STAMP := $(VENV)/.anvil-$(shell cat tests/requirements.txt scripts/make_venv.sh 2>/dev/null | sha256sum | cut -c1-12)
$(VENV_STAMP): tests/requirements.txt scripts/make_venv.sh
	@scripts/make_venv.sh $(VENV) tests/requirements.txt
	@touch $@
venv: $(VENV_STAMP)

$(MODEL):
	@scripts/fetch_model.sh $(MODEL)
model: $(MODEL)

$(GEMMA):
	@scripts/fetch_gemma.sh $(GEMMA)
model-gemma: $(GEMMA)

run: deps-run all $(MODEL)
	$(CLI_BIN) run -m $(MODEL) --chat -p "$(PROMPT)" -n 128

bench: deps-run all $(MODEL)
	$(CLI_BIN) bench -m $(MODEL)

# ---------------------------------------------------------------------------
# tests: C unit tests in release and asan builds, then the differential
# Python tests; tests/run_all.py prints the final "N passed, N failed".

unit: all tests
	@$(VENV)/bin/python tests/run_all.py --unit-only --modes $(MODE)

# llama.cpp's vocabulary-only GGUF files and chat templates, from the
# llama-cpp-python sdist the venv pins (unpacked under ~/.cache/anvil/,
# read by the tokenizer and template tests; nothing is committed)
vocabs: venv
	@scripts/fetch_llama_sdist.sh $(VENV) tests/requirements.txt >/dev/null

# TEST_MODES: the builds whose unit tests run (release,asan by default);
# ANVIL_KERNELS=ref|avx2|avx512 in the environment forces a kernel family
# for everything that picks automatically (.ci/run runs the suite so).
# PYTEST_ARGS: extra pytest arguments (.ci/run's forced-kernel passes: -m kernels).
TEST_MODES ?= release,asan
PYTEST_ARGS ?=
# the test builds use every core (-j)
NPROC := $(shell nproc 2>/dev/null || echo 2)
test: deps venv vocabs
	@$(MAKE) --no-print-directory -j$(NPROC) MODE=release all tests
	@if echo "$(TEST_MODES)" | grep -q asan; then $(MAKE) --no-print-directory -j$(NPROC) MODE=asan all tests; fi
	@$(MAKE) --no-print-directory $(MODEL) $(GEMMA)
	@$(VENV)/bin/python tests/run_all.py --modes $(TEST_MODES) --model $(MODEL) -- $(PYTEST_ARGS)

# The fast tier: the release build's unit tests, all of them, and the
# Python tests not marked `full` (those need llama-cpp-python, a browser,
# a proxy or minutes of work: tests/py/conftest.py). Minutes, not the
# suite's half hour; docs/testing.md says what each tier covers.
check: deps venv vocabs
	@$(MAKE) --no-print-directory -j$(NPROC) MODE=release all tests
	@$(MAKE) --no-print-directory $(MODEL) $(GEMMA)
	@$(VENV)/bin/python tests/run_all.py --fast --modes release --model $(MODEL) -- $(PYTEST_ARGS)

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
