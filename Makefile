# anvil - one Makefile for the library, the CLI, the tests and the model.
#
#   make            release build: bin/anvil (+ build/release/libanvil.a)
#   make debug      -O0 -g, ANVIL_DEBUG asserts: bin/anvil-debug
#   make asan       ASan+UBSan build: bin/anvil-asan
#   make test       everything the CI runs (unit tests release + asan,
#                   differential tests against gguf / llama-cpp-python)
#   make model      fetch the default model into models/
#   make run        build, fetch the model if missing, answer a chat prompt
#   make bench      single-stream benchmark on the default model
#   make fuzz       libFuzzer harnesses (clang): build/fuzz/fuzz_*
#
# Kernels for each instruction set live in their own directories and only
# those files get the matching -m flags; the binary picks at run time.

CC      ?= cc
PYTHON  ?= python3
MODE    ?= release
VENV    ?= $(HOME)/.cache/anvil/venv
MODEL   ?= models/SmolLM2-135M-Instruct.Q4_1.gguf
PROMPT  ?= Explain in two sentences why the sky is blue.

BUILD   := build/$(MODE)
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Werror
BASEFLAGS := -std=c11 -D_GNU_SOURCE -g $(WARN) -Iinclude -Isrc -MMD -MP -pthread
LIBS    := -lpcre2-8 -lpng -lm -lpthread
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

CFLAGS_ALL := $(BASEFLAGS) $(OPT) $(CFLAGS)
LDFLAGS_ALL := $(OPT) -pthread $(LDFLAGS)

ISA_AVX2   := -mavx2 -mfma -mf16c
ISA_AVX512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mfma -mf16c -mavx2

LIB_SRC    := $(sort $(shell find src -name '*.c' -not -path 'src/server/*'))
SERVER_SRC := $(sort $(wildcard src/server/*.c))
LIB_OBJ    := $(LIB_SRC:%.c=$(BUILD)/%.o)
SERVER_OBJ := $(SERVER_SRC:%.c=$(BUILD)/%.o)
# The chat page (src/server/webui/) is compiled into the binary as byte
# arrays by tools/embed/embed.c (plain C: no xxd or JS tool chain needed).
WEBUI_SRC  := $(sort $(wildcard src/server/webui/*))
WEBUI_GEN  := $(BUILD)/gen/webui_assets.c
EMBED_BIN  := $(BUILD)/host/embed
SERVER_OBJ += $(BUILD)/gen/webui_assets.o
CLI_SRC    := $(sort $(wildcard tools/cli/*.c))
CLI_OBJ    := $(CLI_SRC:%.c=$(BUILD)/%.o)
UNIT_SRC   := $(sort $(wildcard tests/unit_*.c))
UNIT_BIN   := $(UNIT_SRC:tests/%.c=$(BUILD)/tests/%)
TOOL_SRC   := $(sort $(wildcard tests/tool_*.c))
TOOL_BIN   := $(TOOL_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_COMMON_SRC := $(sort $(wildcard tests/common/*.c))
TEST_COMMON_OBJ := $(TEST_COMMON_SRC:%.c=$(BUILD)/%.o)
LIBA       := $(BUILD)/libanvil.a
CLI_BIN    := bin/anvil$(SUFFIX)

.PHONY: all debug asan test unit model run bench clean deps venv fmt fuzz fuzz-bins
.DEFAULT_GOAL := all

all: $(CLI_BIN) $(UNIT_BIN) $(TOOL_BIN)

debug:
	@$(MAKE) --no-print-directory MODE=debug all
asan:
	@$(MAKE) --no-print-directory MODE=asan all

# The commit goes into benchmark records; the stamp rebuilds bench_model.o
# when it changes.
GIT_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- src include tools 2>/dev/null || echo -dirty)
COMMIT_STAMP := $(BUILD)/commit-$(GIT_COMMIT).stamp
$(COMMIT_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/commit-*.stamp
	@touch $@
$(BUILD)/tools/cli/bench_model.o: $(COMMIT_STAMP)
$(BUILD)/tools/cli/bench_model.o: CFLAGS_ALL += -DANVIL_COMMIT=\"$(GIT_COMMIT)\"

$(BUILD)/src/kernels/cpu/avx2/%.o: CFLAGS_ALL += $(ISA_AVX2)
$(BUILD)/src/kernels/cpu/avx512/%.o: CFLAGS_ALL += $(ISA_AVX512)
$(BUILD)/bench/%.o: CFLAGS_ALL += -Wno-missing-prototypes
ifeq ($(MODE),fuzz)
# No parser reaches the SIMD kernels, and instrumenting them costs clang a
# quarter of an hour: they are built plain.
$(BUILD)/src/kernels/cpu/avx2/%.o $(BUILD)/src/kernels/cpu/avx512/%.o: CFLAGS_ALL += -fno-sanitize=all
endif

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(EMBED_BIN): tools/embed/embed.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 $(WARN) -o $@ $<
$(WEBUI_GEN): $(EMBED_BIN) $(WEBUI_SRC)
	@mkdir -p $(dir $@)
	$(EMBED_BIN) $@ $(WEBUI_SRC)
$(BUILD)/gen/webui_assets.o: $(WEBUI_GEN)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(LIBA): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(CLI_BIN): $(CLI_OBJ) $(SERVER_OBJ) $(LIBA)
	@mkdir -p bin
	$(CC) $(LDFLAGS_ALL) -o $@ $(CLI_OBJ) $(SERVER_OBJ) $(LIBA) $(SERVER_LIBS) $(LIBS)

# Unit tests (tests/unit_*.c, run by tests/run_all.py) and test tools
# (tests/tool_*.c, driven by the Python tests) see the library's internals.
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_COMMON_OBJ) $(LIBA)
	$(CC) $(LDFLAGS_ALL) -o $@ $< $(TEST_COMMON_OBJ) $(LIBA) $(TEST_LIBS) $(LIBS)

$(BUILD)/tests/%.o: CFLAGS_ALL += -Itests

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

APT_PKGS := gcc make pkg-config python3-pip libpcre2-dev libcjson-dev libmicrohttpd-dev libcmocka-dev libpng-dev cmake g++ python3-venv unzip clang-14 libclang-rt-14-dev nginx haproxy chromium chromium-driver
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

run: deps all $(MODEL)
	$(CLI_BIN) run -m $(MODEL) --chat -p "$(PROMPT)" -n 128

bench: deps all $(MODEL)
	$(CLI_BIN) bench -m $(MODEL)

# ---------------------------------------------------------------------------
# tests: C unit tests in release and asan builds, then the differential
# Python tests; tests/run_all.py prints the final "N passed, N failed".

unit: all
	@$(VENV)/bin/python tests/run_all.py --unit-only --modes $(MODE)

test: deps venv
	@$(MAKE) --no-print-directory MODE=release all
	@$(MAKE) --no-print-directory MODE=asan all
	@$(MAKE) --no-print-directory $(MODEL)
	@$(VENV)/bin/python tests/run_all.py --modes release,asan --model $(MODEL)

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
