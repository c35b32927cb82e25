#!/usr/bin/env bash
# The whole C++ test suite on a machine with an NVIDIA GPU, in one command, from the repository root:
#   tests/gpu/unit_tests.sh BIN_DIR OUT_DIR
# BIN_DIR has kiln_tests, kiln_alloc_tests, libkiln.so (+ the shared libraries the machine lacks).
# Runs every unit test (not only the CUDA ones: a test must pass with a GPU present as without one),
# the allocation tests, and the unit tests again with the CPU capped to the weakest ISA; every test
# passes or is skipped with its reason, counted per reason at the end (tests/skip_summary.py).
# Writes OUT_DIR/unit_tests.log and the JUnit reports; exits non-zero when a test failed.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  lscpu | grep -E "Model name"
  rc=0
  echo "== unit tests (all)"
  "$bin/kiln_tests" --gtest_brief=1 --gtest_output="xml:$out/gtest_all.xml" || rc=1
  echo "== allocation tests (CPU and CUDA; CUDA runs replay graphs)"
  "$bin/kiln_alloc_tests" --gtest_brief=1 --gtest_output="xml:$out/gtest_alloc.xml" || rc=1
  echo "== unit tests, weakest ISA (KILN_CPU_ISA=baseline ONEDNN_MAX_CPU_ISA=SSE41)"
  KILN_CPU_ISA=baseline ONEDNN_MAX_CPU_ISA=SSE41 "$bin/kiln_tests" --gtest_brief=1 --gtest_output="xml:$out/gtest_weakest.xml" || rc=1
  python3 tests/skip_summary.py "unit=$out/gtest_all.xml" "alloc=$out/gtest_alloc.xml" "unit, weakest ISA=$out/gtest_weakest.xml"
  echo "exit: $rc"
  exit $rc
} 2>&1 | tee "$out/unit_tests.log"
exit "${PIPESTATUS[0]}"
