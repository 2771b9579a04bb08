"""``simt``: run the generated CUDA C on the CPU, one OS thread per GPU thread, to test it without a GPU.

The kernel source is compiled as C++20 with g++ behind a small shim: ``threadIdx`` and
``blockIdx`` are thread-local, ``__shared__`` arrays are ``static`` (one per block, as
blocks run one after another), ``__syncthreads()`` is a ``std::barrier`` over the
block's threads, and the vector types are plain structs.  Blocks run in turn; the
threads of a block run concurrently, so a missing or misplaced barrier shows up as a
wrong result or a hang (the caller's timeout), as it would on a GPU.  The host
program (intermediate buffers, launch extents from the sizes) is the CUDA module's
own, with host memory instead of device memory.  This checks what the CPU emulation
of a schedule cannot: the CUDA C itself (operators, floor division, vector accesses)
and the per-block, cooperative execution of shared-memory stages.
"""
import ctypes
import hashlib
import shutil
import subprocess

import numpy as np
import pytest

SHIM = r"""
#include <math.h>
#include <cmath>
#include <cstring>
#include <barrier>
#include <algorithm>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
struct lw_dim3 { unsigned int x, y, z; };
static thread_local lw_dim3 threadIdx, blockIdx;
static lw_dim3 blockDim, gridDim;
static std::barrier<>* lw_block_barrier;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
static inline void __syncthreads() { lw_block_barrier->arrive_and_wait(); }
struct float2 { float x, y; };  struct float4 { float x, y, z, w; };
struct int2 { int x, y; };  struct int4 { int x, y, z, w; };
struct double2 { double x, y; };  struct longlong2 { long long x, y; };
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static inline int2 make_int2(int a, int b) { return {a, b}; }
static inline int4 make_int4(int a, int b, int c, int d) { return {a, b, c, d}; }
static inline double2 make_double2(double a, double b) { return {a, b}; }
static inline longlong2 make_longlong2(long long a, long long b) { return {a, b}; }
static inline float __int_as_float(unsigned int v) { float f; std::memcpy(&f, &v, 4); return f; }
static inline double __longlong_as_double(unsigned long long v) { double d; std::memcpy(&d, &v, 8); return d; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
// a warp: 32 consecutive threads of the block, with a barrier of its own and a place to
// swap registers, for the warp-collective mma.sync (each lane holds a fragment)
struct lw_warp { std::barrier<>* bar; float a[32][8], b[32][4]; };
static thread_local lw_warp* lw_my_warp;
static thread_local unsigned lw_lane;
#define LW_MMA_EMULATED
#define LW_ASYNC_EMULATED   // cp.async copies at once: the wait and the barriers after it change nothing
static inline void lw_cp_async16(void* d, const void* s) { std::memcpy(d, s, 16); }
static inline void lw_cp_async8(void* d, const void* s) { std::memcpy(d, s, 8); }
static inline void lw_cp_async4(void* d, const void* s) { std::memcpy(d, s, 4); }
static inline void lw_cp_async_commit() {}
template <int N> static inline void lw_cp_async_wait() {}
static inline float lw_round_tf32(float x) {   // cvt.rna.tf32.f32: 10 mantissa bits, ties away from zero
  unsigned u; std::memcpy(&u, &x, 4); u = (u + 0x1000u) & 0xffffe000u; std::memcpy(&x, &u, 4); return x;
}
// the hardware reads a .tf32 operand's top 19 bits: what reaches it unrounded is truncated
static inline float lw_tf32(float x) {
  unsigned u; std::memcpy(&u, &x, 4); u &= 0xffffe000u; std::memcpy(&x, &u, 4); return x;
}
// mma.sync as PTX lays out its fragments: each lane puts its A and B elements (rounded as the
// hardware reads them) in the warp's slots, the warp meets, each lane sums its four D elements
// (lane 4g + t: D[g(+8)][2t(+1)]), the warp meets again before the slots are reused.
//   m16n8k8 tf32: a0..a3 = A[g(+8)][t(+4)], b0, b1 = B[t(+4)][g]
//   m16n8k16 f16: a0..a7 = A[g(+8)][2t(+1)(+8)] (pairs by k), b0..b3 = B[2t(+1)(+8)][g]
static void lw_mma_emulated(float* d[4], const float* a, int na, const float* b, int nb, unsigned depth) {
  lw_warp& w = *lw_my_warp;
  unsigned l = lw_lane;
  for (int i = 0; i < na; ++i) w.a[l][i] = a[i];
  for (int i = 0; i < nb; ++i) w.b[l][i] = b[i];
  w.bar->arrive_and_wait();
  unsigned g = l >> 2, t = l & 3;
  for (unsigned q = 0; q < 4; ++q) {
    unsigned row = g + 8 * (q >> 1), col = 2 * t + (q & 1);
    float sum = *d[q];
    for (unsigned k = 0; k < depth; ++k) {
      unsigned hi = row >= 8;
      float x = depth == 8 ? w.a[(row % 8) * 4 + k % 4][hi + 2 * (k >= 4)]
                           : w.a[(row % 8) * 4 + k % 8 / 2][2 * (hi + 2 * (k >= 8)) + k % 2];
      float y = depth == 8 ? w.b[col * 4 + k % 4][k >= 4] : w.b[col * 4 + k % 8 / 2][2 * (k >= 8) + k % 2];
      sum += x * y;
    }
    *d[q] = sum;
  }
  w.bar->arrive_and_wait();
}
static void lw_mma_m16n8k8_tf32(float& d0, float& d1, float& d2, float& d3, float a0, float a1, float a2,
                                float a3, float b0, float b1) {
  float* d[4] = {&d0, &d1, &d2, &d3};
  float a[4] = {lw_tf32(a0), lw_tf32(a1), lw_tf32(a2), lw_tf32(a3)}, b[2] = {lw_tf32(b0), lw_tf32(b1)};
  lw_mma_emulated(d, a, 4, b, 2, 8);
}
static inline float lw_round_f16(float x) { return (float)(_Float16)x; }   // cvt.rn.f16.f32
static void lw_mma_m16n8k16_f16(float& d0, float& d1, float& d2, float& d3, float a0, float a1, float a2,
                                float a3, float a4, float a5, float a6, float a7, float b0, float b1, float b2,
                                float b3) {   // the packing (cvt.rn.f16x2) rounds what reaches it unrounded
  float* d[4] = {&d0, &d1, &d2, &d3};
  float a[8] = {lw_round_f16(a0), lw_round_f16(a1), lw_round_f16(a2), lw_round_f16(a3), lw_round_f16(a4),
                lw_round_f16(a5), lw_round_f16(a6), lw_round_f16(a7)};
  float b[4] = {lw_round_f16(b0), lw_round_f16(b1), lw_round_f16(b2), lw_round_f16(b3)};
  lw_mma_emulated(d, a, 8, b, 4, 16);
}
static void lw_run_grid(lw_dim3 grid, lw_dim3 block, const std::function<void()>& kernel) {
  gridDim = grid; blockDim = block;
  unsigned n = block.x * block.y * block.z;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::barrier<> bar(n);
        lw_block_barrier = &bar;
        std::vector<lw_warp> warps((n + 31) / 32);
        std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
        for (unsigned w = 0; w < warps.size(); ++w) {
          warp_bars.emplace_back(new std::barrier<>(std::min(32u, n - 32 * w)));
          warps[w].bar = warp_bars.back().get();
        }
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < n; ++t)
          threads.emplace_back([&, t, bx, by, bz] {
            blockIdx = {bx, by, bz};
            threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            lw_my_warp = &warps[t / 32];
            lw_lane = t % 32;
            kernel();
          });
        for (auto& th : threads) th.join();
      }
}
"""


