# injector/: the `aiprof` CLI, one folder per stage of its pipeline, each using only the
# folders below it (injector/README.md; tests/layering.py checks it):
#   cli > merge > artifacts > analyze > collect > attach > target > model > common
INJECTOR_LAYERS := cli merge artifacts analyze collect attach target model
INJECTOR_SRCS := $(filter-out injector/cli/main.c,$(foreach d,$(INJECTOR_LAYERS),$(wildcard injector/$(d)/*.c)))
INJECTOR_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(INJECTOR_SRCS))
INJECTOR_LDLIBS := -ldw -lelf -lz -ldl -lpthread -lstdc++ -lcurl -lcrypto -ljansson -lm

$(BUILD)/libinjector.a: $(INJECTOR_OBJS)
	$(call msg,AR,$@)
	$(Q)ar rcs $@ $^

$(BUILD)/aiprof: $(BUILD)/injector/cli/main.o $(BUILD)/libinjector.a $(BUILD)/libcommon.a
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(INJECTOR_LDLIBS)

PROGRAMS += $(BUILD)/aiprof

include injector/preload/module.mk
