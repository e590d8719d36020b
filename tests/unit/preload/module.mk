# tests/unit/preload/: fixtures for the libaiprof.so unit tests (test_preload_*), and the
# link rules of those tests (they take the place of the generic unit-test rule: they
# load libaiprof.so and link the fixtures instead of the injector libraries).
PRELOAD_FX_DIR := $(BUILD)/tests/unit/preload
PRELOAD_FX_CFLAGS := $(ALL_CFLAGS) -fPIC -I$(CUDA_HOME)/include
PRELOAD_FX_SO = $(CC) $(PRELOAD_FX_CFLAGS) $(ALL_LDFLAGS) -shared -Wl,-soname,$(notdir $@)

$(PRELOAD_FX_DIR)/libfixture_cuda.so: tests/unit/preload/fixture_cuda.c
	$(call msg,CCLD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(PRELOAD_FX_SO) -o $@ $<

# -z now -z relro: the GOT is read-only when libaiprof patches it
$(PRELOAD_FX_DIR)/libfixture_caller.so: tests/unit/preload/fixture_caller.c $(PRELOAD_FX_DIR)/libfixture_cuda.so
	$(call msg,CCLD,$@)
	$(Q)$(PRELOAD_FX_SO) -Wl,-z,now -Wl,-z,relro -o $@ $< -L$(PRELOAD_FX_DIR) -lfixture_cuda \
		-Wl,-rpath,'$$ORIGIN'

$(PRELOAD_FX_DIR)/libfixture_late.so: tests/unit/preload/fixture_late.c $(PRELOAD_FX_DIR)/libfixture_cuda.so
	$(call msg,CCLD,$@)
	$(Q)$(PRELOAD_FX_SO) -Wl,-z,lazy -o $@ $< -L$(PRELOAD_FX_DIR) -lfixture_cuda \
		-Wl,-rpath,'$$ORIGIN'

# -fno-plt: the call goes through a GLOB_DAT slot
$(PRELOAD_FX_DIR)/libfixture_noplt.so: tests/unit/preload/fixture_late.c $(PRELOAD_FX_DIR)/libfixture_cuda.so
	$(call msg,CCLD,$@)
	$(Q)$(PRELOAD_FX_SO) -fno-plt -o $@ $< -L$(PRELOAD_FX_DIR) -lfixture_cuda \
		-Wl,-rpath,'$$ORIGIN'

# no DT_NEEDED on the fixture: loaded lazily before anything defines cudaMemset
$(PRELOAD_FX_DIR)/libfixture_early.so: tests/unit/preload/fixture_early.c
	$(call msg,CCLD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(PRELOAD_FX_SO) -Wl,-z,lazy -o $@ $<

$(PRELOAD_FX_DIR)/libfixture_runpath.so: tests/unit/preload/fixture_rp.c
	$(call msg,CCLD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(PRELOAD_FX_SO) -o $@ $< -Wl,--enable-new-dtags,-rpath,'$$ORIGIN/rp'

$(PRELOAD_FX_DIR)/libfixture_rpath.so: tests/unit/preload/fixture_rp.c
	$(call msg,CCLD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(PRELOAD_FX_SO) -o $@ $< -Wl,--disable-new-dtags,-rpath,'$$ORIGIN/rp'

$(PRELOAD_FX_DIR)/rp/libfixture_rpdep.so $(PRELOAD_FX_DIR)/rp/libfixture_rpdep2.so: tests/unit/preload/fixture_rpdep.c
	$(call msg,CCLD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(PRELOAD_FX_SO) -o $@ $<

# binds dlopen@GLIBC_2.2.5 (built against glibc < 2.34), lazily
$(PRELOAD_FX_DIR)/libfixture_oldver.so: tests/unit/preload/fixture_oldver.c
	$(call msg,CCLD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(PRELOAD_FX_SO) -Wl,-z,lazy -o $@ $<

# built without frame pointers (the flag after ALL_CFLAGS' -fno-omit-frame-pointer wins)
$(PRELOAD_FX_DIR)/libfixture_nofp.so: tests/unit/preload/fixture_nofp.c $(PRELOAD_FX_DIR)/libfixture_caller.so
	$(call msg,CCLD,$@)
	$(Q)$(PRELOAD_FX_SO) -fomit-frame-pointer -o $@ $< -L$(PRELOAD_FX_DIR) -lfixture_caller \
		-Wl,-rpath,'$$ORIGIN'

PRELOAD_FIXTURES := $(addprefix $(PRELOAD_FX_DIR)/,libfixture_cuda.so libfixture_caller.so \
	libfixture_nofp.so libfixture_late.so libfixture_noplt.so libfixture_early.so libfixture_runpath.so \
	libfixture_rpath.so rp/libfixture_rpdep.so rp/libfixture_rpdep2.so libfixture_oldver.so)
TEST_PROGRAMS += $(PRELOAD_FIXTURES)

# The tests read GOT slots with the library's own ELF reader (tested on its own).
PRELOAD_TEST_CFLAGS := -I$(CUDA_HOME)/include -Iinjector/preload
PRELOAD_TEST_DEPS := $(BUILD)/libaiprof.so $(PRELOAD_FIXTURES) $(BUILD)/injector/preload/elfdyn.o
PRELOAD_TEST_FX := -L$(PRELOAD_FX_DIR) -lfixture_caller -lfixture_cuda -Wl,-rpath,'$$ORIGIN/preload'

EXTRA_CFLAGS_tests_unit_test_preload_hooks := $(PRELOAD_TEST_CFLAGS)
EXTRA_CFLAGS_tests_unit_test_preload_storm := $(PRELOAD_TEST_CFLAGS)
EXTRA_CFLAGS_tests_unit_test_preload_elfdyn := $(PRELOAD_TEST_CFLAGS)
EXTRA_CFLAGS_tests_unit_test_preload_dlopen := $(PRELOAD_TEST_CFLAGS)

$(BUILD)/tests/unit/test_preload_hooks: $(BUILD)/tests/unit/test_preload_hooks.o $(PRELOAD_TEST_DEPS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/injector/preload/elfdyn.o $(PRELOAD_TEST_FX) \
		-lcmocka -ldl -lpthread

$(BUILD)/tests/unit/test_preload_storm: $(BUILD)/tests/unit/test_preload_storm.o $(PRELOAD_TEST_DEPS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(PRELOAD_TEST_FX) -lcmocka -ldl -lpthread

$(BUILD)/tests/unit/test_preload_elfdyn: $(BUILD)/tests/unit/test_preload_elfdyn.o $(BUILD)/injector/preload/elfdyn.o
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcmocka -ldl -lpthread

# links no fixture: it loads them itself, in a chosen order
$(BUILD)/tests/unit/test_preload_dlopen: $(BUILD)/tests/unit/test_preload_dlopen.o $(PRELOAD_TEST_DEPS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/injector/preload/elfdyn.o -lcmocka -ldl -lpthread

EXTRA_CFLAGS_tests_unit_test_preload_callstack := $(PRELOAD_TEST_CFLAGS)

$(BUILD)/tests/unit/test_preload_callstack: $(BUILD)/tests/unit/test_preload_callstack.o $(PRELOAD_TEST_DEPS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< -L$(PRELOAD_FX_DIR) -lfixture_nofp $(PRELOAD_TEST_FX) \
		-lcmocka -ldl -lpthread
