// bench/ab/ab_main.cpp — one kernel, two versions of resnorm, timed in alternation in one
// process (see compare.sh).
//
//   resnorm_ab OP TYPE ROWS DIM [SAMPLES]
//     OP: ln_fwd, ln_bwd, rms_fwd, rms_bwd, add_ln_fwd, gelu_fwd, gelu_bwd (erf), gelu_tanh_fwd;
//     TYPE: float or bf16; SAMPLES: per side
//
// Both sides run on the same buffers (x, f or dy, y or dx, s: 2 MiB-aligned, on transparent huge
// pages where granted, at page offsets 0, 1, 2 and 3 KiB; RESNORM_AB_STAGGER=0 puts them all at
// offset 0, as bench/ does, where rows of 4 KiB meet in the same L1 sets; RESNORM_AB_SMALL_PAGES=1
// leaves them on 4 KiB pages). Each sample times enough calls for about 2 ms; the sides alternate
// sample by sample, the first side swapping each time, so that whatever else the machine does falls
// on both alike. Separate processes run minutes apart on a shared VM differed by up to 30 %. Which
// side a tree is built as can itself be worth 1-5 % (code addresses, statics), so compare.sh runs
// both placements. Prints the median and the 10th and 90th percentiles of each side, and A / B of
// the medians (above 1: B is faster).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif

using run_fn = void (*)(int, bool, const void*, const void*, void*, void*, const float*,
                        const float*, float*, float*, double*, double*, long, long);
void run_case_a(int, bool, const void*, const void*, void*, void*, const float*, const float*,
                float*, float*, double*, double*, long, long);
void run_case_b(int, bool, const void*, const void*, void*, void*, const float*, const float*,
                float*, float*, double*, double*, long, long);

namespace {

constexpr std::size_t huge_page = std::size_t(2) << 20;

// bytes at offset bytes into a fresh 2 MiB-aligned block, touched once.
unsigned char* buffer(std::size_t bytes, std::size_t offset) {
  const std::size_t size = (bytes + offset + huge_page - 1) / huge_page * huge_page;
  auto* p = static_cast<unsigned char*>(std::aligned_alloc(huge_page, size));
  if (p == nullptr) {
    std::fprintf(stderr, "resnorm_ab: out of memory\n");
    std::exit(1);
  }
#if defined(__linux__)
  // RESNORM_AB_SMALL_PAGES=1: 4 KiB pages, as a plain allocation gets where transparent huge
  // pages are granted only on request (madvise).
  const char* small_pages = std::getenv("RESNORM_AB_SMALL_PAGES");
  if (small_pages == nullptr || std::strcmp(small_pages, "1") != 0) madvise(p, size, MADV_HUGEPAGE);
#endif
  std::memset(p, 0, size);
  return p + offset;
}

// N(mean, sd²) values stored as float or as bf16 (the top half of the float, truncated).
void fill(unsigned char* out, std::size_t n, bool bf16, std::uint32_t seed, float mean, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, sd);
  for (std::size_t i = 0; i < n; ++i) {
    const float v = normal(rng);
    if (bf16) {
      std::uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const auto half = static_cast<std::uint16_t>(bits >> 16);
      std::memcpy(out + 2 * i, &half, 2);
    } else {
      std::memcpy(out + 4 * i, &v, 4);
    }
  }
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> ops = {"ln_fwd",     "ln_bwd",   "rms_fwd",  "rms_bwd",
                                        "add_ln_fwd", "gelu_fwd", "gelu_bwd", "gelu_tanh_fwd"};
  const auto op_it = argc >= 5 ? std::find(ops.begin(), ops.end(), argv[1]) : ops.end();
  const std::string type = argc >= 5 ? argv[2] : "";
  if (op_it == ops.end() || (type != "float" && type != "bf16")) {
    std::fprintf(
        stderr,
        "usage: %s {ln_fwd|ln_bwd|rms_fwd|rms_bwd|add_ln_fwd|gelu_fwd|gelu_bwd|gelu_tanh_fwd} "
        "{float|bf16} ROWS DIM [SAMPLES]\n",
        argv[0]);
    return 2;
  }
  const int op = static_cast<int>(op_it - ops.begin());
  const bool bf16 = type == "bf16";
  const long rows = std::atol(argv[3]), dim = std::atol(argv[4]);
  const int samples = argc > 5 ? std::atoi(argv[5]) : 150;
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(dim);
  const std::size_t bytes = n * (bf16 ? 2 : 4);
  const char* stagger_env = std::getenv("RESNORM_AB_STAGGER");
  const std::size_t stagger = stagger_env ? std::strtoul(stagger_env, nullptr, 10) : 1024;
  unsigned char* x = buffer(bytes, 0);
  unsigned char* f = buffer(bytes, stagger);
  unsigned char* y = buffer(bytes, 2 * stagger);
  unsigned char* s = buffer(bytes, 3 * stagger);
  fill(x, n, bf16, 1, 0.5f, 2.0f);
  fill(f, n, bf16, 2, 0.0f, 1.0f);
  std::vector<float> gamma(static_cast<std::size_t>(dim), 1.5f), beta(gamma.size(), 0.25f);
  std::vector<float> dgamma(gamma.size()), dbeta(gamma.size());
  std::vector<double> mean(static_cast<std::size_t>(rows)), rstd(mean.size());
  auto call = [&](run_fn run, int which) {
    run(which, bf16, x, f, y, s, gamma.data(), beta.data(), dgamma.data(), dbeta.data(),
        mean.data(), rstd.data(), rows, dim);
  };
  // The statistics the backwards read.
  call(run_case_a, op == 3 ? 2 : 0);
  // One untimed call per side first (GELU's bf16 tables fill on first use).
  call(run_case_a, op);
  call(run_case_b, op);
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  call(run_case_a, op);
  const double once = std::chrono::duration<double>(clock::now() - start).count();
  const int calls = std::max(1, static_cast<int>(2e-3 / std::max(once, 1e-8)));
  std::vector<double> a, b;
  for (int i = 0; i < samples; ++i) {
    for (int k = 0; k < 2; ++k) {
      const bool side_a = (i % 2 == 0) == (k == 0);
      const auto t0 = clock::now();
      for (int c = 0; c < calls; ++c) call(side_a ? run_case_a : run_case_b, op);
      const double t = std::chrono::duration<double>(clock::now() - t0).count() / calls;
      (side_a ? a : b).push_back(t * 1e6);
    }
  }
  std::printf(
      "%s %s %ldx%ld, %d samples of %d calls each: A %.4g us [%.4g-%.4g]  B %.4g us "
      "[%.4g-%.4g]  A/B %.3f\n",
      argv[1], type.c_str(), rows, dim, samples, calls, quantile(a, 0.5), quantile(a, 0.1),
      quantile(a, 0.9), quantile(b, 0.5), quantile(b, 0.1), quantile(b, 0.9),
      quantile(a, 0.5) / quantile(b, 0.5));
}
