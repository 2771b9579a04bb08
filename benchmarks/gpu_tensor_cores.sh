# The tensor-core (precision="tf32", "fp16") and cp.async checks and timings, in one run on a GPU machine:
#   pip download islpy --only-binary=:all: --no-deps -d .whl     # first, where there is a network
#   bash benchmarks/gpu_tensor_cores.sh                           # then on the GPU machine, with .whl/ copied
# Correctness first (the gpu tests of the tf32 kernels and network), then the timings against
# cuBLAS / PyTorch eager with TF32 on, and the fp32 default next to it for reference.
source benchmarks/gpu_session.sh || exit 1
python3 -m pytest -q -x -m gpu tests/backends/cuda/test_tensor_cores.py tests/backends/cuda/test_async_copies.py \
    tests/nn_ops/network/test_cuda_network.py || exit 1
python3 -m benchmarks.cuda_matmul --sizes 4096 1024 --pairs 10 --precision tf32 --register-copies
python3 -m benchmarks.cuda_matmul --sizes 4096 1024 --pairs 10 --register-copies
python3 -m benchmarks.cuda_matmul --sizes 4096 --pairs 10 --precision fp16
python3 -m benchmarks.cuda_network --models resnet18 transformer_encoder --batches 1 32 --repeat 10 --precision tf32
python3 -m benchmarks.cuda_network --models resnet18 --batches 32 --repeat 10 --precision fp16
python3 -m benchmarks.cuda_network --models resnet18 --batches 32 --repeat 10
