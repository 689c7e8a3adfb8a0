# resnorm_warnings: the warning flags for resnorm's OWN targets (tests, benchmarks, examples and
# the header check). Internal: never linked into resnorm, never installed or exported, so a
# consumer's flags are its own business.
#
# Eigen, Catch2 and Google Benchmark reach these targets through imported targets, whose include
# directories CMake passes as -isystem: their headers (and the templates instantiated from them)
# do not trip these warnings, only our code does.
include_guard(GLOBAL)

add_library(resnorm_warnings INTERFACE)

set(_resnorm_gcc_like_warnings
  -Wall
  -Wextra
  -Wpedantic
  -Wshadow                # a local hiding a member or outer variable: a classic source of wrong grads
  -Wdouble-promotion      # float silently widened to double: the float paths must stay float
  -Wnon-virtual-dtor
  -Woverloaded-virtual
  -Wcast-align
  -Wold-style-cast        # (T)x hides which cast is meant; scalar casts say static_cast<Scalar>
  -Wimplicit-fallthrough
  # Not enabled: -Wconversion / -Wsign-conversion fire on every Eigen::Index <-> int/size_t mix
  # in ordinary Eigen code and would bury real findings; -Wuseless-cast (GCC) fires on
  # static_cast<Scalar>(x) whenever Scalar happens to be double; -Wnull-dereference gives
  # GCC 12 false positives inside libstdc++ at -O2; -Wformat=2 (-Wformat-nonliteral) rejects a
  # printf format assembled at run time, which the examples use to lay out tables, while -Wall's
  # -Wformat already checks every literal format against its arguments.
)

target_compile_options(resnorm_warnings INTERFACE
  "$<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang,AppleClang>:${_resnorm_gcc_like_warnings}>"
  # GCC's -Wmaybe-uninitialized (part of -Wall) reports Eigen internals inlined into our code,
  # where -isystem does not silence it: with -march=native on an AVX-512 host, GCC 12 flags the
  # deliberately undefined lanes of _mm512_undefined_pd() in every Eigen matrix product (GCC
  # PR 105593), and GCC 11-14 have further Eigen false positives. -Wuninitialized (definite
  # uses) stays on, and clang's uninitialized analysis still checks our code (clang-test).
  "$<$<COMPILE_LANG_AND_ID:CXX,GNU>:-Wno-maybe-uninitialized>"
  "$<$<COMPILE_LANG_AND_ID:CXX,MSVC>:/W4;/permissive->")

if(RESNORM_WERROR)
  target_compile_options(resnorm_warnings INTERFACE
    "$<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang,AppleClang>:-Werror>"
    "$<$<COMPILE_LANG_AND_ID:CXX,MSVC>:/WX>")
endif()

unset(_resnorm_gcc_like_warnings)
