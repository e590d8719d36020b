# tests/workloads/: the workloads of the eBPF collectors' tests (tests/integration/test_ebpf.py)
# and benchmark (tests/bench/bench_ebpf.py). Built with frame pointers like everything here;
# note that GCC 12 sets up no frame in a leaf function that needs no stack, whatever the
# flags, so the sampled functions keep a volatile local.
EBPF_WORKLOADS := $(BUILD)/tests/workloads/hot_functions $(BUILD)/tests/workloads/blocking_io

$(BUILD)/tests/workloads/hot_functions $(BUILD)/tests/workloads/blocking_io: %: %.o
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< -lpthread

TEST_PROGRAMS += $(EBPF_WORKLOADS)
