// Generated CUDA C, compiled as C++20 and run on the CPU (see simt.py).
//
// Every GPU thread is a fiber (ucontext) with a stack of its own; one OS thread runs them, a
// scheduler switching at barriers.  The emulation is made stricter than a GPU on purpose, so
// that what a GPU only does sometimes it does every time:
// - after a barrier, the threads it releases run in a shuffled order (seeded: runs repeat), so a
//   thread reads what another wrote before the barrier only if a barrier lies between them;
// - two blocks run at once, their threads mixed, the blocks in a shuffled order;
// - each block's shared arrays start full of NaN (floats) or 0xA5 bytes (others);
// - cp.async copies queue per thread and land only at the cp.async.wait_group that covers them
//   (wait_group N: all but the newest N committed groups), so a barrier before the wait does
//   not publish them;
// - a barrier that not all threads of a block (a warp, for mma.sync) reach is reported, not hung on.
#include <math.h>
#include <ucontext.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>
struct lw_dim3 { unsigned int x, y, z; };
static lw_dim3 threadIdx, blockIdx, blockDim, gridDim;   // the running thread's: set at each switch
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))
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
// one fiber runs at a time: plain read-modify-writes are atomic here
static inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long expected,
                                           unsigned long long desired) {
  unsigned long long old = *p; if (old == expected) *p = desired; return old;
}

// ------------------------------------------------------------------ threads, warps, blocks
struct lw_fiber;
struct lw_barrier { unsigned expected = 0, arrived = 0; std::vector<lw_fiber*> waiting; };
struct lw_warp { lw_barrier bar; float a[32][8], b[32][4]; };   // a warp's slots to swap fragments
struct lw_block {
  lw_dim3 idx;
  lw_barrier bar;
  std::vector<lw_warp> warps;
  std::map<int, std::unique_ptr<unsigned char[]>> shared;        // by declaration site
};
struct lw_copy { void* dst; const void* src; unsigned bytes; };
struct lw_fiber {
  ucontext_t ctx;
  lw_dim3 tid;
  lw_block* block;
  lw_warp* warp;
  unsigned lane;
  bool done = false;
  std::vector<lw_copy> open;                  // cp.async issued since the last commit
  std::deque<std::vector<lw_copy>> groups;    // committed, oldest first
  std::unique_ptr<char[]> stack;
};
static const unsigned LW_STACK = 256 * 1024;
static const unsigned LW_BLOCKS_AT_ONCE = 2;
static ucontext_t lw_scheduler;
static lw_fiber* lw_current;
static std::deque<lw_fiber*> lw_ready;
static std::mt19937 lw_rng;
static const std::function<void()>* lw_kernel;
static char lw_error[256];

static void lw_yield() { swapcontext(&lw_current->ctx, &lw_scheduler); }

static void lw_arrive(lw_barrier& b) {
  b.waiting.push_back(lw_current);
  if (++b.arrived == b.expected) {
    std::shuffle(b.waiting.begin(), b.waiting.end(), lw_rng);
    for (lw_fiber* f : b.waiting) lw_ready.push_back(f);
    b.waiting.clear();
    b.arrived = 0;
  }
  lw_yield();
}
static inline void __syncthreads() { lw_arrive(lw_current->block->bar); }

// a shared array: one per block and declaration site, poisoned when the block first reaches it
template <typename T, unsigned N> static T (&lw_shared(int site))[N] {
  auto& slot = lw_current->block->shared[site];
  if (!slot) {
    slot.reset(new unsigned char[sizeof(T) * N + 64]);
    std::memset(slot.get(), std::is_floating_point<T>::value ? 0xFF : 0xA5, sizeof(T) * N + 64);
  }
  void* p = slot.get() + (64 - reinterpret_cast<unsigned long long>(slot.get()) % 64) % 64;
  return *reinterpret_cast<T(*)[N]>(p);
}

