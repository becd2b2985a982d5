# kgym - plain GNU make. See README.md.
#   make            libkgym.a, libkgym.so and the kgym command (in build/)
#   make test       every CPU test: C unit tests, then pytest
#   make asan       the C tests under AddressSanitizer + UBSan
#   make fuzz       the request fuzzer (tests/fuzz) for FUZZ_SECONDS, ASan + UBSan
#   make test-gpu   GPU timing/profiling tests (run on a GPU machine)
#   make bench      CPU benchmarks, printed
#   make mutate     each defence's deliberate bug must fail a test (tests/mutations.py)

CC      ?= gcc
BUILD   ?= build
PYTHON  ?= $(shell scripts/find-python)
PKGS    := jansson libmicrohttpd libcurl sqlite3 hiredis libseccomp
WARN    := -std=c11 -Wall -Wextra -Wpedantic -Werror
CFLAGS  ?= -O2 -g
override CFLAGS += $(WARN) -D_GNU_SOURCE -fPIC -Iinclude -Isrc $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
ifeq ($(PKG_LIBS),)
# no pkg-config data (e.g. a GPU machine with carried headers and libraries)
PKG_LIBS := -ljansson -lmicrohttpd -lcurl -lsqlite3 -lhiredis -lseccomp
endif
LDLIBS  := -Wl,--as-needed $(PKG_LIBS) -lm -lpthread

LIB_SRCS := $(wildcard lib/*.c)
APP_SRCS := $(filter-out src/cli/main.c,$(wildcard src/common/*.c src/server/*.c src/worker/*.c src/corpus/*.c src/agent/*.c src/cli/*.c))
TEST_SRCS := $(wildcard tests/unit/test_*.c)

LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
APP_OBJS := $(APP_SRCS:%.c=$(BUILD)/%.o)
TESTS    := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)

all: $(BUILD)/libkgym.a $(BUILD)/libkgym.so $(BUILD)/libkgym_sandbox.so $(BUILD)/kgym

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libkgym.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

# libkgym's JSON layer (lib/rl_json.c, lib/json_util.c) needs jansson:
# whatever links libkgym.a links -ljansson too
LIB_LDLIBS := -ljansson -lm

$(BUILD)/libkgym.so: $(LIB_OBJS)
	$(CC) $(CFLAGS) -shared -o $@ $^ $(LIB_LDLIBS)

# the sandbox as a shared object, for the Python zygote's children (ctypes)
SANDBOX_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard src/worker/sandbox*.c))
$(BUILD)/libkgym_sandbox.so: $(SANDBOX_OBJS) $(LIB_OBJS)
	$(CC) $(CFLAGS) -shared -o $@ $^ -lseccomp -ljansson

$(BUILD)/libkgym-app.a: $(APP_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/kgym: $(BUILD)/src/cli/main.o $(BUILD)/libkgym-app.a $(BUILD)/libkgym.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# test_sqldb counts kgym's fdatasync calls through a link-time wrapper
$(BUILD)/tests/test_sqldb: LDLIBS += -Wl,--wrap=fdatasync

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libkgym-app.a $(BUILD)/libkgym.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -o $@ $^ $(LDLIBS) -lcmocka

$(BUILD)/bench/%: bench/%.c $(BUILD)/libkgym.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O3 -march=native -o $@ $^ $(LIB_LDLIBS)

unit: $(TESTS) all
	@set -e; for t in $(TESTS); do echo "== $$t"; $$t; done

pytest: all
	PYTHONPATH=$(CURDIR)/harness:$(CURDIR)/python KGYM_LIB=$(CURDIR)/$(BUILD)/libkgym.so KGYM_BIN=$(CURDIR)/$(BUILD)/kgym $(PYTHON) -m pytest -q tests/python tests/harness tests/problems tests/faults tests/integration

test: unit pytest fuzz

asan:
	$(MAKE) BUILD=build-asan CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" unit

# The request fuzzer (tests/fuzz/fuzz_request.c) under ASan + UBSan, run for
# FUZZ_SECONDS from the seeds in tests/fuzz/corpus (new inputs it finds go
# to $(BUILD)-fuzz-*/corpus, not the tree); a crash, a leak or a sanitizer
# report fails it and leaves the input in $(BUILD)-fuzz-*/crash-*. With
# clang's libFuzzer where it links (scripts/install-deps installs clang),
# else gcc with tests/fuzz/driver.c (the seeds, then random mutations of
# them, no coverage feedback), said on the first line.
FUZZ_SECONDS ?= 30
FUZZ_ARGS ?= -max_len=16384 -rss_limit_mb=2048 -timeout=20
fuzz:
	@t=$$(mktemp -d); \
	printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' > $$t/t.c; \
	if clang -fsanitize=fuzzer $$t/t.c -o $$t/t >/dev/null 2>&1; then kind=libfuzzer; cc=clang; \
	else kind=driver; cc=gcc; echo "fuzz: no clang with libFuzzer (scripts/install-deps installs it): gcc and tests/fuzz/driver.c instead"; fi; \
	rm -rf $$t; \
	$(MAKE) --no-print-directory fuzz-run FUZZ_KIND=$$kind FUZZ_CC=$$cc

