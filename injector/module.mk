# injector/: the `aiprof` CLI (process discovery, ptrace injection, collection, artifacts).
INJECTOR_SRCS := $(filter-out injector/main.c,$(wildcard injector/*.c))
INJECTOR_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(INJECTOR_SRCS))
INJECTOR_LDLIBS := -lelf -lz -ldl -lpthread -lstdc++ -lcurl -lcrypto -ljansson -lm

$(BUILD)/libinjector.a: $(INJECTOR_OBJS)
	$(call msg,AR,$@)
	$(Q)ar rcs $@ $^

$(BUILD)/aiprof: $(BUILD)/injector/main.o $(BUILD)/libinjector.a $(BUILD)/libcommon.a
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(INJECTOR_LDLIBS)

PROGRAMS += $(BUILD)/aiprof

include injector/preload/module.mk
