#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets: a few tiny inputs per target (layout in
fuzz_common.hpp). Run from anywhere: python3 tests/fuzz/make_corpus.py"""
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def header(double, gamma, beta, structured, eps_choice, rows, dim):
    flags = double | gamma << 1 | beta << 2 | structured << 3 | eps_choice << 4
    return bytes([flags, rows, dim])


def values(double, xs):
    return b"".join(struct.pack("<d" if double else "<f", v) for v in xs)


def seeds(extra=b""):
    out = {}
    # float, 3x8, gamma and beta, eps 1e-5, raw values of unit size
    xs = [math.sin(1.7 * k) * 2 for k in range(3 * 8 * 2 + 16)]
    out["float_3x8_affine"] = header(0, 1, 1, 0, 0, 3, 8) + extra + values(0, xs)
    # double, 2x5, no affine, eps 1e-12
    out["double_2x5"] = header(1, 0, 0, 0, 1, 2, 5) + extra + values(1, xs[:20])
    # float, structured: offset 1e4, scale 1 (x = 1e4 + small ints / 16)
    body = values(0, [1e4, 1.0]) + bytes((k * 37) % 256 for k in range(64))
    out["float_offset_1e4"] = header(0, 0, 0, 1, 0, 4, 8) + extra + body
    # float, 1 row, d = 1 and d = 2, eps 0
    out["float_d1"] = header(0, 1, 1, 0, 2, 1, 1) + extra + values(0, [3.0, 0.5, 2.0, -1.0])
    out["float_d2"] = header(0, 0, 0, 0, 2, 1, 2) + extra + values(0, [1.0, -2.0, 0.25, 4.0])
    # float with NaN and inf in row 1
    out["float_nonfinite"] = header(0, 1, 0, 0, 0, 3, 4) + extra + values(
        0, [1, 2, 3, 4, 5, float("nan"), 7, float("inf")] + [0.5] * 20)
    # near the top of the float range
    out["float_huge"] = header(0, 0, 0, 0, 0, 2, 4) + extra + values(
        0, [3e38, -2e38, 1e38, 5e37, 1e19, -1e19, 2e19, 0] + [1.0] * 8)
    # subnormal values, eps 1e-12
    out["float_subnormal"] = header(0, 0, 0, 0, 1, 2, 4) + extra + values(
        0, [1e-40, -2e-40, 3e-41, 1e-45] * 2 + [1.0] * 8)
    return out


def main():
    for target in ("layer_norm", "rms_norm", "gelu", "add_norm"):
        directory = os.path.join(HERE, "corpus", target)
        os.makedirs(directory, exist_ok=True)
        # add_norm reads one more byte after the header: its low bit picks RMSNorm.
        for variant, extra in ((("",), b""),) if target != "add_norm" else (
                (("_layer",), b"\x00"), (("_rms",), b"\x01")):
            for name, data in seeds(extra).items():
                with open(os.path.join(directory, name + variant[0]), "wb") as f:
                    f.write(data)


if __name__ == "__main__":
    main()