FUZZ_DIR = $(BUILD)-fuzz-$(FUZZ_KIND)
FUZZ_SRCS := $(wildcard src/server/*.c src/common/*.c lib/*.c)
FUZZ_OBJS = $(FUZZ_SRCS:%.c=$(FUZZ_DIR)/%.o)
FUZZ_SAN = -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS = -std=c11 -Wall -Wextra -g -O1 -fno-omit-frame-pointer -D_GNU_SOURCE \
	-Iinclude -Isrc $(shell pkg-config --cflags $(PKGS) 2>/dev/null) \
	$(if $(filter libfuzzer,$(FUZZ_KIND)),-fsanitize=fuzzer-no-link) $(FUZZ_SAN)

$(FUZZ_DIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_DIR)/fuzz_request: $(FUZZ_DIR)/tests/fuzz/fuzz_request.o $(FUZZ_OBJS) \
		$(if $(filter driver,$(FUZZ_KIND)),$(FUZZ_DIR)/tests/fuzz/driver.o)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(if $(filter libfuzzer,$(FUZZ_KIND)),-fsanitize=fuzzer) \
		-o $@ $^ $(LDLIBS)

fuzz-run: $(FUZZ_DIR)/fuzz_request
	@rm -rf $(FUZZ_DIR)/corpus $(FUZZ_DIR)/crash-*; mkdir -p $(FUZZ_DIR)/corpus
	@echo "fuzz: $(FUZZ_DIR)/fuzz_request ($(FUZZ_KIND)) for $(FUZZ_SECONDS) s, log in $(FUZZ_DIR)/fuzz.log"
	@if $(FUZZ_DIR)/fuzz_request -max_total_time=$(FUZZ_SECONDS) $(FUZZ_ARGS) \
		-artifact_prefix=$(FUZZ_DIR)/ $(FUZZ_DIR)/corpus tests/fuzz/corpus \
		>$(FUZZ_DIR)/fuzz.log 2>&1; then \
	    grep -E "DONE|^Done|seed input|no crash" $(FUZZ_DIR)/fuzz.log; \
	else \
	    tail -n 60 $(FUZZ_DIR)/fuzz.log; \
	    echo "fuzz: FAILED; the input that failed: $$(ls $(FUZZ_DIR)/crash-* 2>/dev/null)"; exit 1; \
	fi

test-gpu: all
	scripts/test-gpu

# every defence's deliberate bug must turn a test red (tests/mutations.py)
mutate: all
	scripts/mutate $(MUTATE_ARGS)

bench: $(BUILD)/bench/rl_bench
	$(BUILD)/bench/rl_bench

format:
	clang-format -i $(wildcard include/kgym/*.h lib/*.c lib/*.h src/*/*.c src/*/*.h tests/unit/*.c tests/unit/*.h bench/*.c)

clean:
	rm -rf build build-asan build-fuzz-*

.PHONY: all unit pytest test asan test-gpu bench mutate format clean
.SECONDARY:
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
ifneq ($(FUZZ_KIND),)
-include $(shell find $(FUZZ_DIR) -name '*.d' 2>/dev/null)
endif
