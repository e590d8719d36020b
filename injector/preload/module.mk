# injector/preload/: libaiprof.so, the interception library loaded into the target.
# Compiled against the CUDA / NCCL / CUPTI / ibverbs headers for the real types; links
# nothing but libc (-ldl -lpthread): every CUDA-side function is found at run time. Loads
# into processes of glibc 2.17 and later (glibc_compat.h).
PRELOAD_SRCS := $(wildcard injector/preload/*.c)
PRELOAD_OBJS := $(patsubst %.c,$(BUILD)/pic/%.o,$(PRELOAD_SRCS))
PRELOAD_MAP := injector/preload/libaiprof.map
PRELOAD_BUILD_ID := $(BUILD)/pic/injector/preload/build_id
PRELOAD_INCLUDES := -I$(CUDA_HOME)/include -include injector/preload/glibc_compat.h

$(foreach s,$(PRELOAD_SRCS),$(eval EXTRA_CFLAGS_$(subst /,_,$(basename $(s))) += $(PRELOAD_INCLUDES)))

# aiprof_preload_build = first 64 bits of the SHA-256 of the objects linked in.
$(PRELOAD_OBJS): injector/preload/glibc_compat.h

# libdl.so.2 and libpthread.so.0 are NOT named: glibc 2.34 and later keep them only as empty
# stubs that minimal images (an exact ldd closure) leave out, and loading would fail there.
# Before 2.34 dlopen and pthread_create are found in them when the process has loaded them
# (glibc_compat.h says what is left).
$(BUILD)/libaiprof.so: $(PRELOAD_OBJS) $(PRELOAD_MAP)
	$(call msg,LD,$@)
	$(Q)id=$$(cat $(PRELOAD_OBJS) | sha256sum | cut -c1-16) && \
	printf '#include <stdint.h>\n__attribute__((visibility("default"))) const uint64_t aiprof_preload_build = UINT64_C(0x%s);\n' "$$id" > $(PRELOAD_BUILD_ID).c && \
	$(CC) $(ALL_CFLAGS) -fPIC -fvisibility=hidden -c $(PRELOAD_BUILD_ID).c -o $(PRELOAD_BUILD_ID).o && \
	$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,libaiprof.so -Wl,-z,defs -Wl,-z,now \
		-Wl,-z,nodelete -Wl,--version-script=$(PRELOAD_MAP) \
		-o $@ $(PRELOAD_OBJS) $(PRELOAD_BUILD_ID).o -ldl -lpthread

LIBRARIES += $(BUILD)/libaiprof.so
