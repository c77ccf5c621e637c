# tpuemu — build, test, bench.  See README.md and CONTRIBUTING.md.
#
# The simulator core (mxu/, hbm/, interconnect/, firmware/, emu/, emu/fx/,
# emu/out/) builds into build/libtpuemu.a with no SDL dependency.  The front
# ends, the CLI (emu/cli/) and the SDL viewer (emu/view/), link that library.
# docs/ARCHITECTURE.md draws the layers.

CC      ?= cc
PKGS_CORE := libcjson libpng libzip
PKGS_VIEW := sdl2
PKG_CONFIG ?= pkg-config

BUILD   ?= build
OPT     ?= -O2
CSTD    := -std=c11 -D_POSIX_C_SOURCE=200809L
WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CORE_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(PKGS_CORE) 2>/dev/null)
VIEW_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(PKGS_VIEW) 2>/dev/null)
CORE_LIBS   := $(shell $(PKG_CONFIG) --libs $(PKGS_CORE) 2>/dev/null) -lm
VIEW_LIBS   := $(shell $(PKG_CONFIG) --libs $(PKGS_VIEW) 2>/dev/null)
# CFLAGS from the command line (make asan, a user's flags) add to ours.
CFLAGS  ?=
ALL_CFLAGS = $(CSTD) $(OPT) -g $(WARN) -I. $(CORE_CFLAGS) -MMD -MP $(CFLAGS) $(VIEWFLAGS)
LDFLAGS ?=

