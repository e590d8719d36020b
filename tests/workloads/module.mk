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
