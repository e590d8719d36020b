# tests/doubles/: test doubles of the GPU stack for machines without a GPU. Each is a shared
# library with the real soname and exported names, compiled against the real headers:
#   libcudart.so.13 (fake CUDA runtime)  libcuda.so.1 (fake driver)
#   libnccl.so.2    (fake NCCL)          libibverbs.so.1 (fake verbs)
#   cupti/libcupti.so.13 (fake CUPTI, in a folder of its own: see below)
# plus the unversioned symlinks (libcudart.so -> libcudart.so.13, ...) to link against.
# Only tests link them; nothing in the product does.
DOUBLES_DIR := $(BUILD)/tests/doubles
DOUBLES_PIC := -fPIC
DOUBLES_CUDA := -fPIC -I$(CUDA_HOME)/include

EXTRA_CFLAGS_tests_doubles_gpu_sim := $(DOUBLES_PIC)
EXTRA_CFLAGS_tests_doubles_fake_cudart := $(DOUBLES_CUDA)
EXTRA_CFLAGS_tests_doubles_fake_cudart_ptds := $(DOUBLES_CUDA)
EXTRA_CFLAGS_tests_doubles_fake_cuda := $(DOUBLES_CUDA)
EXTRA_CFLAGS_tests_doubles_fake_cuda_ptds := $(DOUBLES_CUDA)
EXTRA_CFLAGS_tests_doubles_fake_nccl := $(DOUBLES_CUDA)
EXTRA_CFLAGS_tests_doubles_fake_ibverbs := $(DOUBLES_PIC)
EXTRA_CFLAGS_tests_doubles_fake_cupti := $(DOUBLES_CUDA)

# Links $@ from the objects among the prerequisites, exporting what the .map file lists.
# (-ldl, -lpthread, -lrt where used: before glibc 2.34 those functions are not in libc, and
# tests/integration/test_glibc.py builds the doubles against glibc 2.31)
DOUBLES_LINK = $(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,$(notdir $@) -Wl,-z,defs \
	-Wl,--version-script=$(filter %.map,$^) -o $@ $(filter %.o,$^)

$(DOUBLES_DIR)/libcudart.so.13: tests/doubles/libcudart.map $(DOUBLES_DIR)/gpu_sim.o \
		$(DOUBLES_DIR)/fake_cudart.o $(DOUBLES_DIR)/fake_cudart_ptds.o
	$(call msg,LD,$@)
	$(Q)$(DOUBLES_LINK) -lpthread -ldl

$(DOUBLES_DIR)/libcuda.so.1: tests/doubles/libcuda.map $(DOUBLES_DIR)/gpu_sim.o \
		$(DOUBLES_DIR)/fake_cuda.o $(DOUBLES_DIR)/fake_cuda_ptds.o
	$(call msg,LD,$@)
	$(Q)$(DOUBLES_LINK) -lpthread -ldl

$(DOUBLES_DIR)/libnccl.so.2: tests/doubles/libnccl.map $(DOUBLES_DIR)/fake_nccl.o
	$(call msg,LD,$@)
	$(Q)$(DOUBLES_LINK) -lpthread -ldl -lrt

$(DOUBLES_DIR)/libibverbs.so.1: tests/doubles/libibverbs.map $(DOUBLES_DIR)/fake_ibverbs.o
	$(call msg,LD,$@)
	$(Q)$(DOUBLES_LINK) -lpthread

# The fake CUPTI is not next to libcudart.so.13: libaiprof.so looks for libcupti there (and in
# the loader's search path) when the target has not loaded one, and it must only find the
# double in processes that loaded it themselves (trainer --cupti, through its RUNPATH).
DOUBLES_CUPTI_DIR := $(DOUBLES_DIR)/cupti
DOUBLES_CUPTI := $(DOUBLES_CUPTI_DIR)/libcupti.so.13 $(DOUBLES_CUPTI_DIR)/libcupti.so

$(DOUBLES_CUPTI_DIR)/libcupti.so.13: tests/doubles/libcupti.map $(DOUBLES_DIR)/fake_cupti.o
	$(call msg,LD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(DOUBLES_LINK) -Wl,-z,nodelete -ldl -lpthread

$(DOUBLES_CUPTI_DIR)/libcupti.so: $(DOUBLES_CUPTI_DIR)/libcupti.so.13
	$(call msg,LN,$@)
	$(Q)ln -sfn libcupti.so.13 $@

TEST_PROGRAMS += $(DOUBLES_CUPTI)

DOUBLES_SONAMES := libcudart.so.13 libcuda.so.1 libnccl.so.2 libibverbs.so.1
DOUBLES_LIBS := $(addprefix $(DOUBLES_DIR)/,$(DOUBLES_SONAMES))
# libX.so.N -> libX.so
DOUBLES_LINKS := $(foreach s,$(DOUBLES_SONAMES),$(DOUBLES_DIR)/$(firstword $(subst .so, ,$(s))).so)

define doubles_symlink
$(DOUBLES_DIR)/$(firstword $(subst .so, ,$(1))).so: $(DOUBLES_DIR)/$(1)
	$$(call msg,LN,$$@)
	$$(Q)ln -sfn $(1) $$@
endef
$(foreach s,$(DOUBLES_SONAMES),$(eval $(call doubles_symlink,$(s))))

TEST_PROGRAMS += $(DOUBLES_LIBS) $(DOUBLES_LINKS)

# selftest: checks the doubles themselves (run it directly; it takes about a second).
EXTRA_CFLAGS_tests_doubles_selftest := -I$(CUDA_HOME)/include

$(DOUBLES_DIR)/selftest: $(DOUBLES_DIR)/selftest.o $(DOUBLES_LIBS) $(DOUBLES_LINKS) $(DOUBLES_CUPTI)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< -L$(DOUBLES_DIR) -L$(DOUBLES_CUPTI_DIR) \
		-Wl,-rpath,'$$ORIGIN:$$ORIGIN/cupti' -lcudart -lcuda -lnccl -libverbs -lcupti -lpthread -ldl

TEST_PROGRAMS += $(DOUBLES_DIR)/selftest
