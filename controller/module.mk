# controller/: aiprof-controller, the ProfilingSession operator (libcurl, jansson, libyaml,
# libwebsockets). Everything but main.c goes into libcontroller.a, which the unit tests link.
CONTROLLER_SRCS := $(filter-out controller/main.c,$(wildcard controller/*.c))
CONTROLLER_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(CONTROLLER_SRCS))
CONTROLLER_LDLIBS := -lcurl -ljansson -lyaml -lwebsockets -lcrypto -lpthread

$(BUILD)/libcontroller.a: $(CONTROLLER_OBJS)
	$(call msg,AR,$@)
	$(Q)ar rcs $@ $^

$(BUILD)/aiprof-controller: $(BUILD)/controller/main.o $(BUILD)/libcontroller.a $(BUILD)/libcommon.a
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CONTROLLER_LDLIBS)

PROGRAMS += $(BUILD)/aiprof-controller

# The controller's unit tests link libcontroller.a ahead of the generic unit-test libraries.
CONTROLLER_TESTS := $(patsubst tests/unit/%.c,%,$(wildcard tests/unit/test_kube*.c \
	tests/unit/test_workqueue.c tests/unit/test_reconcile*.c tests/unit/test_controller*.c \
	tests/unit/test_cron.c tests/unit/test_policy*.c))
$(foreach t,$(CONTROLLER_TESTS),$(eval TEST_OBJS_$(t) := $(BUILD)/libcontroller.a \
	$(BUILD)/libcommon.a $(CONTROLLER_LDLIBS)))
$(foreach t,$(CONTROLLER_TESTS),$(eval $(BUILD)/tests/unit/$(t): $(BUILD)/libcontroller.a))