CORE_DIRS  := mxu hbm interconnect firmware emu emu/fx emu/out emu/imp
CORE_SRCS  := $(foreach d,$(CORE_DIRS),$(wildcard $(d)/*.c))
CLI_SRCS   := $(wildcard emu/cli/*.c emu/cli/sweep/*.c)
# The viewer's files that draw include SDL; the rest (its state, layout,
# hit testing and text: emu/view/layout.h) do not, and the test runner
# links them too, so the tests call the viewer's own functions.
VIEW_PURE_SRCS := emu/view/index.c emu/view/layout.c emu/view/demo.c
VIEW_SRCS  := $(filter-out $(VIEW_PURE_SRCS),$(wildcard emu/view/*.c))
TEST_SRCS  := $(wildcard test/test_*.c) test/harness.c
# The CLI's files the tests call directly (the rest they run as tpuemu).
CLI_PURE_SRCS := emu/cli/pool.c

CORE_OBJS := $(CORE_SRCS:%.c=$(BUILD)/%.o)
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/%.o)
VIEW_OBJS := $(VIEW_SRCS:%.c=$(BUILD)/%.o)
VIEW_PURE_OBJS := $(VIEW_PURE_SRCS:%.c=$(BUILD)/%.o)
CLI_PURE_OBJS := $(CLI_PURE_SRCS:%.c=$(BUILD)/%.o)
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/test/registry.o
LIB       := $(BUILD)/libtpuemu.a

.PHONY: all deps run test bench asan clean fuzz fuzz-report fuzz-sim fuzz-sweep fuzz-import check-perf rebaseline
all: tpuemu

# Only the viewer objects that draw see SDL's headers.
$(VIEW_OBJS): VIEWFLAGS = $(VIEW_CFLAGS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIB): $(CORE_OBJS)
	@rm -f $@
	ar rcs $@ $^

tpuemu: $(CLI_OBJS) $(VIEW_OBJS) $(VIEW_PURE_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJS) $(VIEW_OBJS) $(VIEW_PURE_OBJS) $(LIB) $(VIEW_LIBS) $(CORE_LIBS)

# The test registry is generated from every `void th_suite_NAME(th_ctx *t)`
# in test/test_*.c, so adding a suite is adding a file.
$(BUILD)/test/registry.c: $(wildcard test/test_*.c) scripts/gen_registry.sh
	@mkdir -p $(dir $@)
	sh scripts/gen_registry.sh $(wildcard test/test_*.c) > $@.tmp && mv $@.tmp $@

$(BUILD)/test/registry.o: $(BUILD)/test/registry.c
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/test_runner: $(TEST_OBJS) $(VIEW_PURE_OBJS) $(CLI_PURE_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(TEST_OBJS) $(VIEW_PURE_OBJS) $(CLI_PURE_OBJS) $(LIB) $(CORE_LIBS)

# First-time set-up on a fresh Debian machine: installs what pkg-config
# cannot find (as root, with apt-get), otherwise says what to install.
deps:
	@sh scripts/deps.sh

run: deps
	@$(MAKE) --no-print-directory tpuemu
	./tpuemu run traces/retinanet-1280-v3-8.json

# The runner prints one line per test and ends with "N passed, N failed".
test: deps
	@$(MAKE) --no-print-directory tpuemu $(BUILD)/test_runner
	@TPUEMU=./tpuemu $(BUILD)/test_runner

bench: deps
	@$(MAKE) --no-print-directory tpuemu $(BUILD)/bench
	@sh scripts/bench.sh

# Benchmarks: every `void tb_bench_NAME(void)` in test/bench_*.c, run in
# file order by test/bench_main.c; each prints "name: value unit" lines.
BENCH_SRCS := $(wildcard test/bench_*.c)
$(BUILD)/test/bench_registry.c: $(BENCH_SRCS) scripts/gen_registry.sh
	@mkdir -p $(dir $@)
	sh scripts/gen_registry.sh --bench $(filter-out test/bench_main.c,$(BENCH_SRCS)) > $@.tmp && mv $@.tmp $@

$(BUILD)/bench: $(BENCH_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/test/bench_registry.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(CORE_LIBS)

# The trace parser under libFuzzer + ASan/UBSan (clang).  FUZZ_SECONDS sets
# the run length; the seed corpus is test/fuzz/corpus.
FUZZ_SECONDS ?= 60
fuzz: deps
	@mkdir -p build-fuzz/corpus
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -I. $(CORE_CFLAGS) \
	  -fsanitize=fuzzer,address,undefined -o build-fuzz/fuzz_trace \
	  test/fuzz/fuzz_trace.c $(CORE_SRCS) $(CORE_LIBS)
	build-fuzz/fuzz_trace -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	  build-fuzz/corpus test/fuzz/corpus

# The Keras importer (test/fuzz/fuzz_import.c): model JSON through
# keras_to_trace and the trace reader; seeded from test/keras/.
fuzz-import: deps
	@mkdir -p build-fuzz/corpus-import
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -I. $(CORE_CFLAGS) \
	  -fsanitize=fuzzer,address,undefined -o build-fuzz/fuzz_import \
	  test/fuzz/fuzz_import.c $(CORE_SRCS) $(CORE_LIBS)
	build-fuzz/fuzz_import -max_total_time=$(FUZZ_SECONDS) -max_len=262144 \
	  -timeout=20 -rss_limit_mb=4096 build-fuzz/corpus-import test/keras \
	  test/keras/tfjs

# The report reader (check and view read reports users hand them), with a
# write-read-write round trip; seeded from the committed baselines.
fuzz-report: deps
	@mkdir -p build-fuzz/corpus-report
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -I. $(CORE_CFLAGS) \
	  -fsanitize=fuzzer,address,undefined -o build-fuzz/fuzz_report \
	  test/fuzz/fuzz_report.c $(CORE_SRCS) $(CORE_LIBS)
	build-fuzz/fuzz_report -max_total_time=$(FUZZ_SECONDS) -max_len=262144 \
	  build-fuzz/corpus-report baselines

# The sweep-file parser (users hand `tpuemu sweep` their own SWEEP.json),
# with "all", the --set checks and every grid point (test/fuzz/fuzz_sweep.c:
# the base traces it names are written under /tmp/tpuemu-fuzz-sweep).
fuzz-sweep: deps
	@mkdir -p build-fuzz/corpus-sweep
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -I. $(CORE_CFLAGS) \
	  -fsanitize=fuzzer,address,undefined -o build-fuzz/fuzz_sweep \
	  test/fuzz/fuzz_sweep.c emu/cli/common.c emu/cli/sweep/file.c \
	  emu/cli/sweep/grid.c emu/cli/sweep/run.c $(CORE_SRCS) $(CORE_LIBS)
	build-fuzz/fuzz_sweep -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	  -timeout=20 -dict=test/fuzz/sweep.dict \
	  build-fuzz/corpus-sweep test/fuzz/corpus-sweep

# The whole pipeline (plan, lowering, pod engine, --functional) on every
# trace the reader accepts (test/fuzz/fuzz_sim.c); its own corpus, seeded
# from the same files.
fuzz-sim: deps
	@mkdir -p build-fuzz/corpus-sim
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -I. $(CORE_CFLAGS) \
	  -fsanitize=fuzzer,address,undefined -o build-fuzz/fuzz_sim \
	  test/fuzz/fuzz_sim.c $(CORE_SRCS) $(CORE_LIBS)
	build-fuzz/fuzz_sim -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	  -timeout=20 -rss_limit_mb=4096 build-fuzz/corpus-sim test/fuzz/corpus \
	  traces/small traces/functional test/inputsplit

# The performance gate: re-run the reference traces and compare them with
# the committed reports in baselines/ (tpuemu check).  rebaseline refreshes
# them on purpose, so a reviewer sees the diff.
check-perf: tpuemu
	@sh scripts/check_perf.sh

rebaseline: tpuemu
	@sh scripts/check_perf.sh --rebaseline

# AddressSanitizer + UndefinedBehaviorSanitizer over the whole test suite,
# in its own build tree so it never mixes objects with the normal build.
asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 \
	  CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	  LDFLAGS="-fsanitize=address,undefined" TPUEMU_BIN=build-asan/tpuemu \
	  build-asan/tpuemu build-asan/test_runner
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  TPUEMU=./build-asan/tpuemu TPUEMU_ASAN=1 build-asan/test_runner

build-asan/tpuemu: $(CLI_OBJS) $(VIEW_OBJS) $(VIEW_PURE_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJS) $(VIEW_OBJS) $(VIEW_PURE_OBJS) $(LIB) $(VIEW_LIBS) $(CORE_LIBS)

clean:
	rm -rf build build-asan build-fuzz tpuemu

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
