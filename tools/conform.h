// tools/conform.h — `kiln conform` (tools/conform.cpp).
#pragma once

#include <string>
#include <vector>

#include "kiln/kiln.h"

struct ConformOptions {
  std::vector<std::string> paths;  // test folders, or folders of them
  kiln::BuildOptions build;
  double rtol = 1e-3, atol = 1e-7;  // onnx's runner's defaults
  std::string filter;               // regex on test names
  std::string json;                 // one JSON line per test
  bool verbose = false;             // a line for every test, not only failures
  bool placement_only = false;      // plan placement (Engine::plan_placement), run nothing
};

// The lines `kiln build --placement-only` prints: one per node ("[cuda] name (Op) -> kernel",
// "[cpu] ... [why]") and a summary per device.
std::string format_placement(const std::vector<kiln::PlacementEntry>& placed);

// Runs every test; prints failures and a summary. Exit code: 0 all passed, 2 some failed.
int run_conform(const ConformOptions& options);
