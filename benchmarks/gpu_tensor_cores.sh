# The tensor-core (precision="tf32") and cp.async checks a GPU session still owes (issue 19), in one run:
#   pip download islpy --only-binary=:all: --no-deps -d .whl     # here first: that machine has no network
#   run(command="bash benchmarks/gpu_tensor_cores.sh", carry=[".whl"], timeout_s=540)
# Correctness first (the gpu tests of the tf32 kernels and network), then the timings against
# cuBLAS / PyTorch eager with TF32 on, and the fp32 default next to it for reference.
source benchmarks/gpu_session.sh || exit 1
python3 -m pytest -q -x -m gpu tests/backends/cuda/test_tensor_cores.py tests/backends/cuda/test_async_copies.py \
    tests/nn_ops/network/test_cuda_network.py || exit 1
python3 -m benchmarks.cuda_matmul --sizes 4096 1024 --pairs 10 --precision tf32 --async-copies
python3 -m benchmarks.cuda_matmul --sizes 4096 1024 --pairs 10 --async-copies
python3 -m benchmarks.cuda_matmul --sizes 4096 --pairs 10 --precision fp16
python3 -m benchmarks.cuda_network --models resnet18 transformer_encoder --batches 1 32 --repeat 10 --precision tf32
python3 -m benchmarks.cuda_network --models resnet18 --batches 32 --repeat 10 --precision fp16
python3 -m benchmarks.cuda_network --models resnet18 --batches 32 --repeat 10
