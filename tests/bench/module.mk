# tests/bench/: benchmarks (`make bench` runs tests/bench/run.sh).
# bench_hooks: cost of a libaiprof hook, against its own do-nothing cudaLaunchKernel.
BENCH_DIR := $(BUILD)/tests/bench
BENCH_SO = $(CC) $(ALL_CFLAGS) -fPIC -I$(CUDA_HOME)/include $(ALL_LDFLAGS) -shared \
	-Wl,-soname,$(notdir $@)

$(BENCH_DIR)/libbench_cuda.so: tests/bench/bench_fixture.c
	$(call msg,CCLD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(BENCH_SO) -o $@ $<

$(BENCH_DIR)/libbench_caller.so: tests/bench/bench_caller.c $(BENCH_DIR)/libbench_cuda.so
	$(call msg,CCLD,$@)
	$(Q)$(BENCH_SO) -o $@ $< -L$(BENCH_DIR) -lbench_cuda -Wl,-rpath,'$$ORIGIN'

EXTRA_CFLAGS_tests_bench_bench_hooks := -I$(CUDA_HOME)/include

$(BENCH_DIR)/bench_hooks: $(BUILD)/tests/bench/bench_hooks.o $(BENCH_DIR)/libbench_caller.so \
		$(BENCH_DIR)/libbench_cuda.so $(BUILD)/libaiprof.so
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< -L$(BENCH_DIR) -lbench_caller -lbench_cuda \
		-Wl,-rpath,'$$ORIGIN' -ldl -lpthread

TEST_PROGRAMS += $(BENCH_DIR)/bench_hooks $(BENCH_DIR)/libbench_caller.so $(BENCH_DIR)/libbench_cuda.so

# bench_artifacts: artifact-build throughput (timeline + summary + findings) on a synthetic
# window of 5 M events, one core.
$(BENCH_DIR)/bench_artifacts: $(BUILD)/tests/bench/bench_artifacts.o $(BUILD)/libinjector.a \
		$(BUILD)/libcommon.a
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(INJECTOR_LDLIBS)

TEST_PROGRAMS += $(BENCH_DIR)/bench_artifacts

# sync_loop: a call-bound loop on the fake runtime for bench_uprobe_vs_hook.py.
EXTRA_CFLAGS_tests_bench_sync_loop := -I$(CUDA_HOME)/include

$(BENCH_DIR)/sync_loop: $(BUILD)/tests/bench/sync_loop.o $(BUILD)/libcommon.a $(DOUBLES_LIBS) \
		$(DOUBLES_LINKS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/libcommon.a -L$(DOUBLES_DIR) \
		-Wl,-rpath,'$$ORIGIN/../doubles' -lcudart

TEST_PROGRAMS += $(BENCH_DIR)/sync_loop

# getppid_loop: a syscall-bound loop for bench_bystander.py (a process aiprof does not profile).
$(BENCH_DIR)/getppid_loop: $(BUILD)/tests/bench/getppid_loop.o $(BUILD)/libcommon.a
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^

TEST_PROGRAMS += $(BENCH_DIR)/getppid_loop

# pingpong: two threads passing a byte over pipes, for bench_sampler.py.
$(BENCH_DIR)/pingpong: $(BUILD)/tests/bench/pingpong.o $(BUILD)/libcommon.a
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lpthread

TEST_PROGRAMS += $(BENCH_DIR)/pingpong
