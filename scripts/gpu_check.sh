#!/usr/bin/env bash
# The GPU check for normlab's Triton kernels, in one call on a CUDA machine:
#   1. the kernel, module and bad-input tests on CUDA tensors with the real
#      Triton compiler (fp32, fp16 and bf16 are inside the tests);
#   2. achieved bandwidth, forward and backward, at d = 4096 and 16384,
#      against a same-size copy (scripts/gpu_bandwidth.py).
# Usage: scripts/gpu_check.sh [output dir]   (default build/gpu-check; $OUT if set)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-build/gpu-check}}"
mkdir -p "$out"
export TRITON_INTERPRET=0          # conftest.py only sets it when absent
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
python -c "import torch, triton; assert torch.cuda.is_available(); print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$out/versions.txt"
status=0  # a test failure must not stop the bandwidth run: both results are wanted from one call
python -m pytest -q -p no:cacheprovider tests/test_triton_kernels.py tests/test_modules.py tests/test_bad_input.py \
    --junitxml="$out/kernel-tests.xml" 2>&1 | tee "$out/kernel-tests.txt" || status=$?
python scripts/gpu_bandwidth.py --out "$out/gpu_bandwidth.json" 2>&1 | tee "$out/gpu_bandwidth.txt" || status=$?
exit $status
