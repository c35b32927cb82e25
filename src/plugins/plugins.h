// plugins/plugins.h — the C-ABI plugin registry (include/kiln/plugin.h): loading a library, the ops it
// declares, and what engine files record of them.
//
// A loaded plugin's ops join the process: its op declarations go into the op table's extension list
// (ops::add_extension_op: the importer, the verifier and shape inference see them) and its kernels into
// the CPU backend's registry (lowering, the tuner and engine loading see them). Libraries are never
// unloaded: kernels and engines may point into them for the life of the process.
//
// Thread safety: loading is serialized by a lock, but lookups made by builds and loads running at the
// same time are not: load plugins before building or loading engines that use them (the CLI, the
// Python SessionOptions and BuildOptions::plugins all do).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/kernel.h"
#include "kiln/kiln.h"
#include "kiln/plugin.h"

namespace kiln::ops {
struct InferContext;
}

namespace kiln::plugins {

namespace ort {
struct OpVariants;  // plugins/ort_ops.cpp
}

// What an engine file records for each plugin op its graph uses, and checks on load.
struct OpRecord {
  std::string domain, op_type;  // domain "" = ai.onnx (an override)
  std::string library;          // the library's file name ("libkiln_example_plugin.so")
  std::string plugin;           // the plugin's name (KilnPluginHost::set_info)
  std::string version;          // the plugin's version
  std::string abi_hash;         // hash of the op's declaration (plugins/loader.cpp, describe_op)
  // Hash of the library file's contents: another build of a library with the same name, version
  // and declarations (other kernels) is not the one an engine was built with. "" in engines written
  // before it was recorded (not checked then).
  std::string library_hash;
};

// One op a loaded plugin declared (owned by the registry; stable address for the process' life).
struct PluginOp {
  KilnPluginOp def{};                 // the plugin's declaration, copied up to its struct_size
  KilnPluginKernel cpu{};             // its CPU kernel, likewise
  std::string domain, op_type;        // domain normalized ("" for ai.onnx)
  std::vector<std::string> tactics;   // the CPU kernel's tactic names (empty: one way to run)
  OpRecord record;
  bool overrides = false;             // it replaces an op built into kiln (loaded with override)
  // "plugin 'kiln_example' 1.0 (libkiln_example_plugin.so), op kiln_example.LeakyHardTanh": what
  // every error of the op's callbacks starts with.
  std::string label;
  // Held around every infer, create and destroy call: kiln/plugin.h promises them one thread at a
  // time per op, and builds, loads and engine releases may run on several threads at once.
  std::shared_ptr<std::mutex> calls = std::make_shared<std::mutex>();
  // Set for an op of an ONNX Runtime custom-op library (plugins/ort_ops.cpp): its OrtCustomOp
  // variants. `def` and `cpu` are then unused (zero).
  std::shared_ptr<const ort::OpVariants> ort;
};

// Loads `library` (a path, or a bare file name searched in KILN_PLUGIN_PATH's folders, then by the
// dynamic loader), checks its ABI version and registers its ops. Loading a library again returns what
// the first load gave. An op that kiln already has is refused unless `allow_override`.
Expected<PluginInfo> load(const std::string& library, bool allow_override);
std::vector<PluginInfo> loaded();

// The loaded plugin op for a node's (domain, op type), or null.
const PluginOp* find(const std::string& domain, const std::string& op_type);

// The records an engine of `graph` keeps: one per plugin op its nodes (subgraphs included) use.
std::vector<OpRecord> records_for(const ir::Graph& graph);
// The built-in ops `graph` uses that a loaded plugin overrides ("Relu"; domain-qualified otherwise).
std::vector<std::string> overridden_ops_in(const ir::Graph& graph);
// Checks an engine's records against the loaded plugins: each op must be loaded from a library of
// the recorded name, version and declaration hash. The error names the op, the library expected and
// what was found.
Status check_records(const std::vector<OpRecord>& records);

// The C handle of a node's attributes (it is the node; the host table's getters read it).
inline const KilnAttributes* attributes_of(const ir::Node& node) {
  return reinterpret_cast<const KilnAttributes*>(&node);
}
// The host table handed to plugins (plugins/loader.cpp).
const KilnPluginHost& host_table();

// ---- plugins/plugin_kernel.cpp: the adapters between kiln's contracts and the C callbacks
// The kernel row of a plugin op's CPU kernel (name "plugin.cpu.<domain>.<op>").
KernelDef cpu_kernel_row(const PluginOp& op);
// The op table entry of a plugin op.
void add_op_declaration(const PluginOp& op);

// ---- plugins/ort_ops.cpp: ONNX Runtime custom-op libraries (exporting RegisterCustomOps)
// Whether the library is one.
bool is_ort_library(void* handle);
// Calls its RegisterCustomOps with kiln's OrtApiBase and turns each CPU OrtCustomOp it registers into a
// PluginOp (one per domain and op type; variants by type or opset range grouped). `library` names the
// file in messages.
Expected<std::vector<PluginOp>> register_ort_library(void* handle, const std::string& library);
// What an ORT op's declaration hash covers (the loader's describe_op for ORT ops).
std::string describe_ort_op(const PluginOp& op);
// Its op-table shape function, and its kernel row from the row's common fields (cpu_kernel_row).
Status infer_ort_node(ops::InferContext& ctx);
KernelDef ort_kernel_row(const PluginOp& op, KernelDef k);

// Maps between plugin dtype codes and kiln's: the codes are ONNX's for both; false for types the ABI
// does not pass (strings, complex, sub-byte types).
bool plugin_dtype_ok(int32_t code);

}  // namespace kiln::plugins
