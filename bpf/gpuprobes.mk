# bpf/gpuprobes.mk: the uprobe collector behind `aiprof profile --method ebpf`
# (bpf/gpuprobes.bpf.c, bpf/gpuprobes.h; user side injector/collect/uprobes.c, pure decoding in
# injector/collect/uprobe_decode.c).
#
#   $(BUILD)/bpf/gpuprobes.bpf.o      clang -target bpf
#   $(BUILD)/bpf/gpuprobes.skel.h     bpftool gen skeleton; embeds the object
#
# The programs read nothing of the kernel's but struct pt_regs, whose x86-64 layout is
# UAPI: they build from the kernel headers (linux-libc-dev), need no vmlinux.h and no BTF
# on the build machine, and use no CO-RE. So this fragment has no vmlinux.h rule and works
# where bpf/module.mk turns its collectors off for want of BTF.
#
# Include it from the top Makefile after injector/module.mk (it appends to
# INJECTOR_LDLIBS). Explicit rules only: they take precedence over the pattern rules of
# bpf/module.mk for these two files.

GPUPROBES_CLANG ?= clang
GPUPROBES_BPFTOOL ?= bpftool
GPUPROBES_STRIP ?= llvm-strip
# <linux/ptrace.h> includes <asm/ptrace.h>, which lives in the multiarch folder on Debian;
# clang -target bpf does not look there by itself
GPUPROBES_ASM_PTRACE := $(firstword $(wildcard /usr/include/x86_64-linux-gnu/asm/ptrace.h \
	/usr/include/asm/ptrace.h))
GPUPROBES_CFLAGS := -O2 -g -target bpf -D__TARGET_ARCH_x86 -Wall -Wextra -Werror \
	-Wno-unused-parameter -Ibpf -idirafter $(patsubst %/asm/ptrace.h,%,$(GPUPROBES_ASM_PTRACE))

$(BUILD)/bpf/gpuprobes.bpf.o: bpf/gpuprobes.bpf.c bpf/gpuprobes.h bpf/gpuprobes.mk
	$(call msg,BPF,$@)
	@mkdir -p $(dir $@)
	$(Q)$(GPUPROBES_CLANG) $(GPUPROBES_CFLAGS) -c $< -o $@.tmp
	$(Q)$(GPUPROBES_STRIP) -g $@.tmp && mv $@.tmp $@

$(BUILD)/bpf/gpuprobes.skel.h: $(BUILD)/bpf/gpuprobes.bpf.o
	$(call msg,SKEL,$@)
	$(Q)$(GPUPROBES_BPFTOOL) gen skeleton $< name gpuprobes_bpf > $@.tmp && mv $@.tmp $@

# the user side includes the skeleton and links libbpf
EXTRA_CFLAGS_injector_collect_uprobes += -I$(BUILD)/bpf
$(BUILD)/injector/collect/uprobes.o: $(BUILD)/bpf/gpuprobes.skel.h
INJECTOR_LDLIBS += -lbpf
