# kode-gopher: one binary, many roles.  See README.md.
#
#   make            build ./kode-gopher
#   make deps       install missing Debian and npm packages (idempotent)
#   make runtime    download + precompile the Go runtime caches (incremental)
#   make check      deps + runtime + build + every test; ends "N passed, N failed"
#   make asan       the same tests against an ASan/UBSan build
#   make debug      -O0 build whose worker logs a denied syscall instead of dying
#   make fuzz       build the libFuzzer targets (clang); make check runs each for 20 s
#   make fuzz-long  run every target for FUZZ_TIME s (default 600), then make fuzz-merge
#   make fuzz-merge add the new coverage found by the runs to tests/fuzz/corpus/ (commit it)
#   make bench      print the benchmark tables
#   make check-cgroup2  (opt-in, root) the sandbox limits on cgroup v2, in a Debian VM under qemu
#   make demo       set everything up and run the main job once

CC       ?= cc
BUILD    ?= build
PREFIX   ?= /usr/local
RUNTIME_DIR ?= /var/cache/kode-gopher/runtime
VERSION  := $(shell git describe --always --dirty 2>/dev/null || echo dev)

CFLAGS_BASE := -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -I. \
	-DKG_VERSION='"$(VERSION)"' -DKG_RUNTIME_DIR='"$(RUNTIME_DIR)"'
CFLAGS   ?= -O2 -g
include sources.mk
LIBS     := $(KG_LIBS)

SRC      := $(KG_SRC)
ASM      := $(KG_ASM)
LIB_SRC  := $(filter-out master/main.c,$(SRC))
OBJ      := $(SRC:%.c=$(BUILD)/%.o) $(ASM:%.S=$(BUILD)/%.o)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(ASM:%.S=$(BUILD)/%.o)
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all deps runtime check asan test fuzz fuzz-long fuzz-merge bench demo clean install debug unit
all: kode-gopher

kode-gopher: $(BUILD)/kode-gopher
	cp $< $@.tmp && mv -f $@.tmp $@

$(BUILD)/kode-gopher: $(OBJ)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/%.o: %.c $(wildcard */*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/runtime/embed.o: runtime/main.go.tmpl

$(BUILD)/%.o: %.S
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I. -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB_OBJ) $(LIBS) -lcmocka

unit: $(UNIT_BIN)

deps:
	@packaging/install-deps.sh

runtime: deps
	@RUNTIME_DIR=$(RUNTIME_DIR) runtime/prepare.sh
	@RUNTIME_DIR=$(RUNTIME_DIR) runtime/stdplan.sh

test: all unit
	@BUILD=$(BUILD) RUNTIME_DIR=$(RUNTIME_DIR) tests/run.sh

check: deps runtime
	@$(MAKE) --no-print-directory test

asan:
	@$(MAKE) --no-print-directory deps runtime
	@$(MAKE) --no-print-directory BUILD=build-asan \
		CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
		LDFLAGS="-fsanitize=address,undefined" test

debug:
	@$(MAKE) --no-print-directory BUILD=build-debug CFLAGS="-O0 -g3 -DKG_SECCOMP_DEFAULT='\"log\"'" build-debug/kode-gopher
	@echo "built build-debug/kode-gopher (seccomp denials are logged, not fatal)"

fuzz:
	@$(MAKE) --no-print-directory -f tests/fuzz/Makefile

# FUZZ_TIME: seconds per target (default 600); a finding in one target does not stop the rest
fuzz-long:
	@$(MAKE) --no-print-directory -f tests/fuzz/Makefile long FUZZ_LONG_TIME=$(or $(FUZZ_TIME),600)

fuzz-merge:
	@$(MAKE) --no-print-directory -f tests/fuzz/Makefile merge

bench: all runtime
	@mkdir -p $(BUILD)
	@$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS) -o $(BUILD)/mcpbench bench/mcpbench.c -ljansson -lm
	@BUILD=$(BUILD) RUNTIME_DIR=$(RUNTIME_DIR) bench/run.sh $(BENCH_ARGS)
# the sandbox's cgroup v2 limits, tested in a cgroup-v2-only Debian guest (not part of check:
# the first run downloads a Debian image's packages; tests/cgroup2/vm.sh)
.PHONY: check-cgroup2
check-cgroup2: all
	@BUILD=$(BUILD) RUNTIME_DIR=$(RUNTIME_DIR) tests/cgroup2/vm.sh

.PHONY: bench-k8s
bench-k8s: all runtime
	@BUILD=$(BUILD) RUNTIME_DIR=$(RUNTIME_DIR) bench/run.sh --only k8s $(BENCH_ARGS)

demo: deps runtime all
	@./demo.sh

install: all
	install -D -m 0755 kode-gopher $(DESTDIR)$(PREFIX)/bin/kode-gopher

clean:
	rm -rf build build-asan build-debug build-fuzz kode-gopher

-include $(OBJ:.o=.d)
