# aiprof — top-level build. Non-recursive: every folder contributes a module.mk.
#
#   make            build everything into $(BUILD) (default: build/)
#   make test       build, then run unit tests (plain and ASan/UBSan) and integration tests
#   make demo       profile the bundled demo workloads locally and print where the report is
#   make fuzz       build the libFuzzer targets (clang) and run each briefly
#   make bench      run the benchmarks (prints ratios measured side by side)
#   make faults     attach 200 times at random instants of real PyTorch start-ups and 40
#                   launches whose ranks start in the window (make test runs a few of each)
#   make V=1        show full commands
#   make SAN=1      build with AddressSanitizer + UndefinedBehaviorSanitizer into build-san/

SAN ?= 0
ifeq ($(SAN),1)
BUILD ?= build-san
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all
else
BUILD ?= build
SANFLAGS :=
endif

CC ?= gcc
ifeq ($(origin CC),default)
CC := gcc
endif
CUDA_HOME ?= /usr/local/cuda

WARNINGS := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wno-unused-parameter \
	-Wno-format-nonliteral -Wno-format-truncation
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=gnu11 $(CFLAGS) $(WARNINGS) -fno-omit-frame-pointer -D_GNU_SOURCE \
	-I. -Icommon -Iinjector $(SANFLAGS) -MMD -MP
ALL_LDFLAGS := $(LDFLAGS) $(SANFLAGS)

ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-7s %s\n' $(1) $(2)
endif

# Each module.mk appends to these.
PROGRAMS :=
LIBRARIES :=
TEST_PROGRAMS :=
OBJS_ALL :=

all: everything

include common/module.mk
include injector/module.mk
include controller/module.mk
include bpf/gpuprobes.mk
include bpf/module.mk
include tests/module.mk
include tests/workloads/ebpf_workloads.mk

everything: $(PROGRAMS) $(LIBRARIES) $(TEST_PROGRAMS)

$(BUILD)/%.o: %.c
	$(call msg,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) $(EXTRA_CFLAGS_$(subst /,_,$*)) -c $< -o $@

# Objects that go into shared libraries are built position-independent.
$(BUILD)/pic/%.o: %.c
	$(call msg,CC,$<)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(ALL_CFLAGS) -fPIC -fvisibility=hidden $(EXTRA_CFLAGS_$(subst /,_,$*)) -c $< -o $@

test: everything
	$(Q)BUILD=$(BUILD) bash tests/run.sh

demo: everything
	$(Q)BUILD=$(BUILD) bash tests/workloads/demo.sh

bench: everything
	$(Q)BUILD=$(BUILD) bash tests/bench/run.sh

fuzz:
	$(Q)bash tests/fuzz/run.sh

faults: everything
	$(Q)AIPROF_FAULT_RUNS=200 AIPROF_FAULT_LAUNCHES=40 BUILD=$(BUILD) /usr/bin/python3 -m pytest \
		-q -p no:cacheprovider -rfEs tests/integration/test_attach_anytime.py

clean:
	rm -rf build build-san build-fuzz

# make images: the controller and injector images, tagged $(IMAGE_REPO)/aiprof-{controller,
# injector}:$(IMAGE_TAG), the names the Helm chart uses. Without ENGINE: no container engine or
# registry needed (scripts/build-images.sh: a debootstrap'd Debian 12 root with the Dockerfiles'
# packages, assembled with umoci; build/images/ gets an OCI layout and docker-archive tarballs
# for `docker load`, `podman load` or `ctr images import`). ENGINE=docker or ENGINE=podman
# builds controller/Dockerfile and injector/Dockerfile with that engine instead.
IMAGE_REPO ?= aiprof
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *"\(.*\)"/\1/p' charts/aiprof/Chart.yaml)
ifneq ($(ENGINE),)
images:
	$(Q)$(ENGINE) info >/dev/null 2>&1 || { echo "make images: ENGINE=$(ENGINE), but '$(ENGINE) info' fails (not installed, or its daemon/service is not running); without ENGINE, make images needs no engine" >&2; exit 2; }
	$(Q)$(ENGINE) build -f controller/Dockerfile -t $(IMAGE_REPO)/aiprof-controller:$(IMAGE_TAG) .
	$(Q)$(ENGINE) build -f injector/Dockerfile -t $(IMAGE_REPO)/aiprof-injector:$(IMAGE_TAG) .
else
images: $(BUILD)/aiprof $(BUILD)/libaiprof.so $(BUILD)/aiprof-controller
	$(Q)BUILD=$(BUILD) IMAGE_REPO=$(IMAGE_REPO) IMAGE_TAG=$(IMAGE_TAG) bash scripts/build-images.sh
endif

.PHONY: all everything test demo bench fuzz faults clean images
.DELETE_ON_ERROR:
.SECONDARY:

# (not into the image roots that make images and tests/integration/test_glibc.py keep there)
-include $(shell find $(BUILD) \( -path $(BUILD)/images -o -path $(BUILD)/glibc231 \) -prune -o \
	-name '*.d' -type f -print 2>/dev/null)
