#!/usr/bin/env python3
"""Build resnorm's benchmarks in Release (-O3 -march=native, OpenMP on), run them interleaved with
repetitions, and print the ratio table (medians) per shape.

    python3 bench/run_benchmarks.py                  # default shapes
    RESNORM_BENCH_LARGE=1 python3 bench/run_benchmarks.py   # adds 32768 x 4096 (needs ~4 GiB)
    python3 bench/run_benchmarks.py --build-dir /tmp/rb --repetitions 9 --min-time 0.2
    python3 bench/run_benchmarks.py --only add_norm  # rerun one binary, reuse the others' JSON
    python3 bench/run_benchmarks.py --reuse          # reprint the table from the last run's JSON

Every ratio compares medians from one interleaved run of one binary
(--benchmark_enable_random_interleaving=true): on a shared machine, back-to-back repetitions of
one case drift by up to 2x, interleaved medians agree within a few percent. Single-thread runs set
OMP_NUM_THREADS=1 (resnorm and oneDNN alike); the "2 threads / 1 thread" rows rerun resnorm's
float kernels, and memcpy split in two (the memory's own scaling), with OMP_NUM_THREADS=2.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BINARIES = ["layer_norm", "rms_norm", "gelu", "add_norm"]

# (label, numerator (op, impl), denominator (op, impl), counter)
RATIOS = [
    ("LN fwd resnorm / oneDNN", ("layer_norm_forward", "resnorm"), ("layer_norm_forward", "onednn"), "bytes_per_second"),
    ("LN fwd resnorm / memcpy", ("layer_norm_forward", "resnorm"), ("memcpy", "memcpy"), "bytes_per_second"),
    ("LN fwd naive / memcpy", ("layer_norm_forward", "naive"), ("memcpy", "memcpy"), "bytes_per_second"),
    ("LN bwd resnorm / oneDNN", ("layer_norm_backward", "resnorm"), ("layer_norm_backward", "onednn"), "bytes_per_second"),
    ("LN bwd resnorm / memcpy", ("layer_norm_backward", "resnorm"), ("memcpy", "memcpy"), "bytes_per_second"),
    ("RMS fwd resnorm / memcpy", ("rms_norm_forward", "resnorm"), ("memcpy", "memcpy"), "bytes_per_second"),
    ("RMS fwd resnorm / LN fwd oneDNN", ("rms_norm_forward", "resnorm"), ("layer_norm_forward", "onednn"), "bytes_per_second"),
    ("RMS bwd resnorm / memcpy", ("rms_norm_backward", "resnorm"), ("memcpy", "memcpy"), "bytes_per_second"),
    ("GELU erf fwd resnorm / oneDNN", ("gelu_erf_forward", "resnorm"), ("gelu_erf_forward", "onednn"), "bytes_per_second"),
    ("GELU tanh fwd resnorm / oneDNN", ("gelu_tanh_forward", "resnorm"), ("gelu_tanh_forward", "onednn"), "bytes_per_second"),
    ("GELU erf bwd resnorm / oneDNN", ("gelu_erf_backward", "resnorm"), ("gelu_erf_backward", "onednn"), "bytes_per_second"),
    ("GELU erf fwd resnorm / memcpy", ("gelu_erf_forward", "resnorm"), ("memcpy", "memcpy"), "bytes_per_second"),
    ("add+LN fwd fused / unfused", ("add_layer_norm_forward", "resnorm"), ("add_layer_norm_forward", "unfused"), "bytes_per_second"),
    ("add+LN bwd fused / unfused", ("add_layer_norm_backward", "resnorm"), ("add_layer_norm_backward", "unfused"), "bytes_per_second"),
    ("LN fwd bf16 / float (elements/s)", ("layer_norm_forward", "resnorm_bf16"), ("layer_norm_forward", "resnorm"), "items_per_second"),
    ("LN bwd bf16 / float (elements/s)", ("layer_norm_backward", "resnorm_bf16"), ("layer_norm_backward", "resnorm"), "items_per_second"),
    ("RMS fwd bf16 / float (elements/s)", ("rms_norm_forward", "resnorm_bf16"), ("rms_norm_forward", "resnorm"), "items_per_second"),
    ("GELU erf fwd bf16 / float (elements/s)", ("gelu_erf_forward", "resnorm_bf16"), ("gelu_erf_forward", "resnorm"), "items_per_second"),
    ("add+LN fwd bf16 / float (elements/s)", ("add_layer_norm_forward", "resnorm_bf16"), ("add_layer_norm_forward", "resnorm"), "items_per_second"),
]
THREAD_OPS = ["layer_norm_forward", "layer_norm_backward", "rms_norm_forward", "rms_norm_backward"]


def run(cmd, env=None):
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    # Progress to stderr; the ratio table alone goes to stdout.
    subprocess.run(cmd, check=True, env=env, stdout=sys.stderr)


# What the benchmarks need on Debian: the tests' toolchain, Google Benchmark, and oneDNN with the
# OpenCL loader its CMake package insists on (without it the oneDNN cases are left out).
PACKAGES = ["build-essential", "cmake", "g++", "libeigen3-dev", "libbenchmark-dev", "libdnnl-dev",
            "ocl-icd-opencl-dev"]


def install_missing_packages():
    """apt-get install whatever of PACKAGES is missing (Debian/Ubuntu, as root; RESNORM_SKIP_APT=1 skips)."""
    if os.environ.get("RESNORM_SKIP_APT") == "1" or not shutil.which("dpkg"):
        return
    missing = [p for p in PACKAGES
               if "install ok installed" not in subprocess.run(
                   ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True).stdout]
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit("run_benchmarks.py: install these first (or run as root): " + " ".join(missing))
    run(["apt-get", "update"])
    run(["apt-get", "install", "-y", "--no-install-recommends"] + missing,
        env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def build(build_dir):
    run(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DRESNORM_OPENMP=ON",
         "-DRESNORM_BUILD_TESTS=OFF", "-DRESNORM_BUILD_EXAMPLES=OFF", "-DRESNORM_INSTALL=OFF",
         "-DRESNORM_NATIVE=ON"])
    run(["cmake", "--build", build_dir, "-j2", "--target"] + [f"resnorm_bench_{b}" for b in BINARIES])


def bench(build_dir, name, threads, repetitions, min_time, out, bench_filter=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="close")
    cmd = [Path(build_dir) / "bench" / f"resnorm_bench_{name}",
           "--benchmark_enable_random_interleaving=true",
           f"--benchmark_repetitions={repetitions}",
           "--benchmark_report_aggregates_only=true",
           f"--benchmark_min_time={min_time}",
           "--benchmark_format=console", f"--benchmark_out={out}", "--benchmark_out_format=json"]
    if bench_filter:
        cmd.append(f"--benchmark_filter={bench_filter}")
    run(cmd, env=env)
    return json.loads(Path(out).read_text())


def medians(report):
    """{(op, impl, rows, dim): {counter: value}} from the median aggregates."""
    result = {}
    for b in report["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        parts = b["run_name"].split("/")  # op/impl/rows:R/dim:D[/real_time]
        op, impl = parts[0], parts[1]
        rows = int(parts[2].split(":")[1])
        dim = int(parts[3].split(":")[1])
        result[(op, impl, rows, dim)] = b
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="/tmp/resnorm-bench-build")
    parser.add_argument("--repetitions", type=int, default=9)
    parser.add_argument("--min-time", default="0.2")
    parser.add_argument("--skip-build", action="store_true")
    parser.add_argument("--only", default=",".join(BINARIES),
                        help="comma-separated binaries to run (default: all); the others' results "
                             "are read from the JSON an earlier run left in --build-dir")
    parser.add_argument("--reuse", action="store_true",
                        help="run nothing: print the table from the JSON in --build-dir")
    args = parser.parse_args()
    to_run = set() if args.reuse else set(args.only.split(","))
    unknown = to_run - set(BINARIES)
    if unknown:
        sys.exit("run_benchmarks.py: no such benchmark binary: " + ", ".join(sorted(unknown)))

    if to_run and not args.skip_build:
        install_missing_packages()
        build(args.build_dir)

    def results(name, threads, bench_filter=None):
        out = Path(args.build_dir) / f"{name}_{threads}thread{'s' if threads > 1 else ''}.json"
        if name in to_run:
            return medians(bench(args.build_dir, name, threads, args.repetitions, args.min_time,
                                 out, bench_filter))
        if not out.exists():
            sys.exit(f"run_benchmarks.py: {out} is missing: run {name} first")
        return medians(json.loads(out.read_text()))

    # Each binary's medians apart: a ratio divides medians from one binary's interleaved run (its
    # own memcpy, oneDNN or unfused case), never from another binary run minutes apart.
    one = {name: results(name, 1) for name in BINARIES}
    thread_filter = "^((" + "|".join(THREAD_OPS) + ")/resnorm|memcpy/memcpy)/"
    two = {name: results(name, 2, thread_filter) for name in ["layer_norm", "rms_norm"]}

    def lookup(per_binary, numerator, denominator):
        """The numerator's case and the denominator's from the binary that ran the numerator (from
        another binary only where that one has no such case: RMSNorm against oneDNN's LN)."""
        for cases in per_binary.values():
            if numerator in cases:
                if denominator in cases:
                    return cases[numerator], cases[denominator]
                elsewhere = [c[denominator] for c in per_binary.values() if denominator in c]
                return cases[numerator], (elsewhere[0] if elsewhere else None)
        return None, None

    shapes = sorted({(k[2], k[3]) for cases in one.values() for k in cases},
                    key=lambda s: (s[0] * s[1], s[0]))
    header = "| ratio (medians) | " + " | ".join(f"{r}×{d}" for r, d in shapes) + " |"
    print()
    print(header)
    print("|---|" + "---:|" * len(shapes))

    def cell(num, den, counter):
        if num is None or den is None or counter not in num or counter not in den:
            return "—"
        return f"{num[counter] / den[counter]:.2f}"

    for label, (op_n, impl_n), (op_d, impl_d), counter in RATIOS:
        cells = [cell(*lookup(one, (op_n, impl_n, r, d), (op_d, impl_d, r, d)), counter)
                 for r, d in shapes]
        print(f"| {label} | " + " | ".join(cells) + " |")
    # memcpy's own scaling first: the bandwidth two cores get on this machine bounds the kernels'.
    for op, impl, binary in [("memcpy", "memcpy", "layer_norm")] + [
            (op, "resnorm", op.rsplit("_", 1)[0]) for op in THREAD_OPS]:  # layer_norm_forward -> layer_norm
        cells = [cell(two[binary].get((op, impl, r, d)), one[binary].get((op, impl, r, d)),
                      "items_per_second") for r, d in shapes]
        print(f"| {op} 2 threads / 1 thread | " + " | ".join(cells) + " |")

    print()
    print("| absolute (medians, 1 thread) | " + " | ".join(f"{r}×{d}" for r, d in shapes) + " |")
    print("|---|" + "---:|" * len(shapes))
    for op, impl in [("memcpy", "memcpy"), ("layer_norm_forward", "resnorm"), ("layer_norm_forward", "onednn"),
                     ("layer_norm_backward", "resnorm"), ("layer_norm_backward", "onednn")]:
        cells = []
        for r, d in shapes:
            b = one["layer_norm"].get((op, impl, r, d))
            cells.append("—" if b is None else f"{b['bytes_per_second'] / 1e9:.1f} GB/s, {b['real_time']:.3g} {b['time_unit']}")
        print(f"| {op}/{impl} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
