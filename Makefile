# kgym - plain GNU make. See README.md.
#   make            libkgym.a, libkgym.so and the kgym command (in build/)
#   make test       every CPU test: C unit tests, then pytest
#   make asan       the C tests under AddressSanitizer + UBSan
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
APP_SRCS := $(filter-out src/cli/main.c,$(wildcard src/common/*.c src/server/*.c src/worker/*.c src/agent/*.c src/cli/*.c))
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

$(BUILD)/libkgym.so: $(LIB_OBJS)
	$(CC) $(CFLAGS) -shared -o $@ $^ -lm

# the sandbox as a shared object, for the Python zygote's children (ctypes)
SANDBOX_OBJS := $(BUILD)/src/worker/sandbox.o $(BUILD)/src/worker/sandbox_json.o
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
	$(CC) $(CFLAGS) -O3 -march=native -o $@ $^ -lm

unit: $(TESTS) all
	@set -e; for t in $(TESTS); do echo "== $$t"; $$t; done

pytest: all
	PYTHONPATH=$(CURDIR)/harness:$(CURDIR)/python KGYM_LIB=$(CURDIR)/$(BUILD)/libkgym.so KGYM_BIN=$(CURDIR)/$(BUILD)/kgym $(PYTHON) -m pytest -q tests/python tests/harness tests/problems tests/faults tests/integration

test: unit pytest

asan:
	$(MAKE) BUILD=build-asan CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" unit

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
	rm -rf build build-asan

.PHONY: all unit pytest test asan test-gpu bench mutate format clean
.SECONDARY:
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
