#!/usr/bin/env bash
# The ThreadSanitizer job: a clang-14 -fsanitize=thread build (CUDA and Python off) in build-tsan/,
# then under it the unit tests where kiln's own threads meet: the runtime's (engines and contexts
# shared across threads, among them the 16-thread soak with mixed batch sizes, Runtime.*), the
# thread pool's (Parallel.*), the serve batcher's (ServeBatcher.*) and the HTTP gate's (HttpGate.*). Any race report fails the job
# (halt_on_error). Run before a stop by scripts/prestop.sh, not in CI: the build takes about 12 min on
# 2 cores (2026-11-29: 719 s), the tests a few seconds (oneDNN's kernels are not instrumented).
#
# OpenMP: kiln's kernels split loops over OpenMP threads, whose runtime is not instrumented; the
# suites run with OMP_NUM_THREADS=1 so every report is about kiln's threads, and then Parallel.* again
# with 4 OpenMP threads under Archer (LLVM's OpenMP tool that tells TSan about OpenMP's
# synchronization), which checks the pool itself.
#   scripts/tsan.sh                 # build (incremental) and run
#   scripts/tsan.sh --filter 'Runtime.*'   # one suite
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
filter='Runtime.*:ServeBatcher.*:HttpGate.*:Parallel.*'
while [ $# -gt 0 ]; do
  case "$1" in
    --filter) filter=$2; shift 2 ;;
    *) echo "usage: $0 [--filter GTEST_FILTER]" >&2; exit 2 ;;
  esac
done

scripts/clang_deps.sh

t0=$SECONDS
if [ ! -f build-tsan/build.ninja ]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  tsan="-fsanitize=thread -fno-omit-frame-pointer"
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-tsan -G Ninja "${launcher[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DCMAKE_CXX_FLAGS="$tsan" -DCMAKE_C_FLAGS="$tsan" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
    -DKILN_CUDA=OFF -DKILN_PYTHON=OFF -DKILN_TESTS=ON -DKILN_SANITIZE=OFF -DKILN_FUZZ=OFF
fi
export CCACHE_DIR=${CCACHE_DIR:-$root/.ccache}
cmake --build build-tsan --target kiln_tests
echo "== tsan: build took $((SECONDS - t0)) s"

export TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 second_deadlock_stack=1 history_size=4"
t1=$SECONDS
echo "== tsan: $filter (OMP_NUM_THREADS=1)"
OMP_NUM_THREADS=1 build-tsan/kiln_tests --gtest_brief=1 --gtest_filter="$filter"
archer=$(ls /usr/lib/llvm-14/lib/libarcher.so 2>/dev/null || true)
if [ -n "$archer" ] && [[ "$filter" == *Parallel* ]]; then
  echo "== tsan: Parallel.* with 4 OpenMP threads under Archer"
  OMP_NUM_THREADS=4 OMP_TOOL_LIBRARIES=$archer ARCHER_OPTIONS="verbose=0" \
    build-tsan/kiln_tests --gtest_brief=1 --gtest_filter='Parallel.*'
fi
echo "== tsan: tests took $((SECONDS - t1)) s; the job $((SECONDS - t0)) s"
echo "tsan job: clean"
