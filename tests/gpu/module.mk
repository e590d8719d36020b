# tests/gpu/: the check on a real GPU (tests/gpu/README.md). Built by `make` wherever
# nvcc is (no GPU needed to build); without nvcc these targets say so and are left out.
#
#   $(BUILD)/gpu/gpu_train            the CUDA + NCCL workload (sm_80, sm_90, compute_90 PTX)
#   $(BUILD)/gpu/libcupti_holder.so   a second CUPTI tool, loaded by CUDA_INJECTION64_PATH
#   make gpu-bundle                   adds $(BUILD)/gpu/hostlib: the shared libraries aiprof
#                                     needs that a GPU machine may lack, to carry there
NVCC ?= $(CUDA_HOME)/bin/nvcc
GPU_DIR := $(BUILD)/gpu
GPU_ARCHS := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
# NCCL ships outside lib64 in some CUDA trees (/usr/local/cuda/lib)
GPU_LIBDIRS := -L$(CUDA_HOME)/lib64 $(addprefix -L,$(wildcard $(CUDA_HOME)/lib))

ifneq ($(wildcard $(NVCC)),)
$(GPU_DIR)/gpu_train: tests/gpu/gpu_train.cu tests/gpu/module.mk
	$(call msg,NVCC,$@)
	@mkdir -p $(dir $@)
	$(Q)$(NVCC) -O2 $(GPU_ARCHS) -Xcompiler -Wall,-Wextra,-Werror -cudart shared \
		-I$(CUDA_HOME)/include $(GPU_LIBDIRS) -o $@ $< -lnccl -ldl

$(GPU_DIR)/libcupti_holder.so: tests/gpu/cupti_holder.c tests/gpu/module.mk
	$(call msg,CCLD,$@)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) -fPIC -shared -I$(CUDA_HOME)/include -o $@ $< \
		$(GPU_LIBDIRS) -lcupti

ifneq ($(SAN),1)
TEST_PROGRAMS += $(GPU_DIR)/gpu_train $(GPU_DIR)/libcupti_holder.so
endif
else
$(info tests/gpu: $(NVCC) not found; the GPU check's workload is not built)
endif

# Every shared library aiprof links, but the C library's own (the GPU machine has those).
gpu-bundle: $(BUILD)/aiprof $(BUILD)/libaiprof.so $(GPU_DIR)/gpu_train $(GPU_DIR)/libcupti_holder.so
	$(Q)rm -rf $(GPU_DIR)/hostlib && mkdir -p $(GPU_DIR)/hostlib && \
	ldd $(BUILD)/aiprof | awk '$$2 == "=>" && $$3 ~ /^\// { print $$3 }' | \
	grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so' | \
	xargs -r cp -L -t $(GPU_DIR)/hostlib && \
	du -sh $(GPU_DIR) $(BUILD)/aiprof $(BUILD)/libaiprof.so

.PHONY: gpu-bundle
