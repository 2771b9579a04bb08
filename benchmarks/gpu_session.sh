# Sourced at the start of a device-tool run (GPU machine, no network): installs the wheels
# carried in .whl/ (islpy; the image has the rest) and makes this tree importable as
# `loopweave`.  Usage: run(command="source benchmarks/gpu_session.sh && python3 -m ...", carry=[".whl"]).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/loopweave
export PYTHONPATH=/tmp/pkg:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch, numpy, llvmlite; print('torch', torch.__version__, 'numpy', numpy.__version__, 'llvmlite', llvmlite.__version__)"
