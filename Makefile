# anvil - one Makefile for the library, the CLI, the tests and the model.
#
#   make            release build: bin/anvil (+ build/release/libanvil.a)
#   make debug      -O0 -g, ANVIL_DEBUG asserts: bin/anvil-debug
#   make asan       ASan+UBSan build: bin/anvil-asan
#   make test       everything the CI runs (unit tests release + asan,
#                   differential tests against gguf / llama-cpp-python)
#   make model      fetch the default model into models/
#   make model-gemma fetch gemma-3-270m-q4_k_m.gguf (K-quant tensors the
#                   kernel tests read) into models/
#   make vocabs     fetch llama.cpp's vocabulary files and chat templates
#   make run        build, fetch the model if missing, answer a chat prompt
#   make bench      single-stream benchmark on the default model
#                   (the benchmarks are bench/*.c, linked into bin/anvil as
#                   `anvil bench`; bench/plot.py draws their --png charts)
#   make fuzz       libFuzzer harnesses (clang): build/fuzz/fuzz_*
#
# Kernels for each instruction set live in their own directories and only
# those files get the matching -m flags; the binary picks at run time.

CC      ?= cc
PYTHON  ?= python3
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
CLI_SRC    := $(sort $(wildcard tools/cli/*.c tools/args/*.c))
# standalone micro-benchmarks with their own main (never run by make test)
BENCH_MAIN := bench/bench_constrain.c
BENCH_SRC  := $(filter-out $(BENCH_MAIN),$(sort $(wildcard bench/*.c)))
CLI_OBJ    := $(CLI_SRC:%.c=$(BUILD)/%.o) $(BENCH_SRC:%.c=$(BUILD)/%.o)
UNIT_SRC   := $(sort $(wildcard tests/unit_*.c))
UNIT_SRC   := $(if $(filter 0,$(HP1)),$(filter-out tests/unit_attn_hp1.c,$(UNIT_SRC)),$(UNIT_SRC))
UNIT_BIN   := $(UNIT_SRC:tests/%.c=$(BUILD)/tests/%)
TOOL_SRC   := $(sort $(wildcard tests/tool_*.c))
TOOL_BIN   := $(TOOL_SRC:tests/%.c=$(BUILD)/tests/%)
# the test objects are kept: make would otherwise delete them as
# intermediates after every build (and rebuild them the next time)
.SECONDARY: $(UNIT_SRC:tests/%.c=$(BUILD)/tests/%.o) $(TOOL_SRC:tests/%.c=$(BUILD)/tests/%.o)
LIBA       := $(BUILD)/libanvil.a
BENCH_BIN  := $(BENCH_MAIN:bench/%.c=$(BUILD)/bench/%)
CLI_BIN    := bin/anvil$(SUFFIX)

.PHONY: all debug asan test unit model model-gemma run bench clean deps venv fmt fuzz fuzz-bins vocabs
.DEFAULT_GOAL := all

all: $(CLI_BIN) $(UNIT_BIN) $(TOOL_BIN) $(BENCH_BIN)

debug:
	@$(MAKE) --no-print-directory MODE=debug all
asan:
	@$(MAKE) --no-print-directory MODE=asan all

# The commit goes into benchmark records (bench_util.c); the stamp rebuilds
# bench_util.o when it changes. bench_png.c finds bench/plot.py in this
# source tree when the binary has been moved away from it.
GIT_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- src include tools bench 2>/dev/null || echo -dirty)
COMMIT_STAMP := $(BUILD)/commit-$(GIT_COMMIT).stamp
$(COMMIT_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/commit-*.stamp
	@touch $@
$(BUILD)/bench/bench_util.o: $(COMMIT_STAMP)
$(BUILD)/bench/bench_util.o: CFLAGS_ALL += -DANVIL_COMMIT=\"$(GIT_COMMIT)\"
$(BUILD)/bench/bench_png.o: CFLAGS_ALL += -DANVIL_SOURCE_DIR=\"$(CURDIR)\"

$(BUILD)/src/kernels/cpu/avx2/%.o: CFLAGS_ALL += $(ISA_AVX2)
$(BUILD)/src/kernels/cpu/avx512/%.o: CFLAGS_ALL += $(ISA_AVX512)
$(BUILD)/src/kernels/cpu/amx/%.o: CFLAGS_ALL += $(ISA_AVX512) $(ISA_AMX)
# the attention room's kernels (src/attn), same flags per ISA
$(BUILD)/src/attn/cpu/avx2/%.o $(BUILD)/src/attn/hp1/cpu/avx2/%.o: CFLAGS_ALL += $(ISA_AVX2)
$(BUILD)/src/attn/cpu/avx512/%.o $(BUILD)/src/attn/hp1/cpu/avx512/%.o: CFLAGS_ALL += $(ISA_AVX512)
# the command table names `anvil bench`'s entry point; the benchmarks use
# the commands' strict argument parsers (tools/cli/args.h)
# floors (tests/layers/floors.txt): tools/args < bench < tools/cli
$(BUILD)/tools/cli/%.o: CFLAGS_ALL += -Ibench -Itools/args
$(BUILD)/bench/%.o: CFLAGS_ALL += -Itools/args
ifeq ($(MODE),fuzz)
# No parser reaches the SIMD kernels, and instrumenting them costs clang a
# quarter of an hour: they are built plain.
$(BUILD)/src/kernels/cpu/avx2/%.o $(BUILD)/src/kernels/cpu/avx512/%.o $(BUILD)/src/kernels/cpu/amx/%.o: CFLAGS_ALL += -fno-sanitize=all
$(BUILD)/src/attn/cpu/avx2/%.o $(BUILD)/src/attn/cpu/avx512/%.o $(BUILD)/src/attn/hp1/cpu/avx2/%.o $(BUILD)/src/attn/hp1/cpu/avx512/%.o: CFLAGS_ALL += -fno-sanitize=all
endif

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# The server's OpenAPI document, served at GET /openapi.json, is compiled
# in as a C array.
$(BUILD)/gen/openapi_json.c: src/server/openapi.json
	@mkdir -p $(dir $@)
	@{ echo '/* generated by the Makefile from src/server/openapi.json */'; \
	  echo '#include <stddef.h>'; \
	  echo 'extern const char srv_openapi_json[];'; \
	  echo 'extern const size_t srv_openapi_json_len;'; \
	  echo 'const char srv_openapi_json[] = {'; \
	  od -An -v -tx1 $< | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '0};'; \
	  echo 'const size_t srv_openapi_json_len = sizeof(srv_openapi_json) - 1;'; } > $@.tmp
	@mv $@.tmp $@
$(OPENAPI_O): $(BUILD)/gen/openapi_json.c
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

# Unit tests (tests/unit_*.c, run by tests/run_all.py) and test tools
# (tests/tool_*.c, driven by the Python tests) see the library's internals.
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIBA)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(LIBA) $(TEST_LIBS) $(LIBS)

