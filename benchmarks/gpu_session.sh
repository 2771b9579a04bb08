# Sourced at the start of a run on a GPU machine without a network: installs the wheels
# copied in .whl/ (islpy; the machine's image has the rest) and makes this tree importable as
# `loopweave`.  Usage: `source benchmarks/gpu_session.sh && python3 -m benchmarks.cuda_matmul ...`.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/loopweave
export PYTHONPATH=/tmp/pkg:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch, numpy, llvmlite; print('torch', torch.__version__, 'numpy', numpy.__version__, 'llvmlite', llvmlite.__version__)"
