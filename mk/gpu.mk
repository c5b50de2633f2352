# mk/gpu.mk: the GPU backend build (included by the Makefile).
#
# Toolchains: nvcc (/usr/local/cuda/bin/nvcc or PATH) and hipcc (PATH). `make` builds the library
# with whichever is present; when both are, CUDA is the backend and HIP is only compile-checked.
# Override with GPU=cuda|hip|none.
#
#   make check-hip          compile every kernel file with hipcc for gfx1030 and gfx90a
#   make check-cuda         compile every kernel file with nvcc for sm_80 and sm_90
#   make check-gpu-compile  both (a missing toolchain is reported and skipped)
#   make test-gpu           build and run the GPU tests (they SKIP without a device)

.DEFAULT_GOAL := all
, := ,
rf_empty :=
rf_space := $(rf_empty) $(rf_empty)
NVCC ?= $(firstword $(wildcard /usr/local/cuda/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
HIPCC ?= $(shell command -v hipcc 2>/dev/null)
GPU_CU := $(sort $(wildcard src/backend/gpu/*.cu))
GPU_HDR := $(wildcard src/backend/gpu/*.h src/backend/gpu/*.cuh)

CUDA_ARCHS := 80 90
HIP_ARCHS := gfx1030 gfx90a
NVCC_FLAGS := -std=c++17 -O2 -g -lineinfo $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
	-Xcompiler -Wall,-Wextra -Werror all-warnings -Iinclude -Isrc -DRF_HAVE_CUDA
HIPCC_FLAGS := -x hip $(foreach a,$(HIP_ARCHS),--offload-arch=$(a)) -O2 -g -Wall -Wextra -Iinclude -Isrc \
	-DRF_HAVE_HIP -D__HIP_PLATFORM_AMD__

ifeq ($(GPU),)
ifneq ($(NVCC),)
GPU := cuda
else ifneq ($(HIPCC),)
GPU := hip
else
GPU := none
endif
endif

ifeq ($(GPU),cuda)
CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(NVCC)))
CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/targets/x86_64-linux/lib $(CUDA_HOME)/lib))
GPU_OBJ += $(GPU_CU:%.cu=$(BUILD)/obj/%.cu.o)
CFLAGS_BASE += -DRF_HAVE_CUDA -DRF_CUDA_ARCHS='"$(subst $(rf_space),$(,),$(CUDA_ARCHS:%=sm_%))"' -I$(CUDA_HOME)/include
# cudart linked statically: the binary starts on a machine without the CUDA toolkit or driver,
# and the backend then reports "no CUDA device" (cuBLAS, if the matmul uses it, is dlopen'ed).
GPU_LDLIBS += $(CUDA_LIBDIR)/libcudart_static.a -ldl -lrt -lstdc++
$(BUILD)/obj/%.cu.o: %.cu $(GPU_HDR)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(NVCCFLAGS) -c $< -o $@
else ifeq ($(GPU),hip)
GPU_OBJ += $(GPU_CU:%.cu=$(BUILD)/obj/%.hip.o)
CFLAGS_BASE += -DRF_HAVE_HIP -D__HIP_PLATFORM_AMD__ -DRF_HIP_ARCHS='"$(subst $(rf_space),$(,),$(HIP_ARCHS))"'
GPU_LDLIBS += -lamdhip64 -lstdc++
$(BUILD)/obj/%.hip.o: %.cu $(GPU_HDR)
	@mkdir -p $(dir $@)
	$(HIPCC) $(HIPCC_FLAGS) $(HIPCCFLAGS) -c $< -o $@
endif

.PHONY: check-hip check-cuda check-gpu-compile test-gpu
check-hip:
ifneq ($(HIPCC),)
	@mkdir -p $(BUILD)/check-hip
	@set -e; for f in $(GPU_CU); do o=$(BUILD)/check-hip/$$(basename $$f .cu).o; \
	    echo "hipcc $$f ($(HIP_ARCHS))"; \
	    $(HIPCC) $(HIPCC_FLAGS) -Werror -c $$f -o $$o 2>$(BUILD)/check-hip/err.txt || { grep -v -e rocm_agent_enumerator -e '^Traceback' -e '^  ' -e 'main()' -e 'target_list' $(BUILD)/check-hip/err.txt; exit 1; }; \
	    grep -i -e 'warning' -e 'error' $(BUILD)/check-hip/err.txt || true; done
	@echo "check-hip: $(words $(GPU_CU)) kernel files compile for $(HIP_ARCHS)"
else
	@echo "check-hip: hipcc not found, skipped"
endif

check-cuda:
ifneq ($(NVCC),)
	@mkdir -p $(BUILD)/check-cuda
	@set -e; for f in $(GPU_CU); do echo "nvcc $$f (sm_$(CUDA_ARCHS))"; \
	    $(NVCC) $(NVCC_FLAGS) -c $$f -o $(BUILD)/check-cuda/$$(basename $$f .cu).o; done
	@echo "check-cuda: $(words $(GPU_CU)) kernel files compile for sm_$(CUDA_ARCHS)"
else
	@echo "check-cuda: nvcc not found, skipped"
endif

check-gpu-compile: check-cuda check-hip

GPU_TEST_BIN := $(filter $(BUILD)/tests/test_gpu_%,$(TEST_BIN))
test-gpu: $(GPU_TEST_BIN)
	@sh tests/run.sh $(GPU_TEST_BIN)
