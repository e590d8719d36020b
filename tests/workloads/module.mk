# tests/workloads/: programs that tests profile. trainer is linked against the test doubles
# with a RUNPATH of $ORIGIN/../doubles, so it runs without LD_LIBRARY_PATH; the RUNPATH also
# has $ORIGIN/../doubles/cupti, where `trainer --cupti` finds the fake libcupti.so.13.
EXTRA_CFLAGS_tests_workloads_trainer := -I$(CUDA_HOME)/include

$(BUILD)/tests/workloads/trainer: $(BUILD)/tests/workloads/trainer.o $(DOUBLES_LIBS) $(DOUBLES_LINKS) \
		$(DOUBLES_CUPTI)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< -L$(DOUBLES_DIR) \
		-Wl,-rpath,'$$ORIGIN/../doubles:$$ORIGIN/../doubles/cupti' \
		-lcudart -lcuda -lnccl -libverbs -lpthread -ldl

TEST_PROGRAMS += $(BUILD)/tests/workloads/trainer

# libpylaunch.so: the compiled extension tests/workloads/py_launch.py loads with ctypes;
# launches kernels through its PLT on the fake runtime (call stacks with Python frames).
EXTRA_CFLAGS_tests_workloads_pylaunch := -I$(CUDA_HOME)/include

$(BUILD)/tests/workloads/libpylaunch.so: tests/workloads/pylaunch.c $(DOUBLES_LIBS) $(DOUBLES_LINKS) \
		$(DOUBLES_CUPTI)
	$(call msg,CCLD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) -fPIC -I$(CUDA_HOME)/include $(ALL_LDFLAGS) -shared \
		-Wl,-soname,libpylaunch.so -o $@ $< -L$(DOUBLES_DIR) \
		-Wl,-rpath,'$$ORIGIN/../doubles:$$ORIGIN/../doubles/cupti' -lcudart -Wl,--no-as-needed -lcuda -Wl,--as-needed -ldl

TEST_PROGRAMS += $(BUILD)/tests/workloads/libpylaunch.so

# the same extension built without frame pointers, as distro and framework libraries are:
# its launches are unwound through it by CFI (tests/integration/test_artifacts.py)
$(BUILD)/tests/workloads/libpylaunch_nofp.so: tests/workloads/pylaunch.c $(DOUBLES_LIBS) $(DOUBLES_LINKS) \
		$(DOUBLES_CUPTI)
	$(call msg,CCLD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) -fomit-frame-pointer -fPIC -I$(CUDA_HOME)/include $(ALL_LDFLAGS) -shared \
		-Wl,-soname,libpylaunch_nofp.so -o $@ $< -L$(DOUBLES_DIR) \
		-Wl,-rpath,'$$ORIGIN/../doubles:$$ORIGIN/../doubles/cupti' -lcudart -Wl,--no-as-needed -lcuda -Wl,--as-needed -ldl

TEST_PROGRAMS += $(BUILD)/tests/workloads/libpylaunch_nofp.so

# ring_scribbler: damages a target's event ring through /proc/PID/fd, as a hostile target
# could (tests/integration/test_hostile_ring.py)
$(BUILD)/tests/workloads/ring_scribbler: $(BUILD)/tests/workloads/ring_scribbler.o
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $<

TEST_PROGRAMS += $(BUILD)/tests/workloads/ring_scribbler

# regcheck: checks its own registers, AVX state and syscall results while it is injected
# into and the injector is killed (tests/integration/test_kill_safety.py)
$(BUILD)/tests/workloads/regcheck: $(BUILD)/tests/workloads/regcheck.o
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< -lpthread

TEST_PROGRAMS += $(BUILD)/tests/workloads/regcheck

# task_work_probe.bpf.o: does the running kernel take a task work scheduled from sched_switch?
# (tests/integration/conftest.py loads it with bpftool; never attached)
ifeq ($(EBPF_ENABLED),1)
$(BUILD)/tests/workloads/task_work_probe.bpf.o: tests/workloads/task_work_probe.bpf.c $(BPF_OUT)/vmlinux.h
	$(call msg,BPF,$@)
	@mkdir -p $(dir $@)
	$(Q)$(BPF_CLANG) $(BPF_CFLAGS) \
		$$(grep -qs '^struct bpf_task_work {' $(BPF_OUT)/vmlinux.h && echo -DAIPROF_HAVE_TASK_WORK) \
		-c $< -o $@

TEST_PROGRAMS += $(BUILD)/tests/workloads/task_work_probe.bpf.o
endif
