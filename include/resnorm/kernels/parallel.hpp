// resnorm/kernels/parallel.hpp — splitting rows across OpenMP threads, and the scratch space
// the backward kernels reduce dγ/dβ through.
//
// Built with OpenMP (CMake option RESNORM_OPENMP, which links OpenMP::OpenMP_CXX), the kernels
// split rows across omp_get_max_threads() threads; without it everything runs serially and
// computes the same bits. Inputs under parallel_min_elements run serially either way: starting a
// thread team costs microseconds, a 1 x 4096 row takes well under one.
//
// Determinism: a backward splits its rows into reduction_blocks(rows) blocks fixed by the row
// count alone. Each block sums dγ, dβ over its rows in row order into its own slot, and the
// slots are added in block order at the end. Threads take whole blocks, so the result is the
// same bits for any thread count (1 up to max_reduction_blocks threads do useful work).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "resnorm/kernels/storage.hpp"
#include "resnorm/matrix.hpp"

namespace resnorm::kernels {

// 64 Ki elements (256 KiB of float): below this a kernel runs in tens of microseconds or less
// and a thread team's start-up and barrier would be a visible share of it.
inline constexpr index parallel_min_elements = index(1) << 16;

// Upper bound on the threads a backward can use; each block costs 2·dim floats of scratch.
inline constexpr index max_reduction_blocks = 8;

// Rows per block at least 16, so a block's slot is amortised over some rows.
inline index reduction_blocks(index rows) {
  return std::clamp<index>(rows / 16, 1, max_reduction_blocks);
}

inline int thread_count() {
#if defined(_OPENMP)
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

// body(b) for b in [0, tasks), on up to thread_count() threads when elements (the work) is
// large enough; each thread runs a contiguous range of b.
template <class Body>
void parallel_tasks(index tasks, index elements, const Body& body) {
#if defined(_OPENMP)
  if (tasks > 1 && elements >= parallel_min_elements && thread_count() > 1) {
#pragma omp parallel
    {
      const index threads = omp_get_num_threads(), t = omp_get_thread_num();
      const index begin = tasks * t / threads, end = tasks * (t + 1) / threads;
      for (index b = begin; b < end; ++b) body(b);
    }
    return;
  }
#else
  (void)elements;
#endif
  for (index b = 0; b < tasks; ++b) body(b);
}

// body(begin, end) over rows [0, rows), one contiguous range per thread.
template <class Body>
void parallel_rows(index rows, index dim, const Body& body) {
  const index threads =
      rows * dim >= parallel_min_elements ? std::min<index>(thread_count(), rows) : 1;
  parallel_tasks(threads, rows * dim,
                 [&](index t) { body(rows * t / threads, rows * (t + 1) / threads); });
}

// The bytes an L1 data cache's sets span (64 sets of 64-byte lines on x86): addresses this far
// apart share a set.
inline constexpr std::uintptr_t l1_set_span = 4096;

// The cache line, as an offset modulo l1_set_span, farthest from the first rows of the matrices
// a backward walks (x, dy, dx; null ones skipped): the middle of the widest gap between their
// offsets, rounded down to a line. The backward's accumulators start there. Where rows are a
// multiple of 4 KiB long, element j of every row of x, dy and dx keeps to one L1 set, and
// accumulators in that set too overfill its 8 ways: 1024 x 1024 float LayerNorm backward with
// x, dy and dx at offset 0 ran 1.26x faster with the accumulators half a page away than at offset
// 0; placed here rather than at the heap's offset, 1.09x (1024 x 1024) and 1.12x (512 x 2048)
// faster, RMSNorm 1024 x 1024 1.03x (AMD Zen 4, bench/ab with RESNORM_AB_STAGGER=0, geometric
// mean of both placements). With x, dy and dx 1 KiB apart, and on rows of other lengths, within
// the noise (0.99-1.05x).
inline std::uintptr_t quietest_line_in_page(std::initializer_list<const void*> rows) {
  constexpr std::uintptr_t page = l1_set_span;
  std::array<std::uintptr_t, 8> offsets{};
  std::size_t n = 0;
  // Sorted as they come in: a handful at most (std::sort here drew GCC 12's -Warray-bounds at
  // -O3, a false alarm on its unrolled insertion sort over the short array).
  for (const void* p : rows) {
    if (p == nullptr || n == offsets.size()) continue;
    const std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(p) % page;
    std::size_t i = n++;
    for (; i > 0 && offsets[i - 1] > offset; --i) offsets[i] = offsets[i - 1];
    offsets[i] = offset;
  }
  if (n == 0) return 0;
  std::uintptr_t widest = 0, middle = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uintptr_t next = i + 1 < n ? offsets[i + 1] : offsets[0] + page;
    if (next - offsets[i] > widest) {
      widest = next - offsets[i];
      middle = offsets[i] + widest / 2;
    }
  }
  return middle % page / cache_line_bytes * cache_line_bytes;
}

// Scratch the backward kernels reduce through: reduction_blocks(rows) slots of 2·dim
// accumulators. Keep one and pass it to the _into entry points:
// after the first call of a given size, no call allocates.
class kernel_workspace {
 public:
  // Makes room for a backward of rows x dim (float and double accumulators both).
  void reserve(index rows, index dim) {
    const std::size_t n = slot_stride(dim) * 2 * static_cast<std::size_t>(reduction_blocks(rows));
    // Room to start the slots anywhere within a page (see slot).
    if (f32_.size() < n + page / sizeof(float)) f32_.resize(n + page / sizeof(float));
    if (f64_.size() < n + page / sizeof(double)) f64_.resize(n + page / sizeof(double));
  }