$(BUILD)/tests/%.o: CFLAGS_ALL += -Itests
# the default model's path is written once, above; C tests and fuzz
# harnesses fall back to it when ANVIL_MODEL is unset
$(BUILD)/tests/%.o: CFLAGS_ALL += -DANVIL_DEFAULT_MODEL='"$(MODEL)"'
# unit_bench tests the benchmarks' shared helper, which is not in libanvil
$(BUILD)/tests/unit_bench: $(BUILD)/bench/bench_util.o
$(BUILD)/tests/unit_bench.o: CFLAGS_ALL += -Ibench
# the attention tests share one fixture (tests/attn_fixture.c)
$(BUILD)/tests/unit_attn $(BUILD)/tests/unit_attn_hp1: $(BUILD)/tests/attn_fixture.o

# Standalone micro-benchmarks (BENCH_MAIN: bench_constrain for the constraint
# engine; HP1 against softmax attention is `anvil bench --attention --kind
# hp1`): measure, never gate tests; build/<mode>/bench/<name> --help.
$(BENCH_BIN): $(BUILD)/bench/%: $(BUILD)/bench/%.o $(LIBA)
	$(CC) $(LDFLAGS_ALL) -o $@ $< $(LIBA) $(LIBS)

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

APT_PKGS := gcc binutils make pkg-config python3-pip libpcre2-dev libcjson-dev libmicrohttpd-dev libcmocka-dev python3-matplotlib cmake g++ python3-venv unzip clang-14 libclang-rt-14-dev nginx haproxy chromium chromium-driver fortunes
deps:
	@scripts/install_deps.sh $(APT_PKGS)

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

run: deps all $(MODEL)
	$(CLI_BIN) run -m $(MODEL) --chat -p "$(PROMPT)" -n 128

bench: deps all $(MODEL)
	$(CLI_BIN) bench -m $(MODEL)

# ---------------------------------------------------------------------------
# tests: C unit tests in release and asan builds, then the differential
# Python tests; tests/run_all.py prints the final "N passed, N failed".

unit: all
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
# the builds use every core (-j): serial, the release and ASan builds took
# minutes of CI's budget
NPROC := $(shell nproc 2>/dev/null || echo 2)
test: deps venv vocabs
	@$(MAKE) --no-print-directory -j$(NPROC) MODE=release all
	@if echo "$(TEST_MODES)" | grep -q asan; then $(MAKE) --no-print-directory -j$(NPROC) MODE=asan all; fi
	@$(MAKE) --no-print-directory $(MODEL) $(GEMMA)
	@$(VENV)/bin/python tests/run_all.py --modes $(TEST_MODES) --model $(MODEL) -- $(PYTEST_ARGS)

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