def _launcher(launch) -> str:
    from loopweave.backends.cuda.codegen import C_TYPE, MEMORY_TYPE
    args = [f"({MEMORY_TYPE[b.dtype]}*)(*(unsigned long long*)args[{k}])" for k, b in enumerate(launch.params)]
    args += [f"*({C_TYPE[v.dtype]}*)args[{len(launch.params) + k}]" for k, v in enumerate(launch.scalars)]
    return (f'extern "C" void lw_launch_{launch.name}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, '
            f"unsigned by, unsigned bz, void** args) {{\n"
            f"  lw_run_grid({{gx, gy, gz}}, {{bx, by, bz}}, [&] {{ {launch.name}({', '.join(args)}); }});\n}}\n")


class _HostMemoryDriver:
    """The driver calls the CUDA module's host program makes, on host memory."""

    def __init__(self):
        self.memory = {}

    def alloc(self, nbytes):
        buf = np.empty(max(1, nbytes) + 64, np.uint8)
        ptr = (buf.ctypes.data + 63) // 64 * 64
        self.memory[ptr] = buf
        return ptr

    def free(self, ptr):
        del self.memory[ptr]

    def synchronize(self):
        pass

    def launch(self, fn, grid, block, args):
        arr = (ctypes.c_void_p * max(1, len(args)))(*[ctypes.addressof(a) for a in args])
        fn(*[ctypes.c_uint(int(v)) for v in list(grid) + list(block)], arr)


@pytest.fixture(scope="session")
def simt(tmp_path_factory):
    """``simt(module)``: a callable running CUDA module ``module``'s kernels on the CPU with numpy arrays."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ to run generated CUDA C on the CPU")
    folder = tmp_path_factory.mktemp("simt")

    def load(module):
        launches = [info.launch for info in module._kernels.values()]
        source = SHIM + module.get_source("cuda") + "\n" + "".join(_launcher(k) for k in launches)
        key = hashlib.sha256(source.encode()).hexdigest()[:16]
        lib_path = folder / f"k{key}.so"
        if not lib_path.exists():
            src = folder / f"k{key}.cpp"
            src.write_text(source)
            proc = subprocess.run([cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-o",
                                   str(lib_path), str(src)], capture_output=True, text=True)
            assert proc.returncode == 0, f"the generated CUDA C does not compile as C++:\n{proc.stderr[:4000]}"
        lib = ctypes.CDLL(str(lib_path))
        functions = {k.name: getattr(lib, f"lw_launch_{k.name}") for k in launches}

        def call(*arrays):
            sizes = module._bind(arrays)
            pointers = [a.ctypes.data for a in arrays]
            module._check_alignment(pointers)
            module._functions = functions
            module._run(_HostMemoryDriver(), pointers, sizes)
        return call
    return load
