// kiln/plugin.hpp — header-only C++ conveniences over the C plugin ABI (kiln/plugin.h). Optional: a
// plugin written with them is still a plain C-ABI plugin (nothing here crosses the library boundary
// but the C structs), and needs no libkiln.
//
// What they add: exceptions instead of status codes (every callback catches them, so none escapes
// into kiln), typed attribute getters with defaults, and a kernel class instead of four callbacks:
//
//   struct MyKernel {
//     MyKernel(const kiln_plugin::Attributes& attrs, const KilnKernelInit& init);  // create
//     void reshape(KilnReshapeContext& ctx) const;                                  // per shape
//     void run(const KilnRunContext& ctx) const;                                    // per run
//   };
//   static int32_t infer(void*, KilnInferContext* ctx, KilnError* err) {
//     return kiln_plugin::guard(err, [&] { ... kiln_plugin::Attributes(ctx->attrs).get_float("alpha", 1.f) ... });
//   }
//   static const KilnPluginKernel kCpu = kiln_plugin::cpu_kernel<MyKernel>();
//
//   KILN_PLUGIN_EXPORT int32_t kiln_plugin_register(const KilnPluginHost* host, KilnPluginRegistry* r) {
//     kiln_plugin::set_host(host);
//     ...
//   }
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/plugin.h"

namespace kiln_plugin {

// An error with a KILN_STATUS_* code; guard() turns it into the callback's return value and message.
class Error : public std::runtime_error {
 public:
  Error(int32_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int32_t code() const { return code_; }

 private:
  int32_t code_;
};

// The host table, kept by kiln_plugin_register (set_host) for the attribute getters.
inline const KilnPluginHost*& host_slot() {
  static const KilnPluginHost* host = nullptr;
  return host;
}
inline void set_host(const KilnPluginHost* host) { host_slot() = host; }

// Runs `f` and returns KILN_STATUS_OK, or the code and message of what it threw.
template <class F>
int32_t guard(KilnError* err, F&& f) noexcept {
  try {
    f();
    return KILN_STATUS_OK;
  } catch (const Error& e) {
    return kiln_plugin_error(err, e.code(), "%s", e.what());
  } catch (const std::exception& e) {
    return kiln_plugin_error(err, KILN_STATUS_RUNTIME_ERROR, "%s", e.what());
  } catch (...) {
    return kiln_plugin_error(err, KILN_STATUS_RUNTIME_ERROR, "unknown C++ exception");
  }
}

// A node's attributes by name and type. A missing attribute gives the default; one of another kind
// throws Error(KILN_STATUS_INVALID_ARGUMENT).
class Attributes {
 public:
  explicit Attributes(const KilnAttributes* attrs) : attrs_(attrs) {}

  int64_t get_int(const char* name, int64_t fallback) const {
    int64_t v = fallback;
    check(host()->attr_int(attrs_, name, &v), name, "an int");
    return v;
  }
  float get_float(const char* name, float fallback) const {
    float v = fallback;
    check(host()->attr_float(attrs_, name, &v), name, "a float");
    return v;
  }
  std::string get_string(const char* name, const std::string& fallback) const {
    const char* data = nullptr;
    size_t n = 0;
    return check(host()->attr_string(attrs_, name, &data, &n), name, "a string") ? std::string(data, n) : fallback;
  }
  std::vector<int64_t> get_ints(const char* name, std::vector<int64_t> fallback = {}) const {
    const int64_t* data = nullptr;
    size_t n = 0;
    return check(host()->attr_ints(attrs_, name, &data, &n), name, "ints") ? std::vector<int64_t>(data, data + n) : fallback;
  }
  std::vector<float> get_floats(const char* name, std::vector<float> fallback = {}) const {
    const float* data = nullptr;
    size_t n = 0;
    return check(host()->attr_floats(attrs_, name, &data, &n), name, "floats") ? std::vector<float>(data, data + n) : fallback;
  }

 private:
  static const KilnPluginHost* host() {
    if (!host_slot()) throw Error(KILN_STATUS_RUNTIME_ERROR, "kiln_plugin::set_host was not called in kiln_plugin_register");
    return host_slot();
  }
  // True when the attribute is there; throws when it is of another kind.
  static bool check(int32_t status, const char* name, const char* kind) {
    if (status == KILN_STATUS_WRONG_KIND) throw Error(KILN_STATUS_INVALID_ARGUMENT, std::string("attribute '") + name + "' must be " + kind);
    return status == KILN_STATUS_OK;
  }
  const KilnAttributes* attrs_;
};

// Element count of a tensor's dims.
inline int64_t numel(const int64_t* dims, int32_t rank) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

// The KilnPluginKernel of a kernel class K (see the top of this file): create constructs a K, destroy
// deletes it, reshape and run call its const methods, each under guard().
template <class K>
KilnPluginKernel cpu_kernel(int32_t num_tactics = 0, const char* const* tactic_names = nullptr) {
  KilnPluginKernel k{};
  k.struct_size = sizeof(KilnPluginKernel);
  k.device = KILN_DEVICE_CPU;
  k.num_tactics = num_tactics;
  k.tactic_names = tactic_names;
  k.create = [](void*, const KilnKernelInit* init, void** out, KilnError* err) -> int32_t {
    return guard(err, [&] { *out = new K(Attributes(init->attrs), *init); });
  };
  k.reshape = [](const void* self, KilnReshapeContext* ctx, KilnError* err) -> int32_t {
    return guard(err, [&] { static_cast<const K*>(self)->reshape(*ctx); });
  };
  k.run = [](const void* self, const KilnRunContext* ctx, KilnError* err) -> int32_t {
    return guard(err, [&] { static_cast<const K*>(self)->run(*ctx); });
  };
  k.destroy = [](void* self) { delete static_cast<K*>(self); };
  return k;
}

}  // namespace kiln_plugin
