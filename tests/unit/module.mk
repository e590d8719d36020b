# Every tests/unit/test_*.c is one cmocka program linked with the injector and common
# libraries. A test that needs more objects sets TEST_OBJS_<name> (and a prerequisite).
UNIT_TEST_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_TEST_SRCS))
UNIT_LIBS := $(BUILD)/libinjector.a $(BUILD)/libcommon.a

$(BUILD)/tests/unit/%: $(BUILD)/tests/unit/%.o $(UNIT_LIBS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(TEST_OBJS_$*) $(UNIT_LIBS) -lcmocka $(INJECTOR_LDLIBS)

TEST_PROGRAMS += $(UNIT_TESTS)

# the call chain test_unwind walks by CFI has no frame pointers
EXTRA_CFLAGS_tests_unit_test_unwind += -fomit-frame-pointer

sanitized-unit-tests: $(UNIT_TESTS)
# the injector itself, for the integration tests that feed it a hostile target (tests/run.sh)
sanitized-injector: $(BUILD)/aiprof
.PHONY: sanitized-unit-tests sanitized-injector
