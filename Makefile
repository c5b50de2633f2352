# rocmforge build. `make` builds build/rocmforge and build/librocmforge.a; `make test` runs every
# test; `make test SAN=1` runs them under AddressSanitizer + UndefinedBehaviorSanitizer.
# Sources are found by wildcard: a new .c under src/ joins the library, a new tests/test_*.c
# becomes a test binary. Files named *_avx2.c / *_avx512.c / *_amx.c get their ISA flags (dispatch at run time).

CC ?= cc
OPT ?= -O2
ifeq ($(SAN),1)
BUILD ?= build-san
OPT := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else
BUILD ?= build
endif

CFLAGS_BASE := -std=c11 -g $(OPT) -Wall -Wextra -D_GNU_SOURCE -Iinclude -Isrc -pthread
LDFLAGS_BASE := $(filter -fsanitize%,$(OPT)) -pthread
LDLIBS := -lpcre2-8 -lm

LIB_SRC := $(sort $(shell find src -name '*.c' -not -path 'src/tools/*'))
CLI_SRC := $(sort $(wildcard src/tools/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_COMMON := $(sort $(wildcard tests/common/*.c))

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_COMMON_OBJ := $(TEST_COMMON:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# GPU toolchains (optional): mk/gpu.mk adds objects to GPU_OBJ and libraries to GPU_LDLIBS when
# nvcc and/or hipcc are present.
GPU_OBJ :=
GPU_LDLIBS :=
-include mk/gpu.mk

LIB := $(BUILD)/librocmforge.a
CLI := $(BUILD)/rocmforge

.PHONY: all test clean check-warnings demo
all: $(CLI) $(LIB)

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -mavx2 -mfma -mf16c $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c $(CFLAGS) -MMD -MP -c $< -o $@

# AMX tiles (AMX-BF16, AMX-INT8) with the AVX-512 level's flags and AVX512_BF16's conversions.
$(BUILD)/obj/%_amx.o: %_amx.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mamx-tile -mamx-bf16 -mamx-int8 -mavx2 -mfma -mf16c $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ) $(GPU_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

# The commit the CLI reports (`--version`, bench's closing "build:" line, as llama-bench's):
# main.o alone is rebuilt when it changes (the stamp's name carries it). RF_COMMIT from the
# environment wins: a copy of the tree whose .git is older than its files (the device machine's)
# gets it from scripts/device-prepare.sh.
ifndef RF_COMMIT
RF_COMMIT := $(shell git describe --always --dirty --abbrev=8 2>/dev/null || echo unknown)
endif
COMMIT_STAMP := $(BUILD)/commit-$(subst /,_,$(RF_COMMIT))
$(COMMIT_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/commit-*
	@touch $@
$(BUILD)/obj/src/tools/main.o: $(COMMIT_STAMP)
$(BUILD)/obj/src/tools/main.o: CFLAGS_BASE += -DRF_COMMIT='"$(RF_COMMIT)"'

$(CLI): $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS_BASE) $(LDFLAGS) -o $@ $(CLI_OBJ) $(LIB) $(GPU_LDLIBS) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(TEST_COMMON_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -Itests/common -MMD -MP -o $@ $< $(TEST_COMMON_OBJ) $(LIB) $(LDFLAGS_BASE) $(LDFLAGS) $(GPU_LDLIBS) $(LDLIBS)

test: $(TEST_BIN) $(CLI)
	@ROCMFORGE_BIN=$(abspath $(CLI)) sh tests/run.sh $(TEST_BIN)

demo: $(CLI)
	@sh scripts/demo.sh

clean:
	rm -rf build build-san build-stamps

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