  // Slot b (0 ≤ b < blocks) of accumulators, 2·dim long: [0, dim) dγ, [stride, stride+dim) dβ.
  // Slot 0 starts on a cache line, so that every pack of the accumulators the backward loads and
  // stores once per row sits inside one line: against slots wherever malloc put them, float
  // backwards of 1024 x 1024 ran 1.11x (LayerNorm) and 1.06x (RMSNorm) faster, 8192 x 64 1.01x
  // (AMD Zen 5; bench/ab, both placements). That line is the one keep_clear_of chose.
  template <class C>
  C* slot(index b, index dim) {
    C* const data = storage<C>().data();
    const std::uintptr_t skip =
        (page_offset_ + page - reinterpret_cast<std::uintptr_t>(data) % page) % page;
    C* const first = data + skip / sizeof(C);  // data is aligned to C, and so is skip
    return first + static_cast<std::size_t>(b) * 2 * slot_stride(dim);
  }

  // Moves the slots, from the next call of slot on, to the cache line quietest_line_in_page
  // finds among the first rows of the matrices a backward is about to walk.
  void keep_clear_of(std::initializer_list<const void*> first_rows) {
    page_offset_ = quietest_line_in_page(first_rows);
  }

  // Distance between the dγ and dβ halves: dim rounded up to a cache line, plus one line, so
  // the slots of two threads never share a line (false sharing slows narrow rows several-fold).
  static std::size_t slot_stride(index dim) {
    return (static_cast<std::size_t>(dim) + 15) / 16 * 16 + 16;
  }

 private:
  template <class C>
  std::vector<C>& storage() {
    if constexpr (sizeof(C) == sizeof(double)) {
      return f64_;
    } else {
      return f32_;
    }
  }

  static constexpr std::size_t line = cache_line_bytes;
  static constexpr std::size_t page = l1_set_span;

  std::vector<float> f32_;
  std::vector<double> f64_;
  std::uintptr_t page_offset_ = 0;  // where slot 0 starts, modulo l1_set_span
};

// Calls f.template operator()<A, B>() with the runtime flags a, b as template arguments.
template <class F>
void dispatch2(bool a, bool b, const F& f) {
  if (a && b) {
    f.template operator()<true, true>();
  } else if (a) {
    f.template operator()<true, false>();
  } else if (b) {
    f.template operator()<false, true>();
  } else {
    f.template operator()<false, false>();
  }
}

// The row blocks of a backward: block b sums dγ/dβ over its rows, in row order, into its own
// workspace slot (type C); the slots are then added in block order and rounded into
// dgamma/dbeta (type P). range_vjp(begin, end, dgamma_slot, dbeta_slot) does rows [begin, end).
template <class C, class P, class RangeVjp>
void blocked_vjp(index rows, index d, P* dgamma, P* dbeta, kernel_workspace& ws,
                 const RangeVjp& range_vjp) {
  const index blocks = reduction_blocks(rows);
  const std::size_t stride = kernel_workspace::slot_stride(d);
  const bool want = dgamma != nullptr || dbeta != nullptr;
  if (want) ws.reserve(rows, d);
  parallel_tasks(blocks, rows * d, [&](index b) {
    C* slot = want ? ws.slot<C>(b, d) : nullptr;
    C* dg = dgamma ? slot : nullptr;
    C* db = dbeta ? slot + stride : nullptr;
    if (dg) std::fill(dg, dg + d, C(0));
    if (db) std::fill(db, db + d, C(0));
    const index begin = rows * b / blocks, end = rows * (b + 1) / blocks;
    range_vjp(begin, end, dg, db);
  });
  if (!want) return;
  // Slot sums in block order, for dγ (offset 0) and dβ (offset stride).
  auto reduce = [&](std::size_t offset, P* out) {
    if (!out) return;
    C* sum = ws.slot<C>(0, d) + offset;  // slot 0 becomes ((s0 + s1) + s2) + ...
    for (index b = 1; b < blocks; ++b) {
      const C* slot = ws.slot<C>(b, d) + offset;
      for (index j = 0; j < d; ++j) sum[j] += slot[j];
    }
    for (index j = 0; j < d; ++j) out[j] = static_cast<P>(sum[j]);
  };
  reduce(0, dgamma);
  reduce(stride, dbeta);
}

}  // namespace resnorm::kernels
