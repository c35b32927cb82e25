// engine/engine_file.h — the engine file: what it holds, and how it is written and read.
//
// This sits below the runtime: it knows the graph, the plan and the backends, never the Engine or an
// execution context. The runtime turns an EngineFile into an Engine (runtime/engine.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/kiln.h"
#include "plan/plan.h"
#include "plugins/plugins.h"

namespace kiln {

// 2: the whole plan is stored (format 1 stored kernel names per node and re-lowered on load).
// 3: checksum trailer.
// 4: the plugin ops the graph uses (EngineFile.plugins). Only engines that use plugins are written
//    as 4, so engines without plugins stay readable by kilns that read format 3; both are read.
constexpr uint32_t kEngineFormatVersion = 3;
constexpr uint32_t kEngineFormatWithPlugins = 4;
// The most shape profiles an engine holds (BuildOptions::profiles).
constexpr size_t kMaxProfiles = 64;

struct EngineFile {
  std::shared_ptr<ir::Graph> graph;        // the optimized graph, weights included
  std::shared_ptr<CompiledGraph> plan;     // lowered from `graph`; kernels instantiated once read
  std::map<std::string, std::string> meta; // kiln_version, device, fingerprint, opt_level, cpu_isa, ...
  std::vector<ShapeProfile> profiles;      // the build's shape profiles (tactics are per profile)
  std::vector<plugins::OpRecord> plugins;  // the plugin ops `graph` uses (format 4)
  // Read with `for_rebuild` from an engine built for another machine of the same device kind: what
  // differs ("built for 'X', this machine is 'Y'"); `plan` is then null (its kernels and tactics were
  // chosen there) and the graph, profiles and metadata are what a rebuild here starts from.
  std::string foreign;
};

// "x86_64 avx2 fma ... onednn:avx2" — the CPU features kiln's kernels can use here, under KILN_CPU_ISA and
// ONEDNN_MAX_CPU_ISA (recorded as meta "cpu_isa"; backends/cpu/cpu_backend.cpp).
std::string host_cpu_isa();

bool looks_like_engine(const std::string& head);
Expected<std::string> write_engine_file(const EngineFile& e);
// The same bytes, written once into CPU memory (the backend's allocation, as Engine::load_from_bytes
// reads a file from): what an engine made in this process is read back from, in place.
Expected<std::shared_ptr<Storage>> write_engine_storage(const EngineFile& e);
// True when `file` still holds what was written: its checksum trailer is there and matches (read
// back by read_engine_file, it could be written out again as it is).
bool engine_file_intact(const Storage& file);
// Verifies the file (checksum trailer, FlatBuffers verifier, format version, the device fingerprint
// against this machine's, the plugins it records against the loaded ones, every plan index against
// the graph), then instantiates the plan's kernels
// from their recorded rows: no pass, no placement, no memory planning runs. Weights whose bytes are
// aligned stay views into `file` (an mmap for Engine::load). With `for_rebuild`, a fingerprint that
// differs from this machine's (same device kind, its backend available) is not an error: the file is
// checked and read as always, except the plan (EngineFile::foreign says what differs).
Expected<EngineFile> read_engine_file(std::shared_ptr<Storage> file, bool for_rebuild = false);

}  // namespace kiln
