# bpf/: the eBPF collectors. Each is a triad: bpf/NAME.bpf.c (kernel side), bpf/NAME.h (the
# structs both sides share) and injector/collect/ebpf_NAME.c (user side). Generated at build time
# into $(BUILD)/bpf/, never committed:
#   vmlinux.h        from the running kernel's BTF (VMLINUX_BTF)
#   NAME.bpf.o       clang -target bpf, CO-RE
#   NAME.skel.h      bpftool gen skeleton
#   syscall_names.h  syscall number -> name, from the kernel headers' unistd_64.h
# Without BTF at build time the injector is built without eBPF (AIPROF_NO_EBPF) and says so
# in every summary.
BPF_CLANG ?= clang
BPFTOOL ?= bpftool
VMLINUX_BTF ?= /sys/kernel/btf/vmlinux
UNISTD_64 ?= $(firstword $(wildcard /usr/include/x86_64-linux-gnu/asm/unistd_64.h \
	/usr/include/asm/unistd_64.h))
BPF_OUT := $(BUILD)/bpf
BPF_COLLECTORS := cpu offcpu syscalls tasks follow
BPF_SKELS := $(patsubst %,$(BPF_OUT)/%.skel.h,$(BPF_COLLECTORS))
BPF_CFLAGS := -O2 -g -target bpf -D__TARGET_ARCH_x86 -Wall -Werror -Wno-unused-function \
	-I$(BPF_OUT) -Ibpf

EBPF_USER_SRCS := $(wildcard injector/collect/ebpf*.c)
EBPF_USER_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(EBPF_USER_SRCS))

ifneq ($(wildcard $(VMLINUX_BTF)),)
EBPF_ENABLED := 1
$(foreach s,$(EBPF_USER_SRCS),$(eval EXTRA_CFLAGS_$(subst /,_,$(basename $(s))) += -I$(BPF_OUT)))
# the skeletons and generated tables must exist before the loaders compile
$(EBPF_USER_OBJS): $(BPF_SKELS) $(BPF_OUT)/syscall_names.h
else
EBPF_ENABLED := 0
$(foreach s,$(EBPF_USER_SRCS),$(eval EXTRA_CFLAGS_$(subst /,_,$(basename $(s))) += \
	-I$(BPF_OUT) -DAIPROF_NO_EBPF))
$(EBPF_USER_OBJS): $(BPF_OUT)/syscall_names.h
endif

$(BPF_OUT)/vmlinux.h: $(VMLINUX_BTF)
	$(call msg,GEN,$@)
	@mkdir -p $(dir $@)
	$(Q)$(BPFTOOL) btf dump file $< format c > $@.tmp && mv $@.tmp $@

$(BPF_OUT)/%.bpf.o: bpf/%.bpf.c $(BPF_OUT)/vmlinux.h bpf/stack.h bpf/pystack.h bpf/maps.bpf.h \
		bpf/pystack.bpf.h bpf/ucopy.bpf.h bpf/taskwork.bpf.h bpf/%.h
	$(call msg,BPF,$@)
	$(Q)$(BPF_CLANG) $(BPF_CFLAGS) \
		$$(grep -qs '^struct bpf_task_work {' $(BPF_OUT)/vmlinux.h && echo -DAIPROF_HAVE_TASK_WORK) \
		-c $< -o $@

$(BPF_OUT)/%.skel.h: $(BPF_OUT)/%.bpf.o
	$(call msg,GEN,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $*_bpf > $@.tmp && mv $@.tmp $@

$(BPF_OUT)/syscall_names.h: $(UNISTD_64) bpf/module.mk
	$(call msg,GEN,$@)
	@mkdir -p $(dir $@)
	$(Q){ echo '/* generated from $(UNISTD_64) by bpf/module.mk */'; \
	  sed -n 's/^#define __NR_\([a-z0-9_]*\)[[:space:]]\{1,\}\([0-9]\{1,\}\)$$/\t[\2] = "\1",/p' $<; \
	} > $@.tmp && mv $@.tmp $@

bpf-objects: $(BPF_SKELS)
.PHONY: bpf-objects

ifeq ($(EBPF_ENABLED),1)
INJECTOR_LDLIBS += -lbpf
endif
