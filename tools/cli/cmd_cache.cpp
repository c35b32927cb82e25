// tools/cli/cmd_cache.cpp — `kiln cache merge` and `kiln cache info`: timing caches.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "kiln/kiln.h"
#include "util/file.h"

namespace kiln_cli {

namespace {

// Ok when `path` starts as a timing cache does (its first line); otherwise an error that says what
// the file is instead, when that is recognizable, rather than calling it a damaged cache.
kiln::Status check_timing_cache_file(const std::string& path) {
  KILN_RETURN_IF_ERROR(kiln::check_readable_file(path, "timing cache"));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return kiln::not_found("cannot open timing cache '" + path + "'");
  constexpr char kHead[] = "kiln-timing-cache ";
  char head[sizeof kHead - 1] = {};
  const size_t n = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  if (n == sizeof head && std::memcmp(head, kHead, sizeof head) == 0) return kiln::Status::Ok();
  std::string kind = "a file of another kind";
  if (n == 0) kind = "an empty file";
  else if (is_engine_file(path)) kind = "a kiln engine file";
  else if (n >= 6 && std::memcmp(head, "\x93NUMPY", 6) == 0) kind = "a .npy file";
  else if (std::filesystem::path(path).extension() == ".onnx") kind = "an ONNX model, by its name";
  return kiln::invalid_argument("'" + path + "' is not a kiln timing cache (it is " + kind +
                                "): timing caches are the files kiln build --timing-cache writes, starting with the line "
                                "'kiln-timing-cache 1'");
}

struct CacheCommand {
  std::vector<std::string> merge_inputs;
  std::string merge_out, cache_info_path;
  CLI::App *cache_merge = nullptr, *cache_info = nullptr;

  CLI::App* add_to(CLI::App& app);
  int execute();
};

CLI::App* CacheCommand::add_to(CLI::App& app) {
  auto* cache = app.add_subcommand("cache", "Timing caches: merge several into one, or describe one");
  cache->require_subcommand(1);
  cache_merge = cache->add_subcommand("merge", "Merge timing caches of one device (the fastest time of each tactic)");
  cache_merge->add_option("caches", merge_inputs, "timing cache files")->required();
  cache_merge->add_option("-o,--output", merge_out, "the merged cache")->required();
  cache_info = cache->add_subcommand("info", "Show a timing cache's device and size");
  cache_info->add_option("cache", cache_info_path, "timing cache file")->required();
  return cache;
}

// `cache` requires one of its two subcommands: merge, else info.
int CacheCommand::execute() {
  if (*cache_merge) {
    for (const std::string& in : merge_inputs)
      if (kiln::Status st = check_timing_cache_file(in); !st.ok()) return fail(st);
    if (kiln::Status st = kiln::merge_timing_caches(merge_inputs, merge_out); !st.ok()) return fail(st);
    auto d = kiln::describe_timing_cache(merge_out);
    if (!d.ok()) return fail(d.status());
    std::printf("merged %zu caches -> %s\n%s", merge_inputs.size(), merge_out.c_str(), d->c_str());
    return 0;
  }
  if (kiln::Status st = check_timing_cache_file(cache_info_path); !st.ok()) return fail(st);
  auto d = kiln::describe_timing_cache(cache_info_path);
  if (!d.ok()) return fail(d.status());
  std::printf("%s", d->c_str());
  return 0;
}

}  // namespace

Command add_cache_command(CLI::App& app) { return make_command<CacheCommand>(app); }

}  // namespace kiln_cli
