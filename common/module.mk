# common/: code both programs use (logging, time, JSON writer, /proc and ELF readers, the
# injector's termination message; termination.c needs -ljansson).
COMMON_SRCS := $(wildcard common/*.c)
COMMON_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(COMMON_SRCS))
$(BUILD)/libcommon.a: $(COMMON_OBJS)
	$(call msg,AR,$@)
	$(Q)ar rcs $@ $^
