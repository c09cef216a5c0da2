#!/usr/bin/env bash
# Set up autofunc on a bare GPU machine with no network (the device tool's machines): the
# image's python3 holds torch and triton; test-only wheels missing there travel in .whl/.
# Run it from the repository root: `bash scripts/gpu_setup.sh` (the GPU campaign's first step,
# tools/gpu_campaign.py); it prints the device and the versions, also to $OUT/env.txt.
set -o pipefail
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile .whl/*.whl || exit 1
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee "${OUT:-.}/env.txt"
