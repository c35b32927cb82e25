// tools/cli/common.h — what several `kiln` commands share: errors, devices and precisions from their
// option strings, a model's inputs (--input files or random data), output comparison, timing, files.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace CLI {
class App;
}  // namespace CLI

namespace kiln_cli {

// Prints "kiln: error: ..." on stderr; returns the exit status 1.
int fail(const kiln::Status& st);

// A tensor's dims for printing: [1,3,224,224], a dynamic dim as its name or '?', [*] for an unknown rank.
std::string dims_string(const kiln::TensorInfo& t);

// cuda or gpu: a CUDA engine; anything else: the CPU.
kiln::DeviceType parse_device(const std::string& d);

// The CLI's --precision values are checked by CLI11 against the same names (kiln::parse_precision).
kiln::Precision parse_precision(const std::string& p);

// --plugin (repeatable) and --plugin-override, which build, run, bench, profile and compare share:
// the libraries go into BuildOptions::plugins, loaded before a model is built or an engine loaded.
struct PluginArgs {
  std::vector<std::string> libraries;
  bool allow_override = false;
  void add_to(CLI::App& app);
  void apply(kiln::BuildOptions& o) const {
    o.plugins = libraries;
    o.plugin_override = allow_override;
  }
  // Loads them now (commands that build nothing: info).
  kiln::Status load() const;
};

// The user's timing cache folder: $XDG_CACHE_HOME/kiln/timing, else $HOME/.cache/kiln/timing, made
// when missing; "" when neither variable is set or the folder cannot be made. It only says where
// measured tactic times are kept (one file per device, BuildOptions::timing_cache), never what an
// engine computes.
std::string default_timing_cache_dir();

// --no-cache, which run, bench, profile and compare share: an .onnx they build with tuning (on CUDA)
// reads and adds to the user's timing cache folder, so the second build of a model, or of one with
// the same layers, takes its tactics from there instead of timing them again.
// Also --on-mismatch: what an engine file built for another machine of its device kind does (error,
// or rebuilt here from its graph, tuned with the same timing cache; kiln::EngineLoadOptions).
struct CacheArgs {
  bool off = false;
  std::string on_mismatch = "error";
  void add_to(CLI::App& app);
  // Points o.timing_cache at the folder when `model` is an .onnx that will be tuned, and says so once
  // on stderr.
  void apply(kiln::BuildOptions& o, const std::string& model) const;
  // How an engine file is loaded: the --on-mismatch policy; a rebuild's tuning reads and adds to the
  // user's timing cache unless --no-cache.
  kiln::EngineLoadOptions load_options() const;
};

// What --input and --seed gave: missing inputs get random data from the seed.
struct Inputs {
  std::vector<std::string> specs;  // name=file.npy
  unsigned seed = 0;
};

// How outputs are judged: relative L2 of the whole output <= rtol (kiln against kiln), or, when
// `elementwise`, every element within |a - b| <= atol + rtol * |b| with b the reference (polygraphy's
// rule; `kiln compare --against onnxruntime`). NaN must stand where the reference has NaN.
struct Tolerance {
  double rtol = 1e-4, atol = 0;
  bool elementwise = false;
};

// Prints, per output of A, A against the reference output of the same name (by position when the
// reference has no output of that name); false when one fails `tol` or has no counterpart.
bool print_comparison(const std::vector<std::string>& a_names, const std::vector<kiln::Value>& ra,
                      const std::vector<std::string>& b_names, const std::vector<kiln::Value>& rb, const Tolerance& tol,
                      const char* indent = "  ");

std::vector<std::string> output_names(const kiln::Engine& e);

// The engine's inputs: each --input file by name, random data for the rest (announced on stdout);
// an input backed by an initializer keeps it unless given.
kiln::Expected<std::map<std::string, kiln::Value>> load_inputs(const kiln::Engine& e, const Inputs& in);

double ms_since(std::chrono::steady_clock::time_point t0);

// Whether `path` is a kiln engine file (its header says so), not an ONNX model.
bool is_engine_file(const std::string& path);

// A private temporary folder (mkdtemp in the system's temporary directory, named `prefix`-XXXXXX),
// removed with everything in it when this goes. path() is "" when it could not be made.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes `text` to `path`; an error naming the file when it cannot.
kiln::Status write_text(const std::string& path, const std::string& text);

}  // namespace kiln_cli
