// tools/cli/cmd_cache.cpp — `kiln cache merge` and `kiln cache info`: timing caches.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "kiln/kiln.h"

namespace kiln_cli {

namespace {

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
    if (kiln::Status st = kiln::merge_timing_caches(merge_inputs, merge_out); !st.ok()) return fail(st);
    auto d = kiln::describe_timing_cache(merge_out);
    if (!d.ok()) return fail(d.status());
    std::printf("merged %zu caches -> %s\n%s", merge_inputs.size(), merge_out.c_str(), d->c_str());
    return 0;
  }
  auto d = kiln::describe_timing_cache(cache_info_path);
  if (!d.ok()) return fail(d.status());
  std::printf("%s", d->c_str());
  return 0;
}

}  // namespace

Command add_cache_command(CLI::App& app) { return make_command<CacheCommand>(app); }

}  // namespace kiln_cli