// ------------------------------------------------------------------ cp.async
#define LW_ASYNC_EMULATED
static inline void lw_cp_async(void* d, const void* s, unsigned n) { lw_current->open.push_back({d, s, n}); }
static inline void lw_cp_async16(void* d, const void* s) { lw_cp_async(d, s, 16); }
static inline void lw_cp_async8(void* d, const void* s) { lw_cp_async(d, s, 8); }
static inline void lw_cp_async4(void* d, const void* s) { lw_cp_async(d, s, 4); }
static inline void lw_cp_async_commit() {
  lw_current->groups.push_back(std::move(lw_current->open));
  lw_current->open.clear();
}
template <int N> static inline void lw_cp_async_wait() {
  auto& groups = lw_current->groups;
  while (groups.size() > (size_t)N) {
    for (const lw_copy& c : groups.front()) std::memcpy(c.dst, c.src, c.bytes);
    groups.pop_front();
  }
}

// ------------------------------------------------------------------ mma.sync
#define LW_MMA_EMULATED
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
  lw_warp& w = *lw_current->warp;
  unsigned l = lw_current->lane;
  for (int i = 0; i < na; ++i) w.a[l][i] = a[i];
  for (int i = 0; i < nb; ++i) w.b[l][i] = b[i];
  lw_arrive(w.bar);
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
  lw_arrive(w.bar);
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

// ------------------------------------------------------------------ the grid
static void lw_fiber_main() {
  (*lw_kernel)();
  lw_current->done = true;
  lw_yield();   // never resumed
}

// Runs the grid; 0, or 1 with the reason in lw_error (lw_launch_* return it).
static int lw_run_grid(lw_dim3 grid, lw_dim3 block, const std::function<void()>& kernel) {
  gridDim = grid; blockDim = block; lw_kernel = &kernel;
  lw_rng.seed(20240601u);
  unsigned n = block.x * block.y * block.z;
  std::vector<lw_dim3> order;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) order.push_back({bx, by, bz});
  std::shuffle(order.begin(), order.end(), lw_rng);
  for (size_t first = 0; first < order.size(); first += LW_BLOCKS_AT_ONCE) {
    std::vector<std::unique_ptr<lw_block>> blocks;
    std::vector<std::unique_ptr<lw_fiber>> fibers;
    for (size_t b = first; b < std::min(order.size(), first + LW_BLOCKS_AT_ONCE); ++b) {
      blocks.emplace_back(new lw_block);
      lw_block& blk = *blocks.back();
      blk.idx = order[b];
      blk.bar.expected = n;
      blk.warps.resize((n + 31) / 32);
      for (unsigned w = 0; w < blk.warps.size(); ++w) blk.warps[w].bar.expected = std::min(32u, n - 32 * w);
      for (unsigned t = 0; t < n; ++t) {
        fibers.emplace_back(new lw_fiber);
        lw_fiber& f = *fibers.back();
        f.tid = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
        f.block = &blk;
        f.warp = &blk.warps[t / 32];
        f.lane = t % 32;
        f.stack.reset(new char[LW_STACK]);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.get();
        f.ctx.uc_stack.ss_size = LW_STACK;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, lw_fiber_main, 0);
        lw_ready.push_back(&f);
      }
    }
    std::shuffle(lw_ready.begin(), lw_ready.end(), lw_rng);
    while (!lw_ready.empty()) {
      lw_current = lw_ready.front();
      lw_ready.pop_front();
      threadIdx = lw_current->tid;
      blockIdx = lw_current->block->idx;
      swapcontext(&lw_scheduler, &lw_current->ctx);
    }
    for (auto& f : fibers)
      if (!f->done) {
        std::snprintf(lw_error, sizeof lw_error, "thread (%u, %u, %u) of block (%u, %u, %u) waits at a barrier "
                      "that not all threads of its block (or warp) reach", f->tid.x, f->tid.y, f->tid.z,
                      f->block->idx.x, f->block->idx.y, f->block->idx.z);
        return 1;
      }
  }
  return 0;
}
extern "C" const char* lw_emulation_error() { return lw_error; }
