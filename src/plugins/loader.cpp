// plugins/loader.cpp — loading plugin libraries (include/kiln/plugin.h): finding the file, checking its
// ABI version, taking its op declarations, and the records engine files keep of them.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>

#include "backends/backend.h"
#include "ir/graph.h"
#include "onnx/sha256.h"
#include "ops/op_table.h"
#include "plugins/plugins.h"
#include "util/checksum.h"
#include "util/log.h"

namespace kiln::plugins {

namespace fs = std::filesystem;

namespace {

// The most inputs or outputs a plugin op declares (run() passes them on the stack).
constexpr int32_t kMaxArity = 64;
constexpr int32_t kMaxTactics = 64;

std::string normalize_domain(const char* d) {
  const std::string s = d ? d : "";
  return s == "ai.onnx" ? "" : s;
}

std::string qualified(const std::string& domain, const std::string& op) { return (domain.empty() ? "" : domain + ".") + op; }

// One loaded library.
struct Library {
  void* handle = nullptr;
  PluginInfo info;
  std::string content_hash;  // OpRecord::library_hash
  std::string source;        // ONNX Runtime libraries: the file kiln's private copy was made from
};

// The hash of a file's contents, "" when it cannot be read.
std::string file_content_hash(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return "";
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return onnx::sha256_hex(bytes.data(), bytes.size()).substr(0, 32);
}

// The hash of the file the dynamic loader opened for `symbol` (`fallback` when it cannot say).
std::string library_content_hash(void* symbol, const std::string& fallback) {
  Dl_info where{};
  return file_content_hash(dladdr(symbol, &where) && where.dli_fname ? where.dli_fname : fallback);
}

// Rebinds the GNU-unique dynamic symbols of an ELF64 little-endian image to plain global ones; the count,
// or -1 when the image is not one kiln can read. C++ compilers make function-local statics of inline
// functions and templates "unique": the dynamic loader keeps one per process, across copies of a library.
int unshare_unique_symbols(std::string& image) {
  Elf64_Ehdr eh;
  if (image.size() < sizeof(eh)) return -1;
  std::memcpy(&eh, image.data(), sizeof(eh));
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
      eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > image.size() ||
      eh.e_shnum > (image.size() - eh.e_shoff) / sizeof(Elf64_Shdr))
    return -1;
  int n = 0;
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, image.data() + eh.e_shoff + i * sizeof(sh), sizeof(sh));
    if (sh.sh_type != SHT_DYNSYM) continue;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_offset > image.size() || sh.sh_size > image.size() - sh.sh_offset) return -1;
    for (size_t off = sh.sh_offset; off + sizeof(Elf64_Sym) <= sh.sh_offset + sh.sh_size; off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, image.data() + off, sizeof(sym));
      if (ELF64_ST_BIND(sym.st_info) != STB_GNU_UNIQUE) continue;
      sym.st_info = ELF64_ST_INFO(STB_GLOBAL, ELF64_ST_TYPE(sym.st_info));
      std::memcpy(image.data() + off, &sym, sizeof(sym));
      ++n;
    }
  }
  return n;
}

// kiln's own instance of an ONNX Runtime custom-op library, loaded from a copy of the file (removed once
// mapped), or null when no copy can be made. Such a library may keep the OrtApi table it is first given
// for later calls (onnxruntime-extensions does, in a function-local static, for some ops:
// StringECMARegexReplace crashed in kiln after onnxruntime had registered the same library), so kiln
// never shares an instance with onnxruntime in the same process, in either order. The copy's unique
// symbols are made plain globals (the loader would otherwise share those statics with the original);
// with RTLD_LOCAL, the copy then resolves its own symbols to itself.
void* private_instance(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (unshare_unique_symbols(image) < 0) return nullptr;
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec);
  if (ec) return nullptr;
  std::string dir = (tmp / "kiln-ort-XXXXXX").string();
  if (!mkdtemp(dir.data())) return nullptr;
  const fs::path copy = fs::path(dir) / fs::path(path).filename();
  void* handle = nullptr;
  {
    std::ofstream out(copy, std::ios::binary);
    out.write(image.data(), static_cast<std::streamsize>(image.size()));
    out.close();
    if (out) handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  fs::remove_all(dir, ec);
  return handle;
}

// What kiln_plugin_register fills (the KilnPluginRegistry handle points to one).
struct Pending {
  std::string name, version, error;
  std::vector<const KilnPluginOp*> ops;
};

struct Registry {
  std::mutex mu;
  std::deque<Library> libraries;
  std::deque<PluginOp> ops;  // stable addresses: the op table and the kernel rows point here
  std::map<std::pair<std::string, std::string>, const PluginOp*> by_name;
  std::atomic<bool> any{false};  // an op was registered: lookups take the lock only from then on
};

Registry& registry() {
  static Registry r;
  return r;
}

// ---- The host table's attribute getters (the handle is the node)
const ir::Attribute* attr_of(const KilnAttributes* attrs, const char* name, ir::Attribute::Kind kind, int32_t* status) {
  const ir::Attribute* a = attrs && name ? reinterpret_cast<const ir::Node*>(attrs)->attr(name) : nullptr;
  *status = !a ? KILN_STATUS_NOT_FOUND : a->kind != kind ? KILN_STATUS_WRONG_KIND : KILN_STATUS_OK;
  return *status == KILN_STATUS_OK ? a : nullptr;
}

int32_t get_int(const KilnAttributes* attrs, const char* name, int64_t* value) {
  int32_t st;
  if (const ir::Attribute* a = attr_of(attrs, name, ir::Attribute::Kind::kInt, &st)) *value = a->i;
  return st;
}
int32_t get_float(const KilnAttributes* attrs, const char* name, float* value) {
  int32_t st;
  if (const ir::Attribute* a = attr_of(attrs, name, ir::Attribute::Kind::kFloat, &st)) *value = a->f;
  return st;
}
int32_t get_string(const KilnAttributes* attrs, const char* name, const char** data, size_t* length) {
  int32_t st;
  if (const ir::Attribute* a = attr_of(attrs, name, ir::Attribute::Kind::kString, &st)) {
    *data = a->s.c_str();
    *length = a->s.size();
  }
  return st;
}
int32_t get_ints(const KilnAttributes* attrs, const char* name, const int64_t** values, size_t* count) {
  int32_t st;
  if (const ir::Attribute* a = attr_of(attrs, name, ir::Attribute::Kind::kInts, &st)) {
    *values = a->ints.data();
    *count = a->ints.size();
  }
  return st;
}
int32_t get_floats(const KilnAttributes* attrs, const char* name, const float** values, size_t* count) {
  int32_t st;
  if (const ir::Attribute* a = attr_of(attrs, name, ir::Attribute::Kind::kFloats, &st)) {
    *values = a->floats.data();
    *count = a->floats.size();
  }
  return st;
}
int32_t get_tensor(const KilnAttributes* attrs, const char* name, KilnTensor* value) {
  int32_t st;
  if (const ir::Attribute* a = attr_of(attrs, name, ir::Attribute::Kind::kTensor, &st)) {
    if (!plugin_dtype_ok(static_cast<int32_t>(a->t.dtype()))) return KILN_STATUS_WRONG_KIND;
    value->dtype = static_cast<int32_t>(a->t.dtype());
    value->rank = static_cast<int32_t>(a->t.shape().size());
    value->dims = a->t.shape().data();
    value->data = a->t.raw();
  }
  return st;
}

void set_info(KilnPluginRegistry* r, const char* name, const char* version) {
  auto* p = reinterpret_cast<Pending*>(r);
  p->name = name ? name : "";
  p->version = version ? version : "";
}
int32_t add_op(KilnPluginRegistry* r, const KilnPluginOp* op) {
  reinterpret_cast<Pending*>(r)->ops.push_back(op);
  return KILN_STATUS_OK;
}
void set_error(KilnPluginRegistry* r, const char* message) { reinterpret_cast<Pending*>(r)->error = message ? message : ""; }

// Copies the first `size` bytes of a plugin's struct (its struct_size) and zeroes the rest: fields a
// newer plugin appended are not read, fields an older one lacks read as zero/NULL.
template <typename T>
T copy_struct(const T* src) {
  T out;
  std::memset(&out, 0, sizeof(T));
  if (!src) return out;
  std::memcpy(&out, src, std::min(sizeof(T), src->struct_size));
  return out;
}

const char* attr_kind_name(int32_t k) {
  switch (k) {
    case KILN_ATTR_INT: return "int";
    case KILN_ATTR_FLOAT: return "float";
    case KILN_ATTR_STRING: return "string";
    case KILN_ATTR_INTS: return "ints";
    case KILN_ATTR_FLOATS: return "floats";
    case KILN_ATTR_TENSOR: return "tensor";
    default: return nullptr;
  }
}

// The op's declaration as text (what its ABI hash covers): identity, counts, attributes, dtypes, kernels
// and tactics. A plugin that changes any of these changes the hash, and engines built with the old one
// are refused rather than misread.
std::string describe_op(const PluginOp& op) {
  std::string d = "abi " + std::to_string(KILN_PLUGIN_ABI_VERSION) + "; op " + qualified(op.domain, op.op_type) + " since " +
                  std::to_string(op.def.since_version) + "; inputs " + std::to_string(op.def.min_inputs) + "-" +
                  std::to_string(op.def.max_inputs) + "; outputs " + std::to_string(op.def.min_outputs) + "-" +
                  std::to_string(op.def.max_outputs) + "; attrs";
  for (int32_t i = 0; i < op.def.num_attrs; ++i)
    d += std::string(" ") + op.def.attrs[i].name + ":" + attr_kind_name(op.def.attrs[i].kind) + (op.def.attrs[i].required ? "!" : "");
  d += "; dtypes";
  for (int32_t i = 0; i < op.def.num_dtypes; ++i) d += " " + std::to_string(op.def.dtypes[i]);
  d += "; cpu tactics";
  for (const std::string& t : op.tactics) d += " " + t;
  if (op.def.cuda) d += "; cuda";
  return d;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Checks one op declaration and copies it into `out`; "" when valid, else what is wrong.
std::string take_op(const KilnPluginOp* src, PluginOp& out) {
  if (!src) return "add_op was given NULL";
  if (src->struct_size < offsetof(KilnPluginOp, cuda)) return "its KilnPluginOp.struct_size (" + std::to_string(src->struct_size) + ") is too small";
  out.def = copy_struct(src);
  const KilnPluginOp& d = out.def;
  if (!d.op_type || !*d.op_type) return "an op has no op_type";
  out.domain = normalize_domain(d.domain);
  out.op_type = d.op_type;
  const std::string who = "op " + qualified(out.domain, out.op_type) + ": ";
  if (d.since_version < 1) return who + "since_version must be >= 1, got " + std::to_string(d.since_version);
  if (d.min_inputs < 0 || d.max_inputs < d.min_inputs || d.max_inputs > kMaxArity)
    return who + "inputs must satisfy 0 <= min_inputs <= max_inputs <= " + std::to_string(kMaxArity);
  if (d.min_outputs < 1 || d.max_outputs < d.min_outputs || d.max_outputs > kMaxArity)
    return who + "outputs must satisfy 1 <= min_outputs <= max_outputs <= " + std::to_string(kMaxArity);
  if (d.num_attrs < 0 || (d.num_attrs > 0 && !d.attrs)) return who + "num_attrs without an attrs list";
  for (int32_t i = 0; i < d.num_attrs; ++i) {
    if (!d.attrs[i].name || !*d.attrs[i].name) return who + "attribute " + std::to_string(i) + " has no name";
    if (!attr_kind_name(d.attrs[i].kind))
      return who + "attribute '" + d.attrs[i].name + "' has an unknown kind " + std::to_string(d.attrs[i].kind);
  }
  if (d.num_dtypes < 0 || (d.num_dtypes > 0 && !d.dtypes)) return who + "num_dtypes without a dtypes list";
  for (int32_t i = 0; i < d.num_dtypes; ++i)
    if (!plugin_dtype_ok(d.dtypes[i])) return who + "dtype code " + std::to_string(d.dtypes[i]) + " is not one the ABI passes";
  if (!d.infer) return who + "it has no infer (shape function)";
  if (!d.cpu) return who + "it has no CPU kernel (required)";
  if (d.cpu->struct_size < offsetof(KilnPluginKernel, destroy)) return who + "its CPU KilnPluginKernel.struct_size is too small";
  out.cpu = copy_struct(d.cpu);
  if (out.cpu.device != KILN_DEVICE_CPU) return who + "its cpu kernel says device " + std::to_string(out.cpu.device);
  if (!out.cpu.create || !out.cpu.reshape || !out.cpu.run) return who + "its CPU kernel lacks create, reshape or run";
  if (out.cpu.num_tactics < 0 || out.cpu.num_tactics > kMaxTactics)
    return who + "num_tactics must be 0 to " + std::to_string(kMaxTactics);
  if (d.cuda) {  // checked now, so a plugin learns of a bad CUDA declaration before kiln runs it
    if (d.cuda->struct_size < offsetof(KilnPluginKernel, destroy)) return who + "its CUDA KilnPluginKernel.struct_size is too small";
    const KilnPluginKernel cuda = copy_struct(d.cuda);
    if (cuda.device != KILN_DEVICE_CUDA) return who + "its cuda kernel says device " + std::to_string(cuda.device);
    if (!cuda.create || !cuda.reshape || !cuda.run) return who + "its CUDA kernel lacks create, reshape or run";
  }
  if (out.cpu.num_tactics >= 2) {
    std::set<std::string> seen;
    for (int32_t i = 0; i < out.cpu.num_tactics; ++i) {
      const char* n = out.cpu.tactic_names ? out.cpu.tactic_names[i] : nullptr;
      std::string name = n && *n ? n : "tactic" + std::to_string(i);
      if (!seen.insert(name).second) return who + "tactic name '" + name + "' is used twice";
      out.tactics.push_back(std::move(name));
    }
  }
  return "";
}

// A file name found in KILN_PLUGIN_PATH's folders (':'-separated) for a bare name: the name itself,
// lib<name>.so, <name>.so. Empty when none holds it (the dynamic loader's own search then applies).
std::string search_plugin_path(const std::string& name, std::string* searched) {
  const char* env = std::getenv("KILN_PLUGIN_PATH");
  if (!env || !*env) return "";
  const std::string list = env;
  size_t b = 0;
  while (b <= list.size()) {
    size_t e = list.find(':', b);
    if (e == std::string::npos) e = list.size();
    const std::string dir = list.substr(b, e - b);
    b = e + 1;
    if (dir.empty()) continue;
    *searched += (searched->empty() ? "" : ", ") + dir;
    for (const std::string& file : {name, "lib" + name + ".so", name + ".so"}) {
      std::error_code ec;
      const fs::path p = fs::path(dir) / file;
      if (fs::is_regular_file(p, ec)) return p.string();
    }
  }
  return "";
}

// Why `handle` has no kiln entry point (an ONNX Runtime custom-op library has another path).
Status no_entry_point(const std::string& path) {
  return invalid_argument("'" + path + "' is not a kiln plugin: it exports no kiln_plugin_abi_version/kiln_plugin_register "
                          "(include/kiln/plugin.h), nor RegisterCustomOps (an ONNX Runtime custom-op library)");
}

// Whether kiln has (domain, op) without plugins: in its op table or as a kernel row.
bool built_in(const std::string& domain, const std::string& op) {
  if (const ops::OpDef* d = ops::find_op(domain, op); d && d->how != "plugin") return true;
  for (const KernelDef& k : cpu_backend().kernels().all())
    if (k.op == op && k.domain == domain && k.name.rfind("plugin.", 0) != 0) return true;
  return false;
}

// Registers the library's ops (all or none) under the registry lock.
Status commit_ops(Registry& r, Library& lib, std::vector<PluginOp> taken, bool allow_override) {
  std::vector<PluginOp> ops;
  std::set<std::pair<std::string, std::string>> seen;
  for (PluginOp& op : taken) {
    const auto key = std::make_pair(op.domain, op.op_type);
    if (!seen.insert(key).second)
      return invalid_argument("plugin '" + lib.info.library + "' declares op " + qualified(op.domain, op.op_type) + " twice");
    if (auto it = r.by_name.find(key); it != r.by_name.end())
      return invalid_argument("plugin '" + lib.info.library + "' declares op " + qualified(op.domain, op.op_type) +
                              ", which plugin '" + it->second->record.library + "' already provides");
    op.overrides = built_in(op.domain, op.op_type);
    if (op.overrides && !allow_override)
      return invalid_argument("plugin '" + lib.info.library + "' declares op " + qualified(op.domain, op.op_type) +
                              ", which is built into kiln; load it with override allowed to replace kiln's op "
                              "(kiln --plugin-override, BuildOptions::plugin_override, kiln.load_plugin(path, override=True))");
    op.record = {op.domain, op.op_type, lib.info.library, lib.info.name, lib.info.version, "", lib.content_hash};
    const std::string described = op.ort ? describe_ort_op(op) : describe_op(op);
    op.record.abi_hash = hex64(checksum64(described.data(), described.size()));
    op.label = "plugin '" + lib.info.name + "' " + lib.info.version + " (" + lib.info.library + "), op " +
               qualified(op.domain, op.op_type);
    ops.push_back(std::move(op));
  }
  Backend& cpu = cpu_backend();
  for (PluginOp& op : ops) {
    r.ops.push_back(std::move(op));
    const PluginOp& kept = r.ops.back();
    r.by_name[{kept.domain, kept.op_type}] = &kept;
    r.any = true;
    add_op_declaration(kept);
    KILN_RETURN_IF_ERROR(cpu.add_kernel(cpu_kernel_row(kept)));
    lib.info.ops.push_back(qualified(kept.domain, kept.op_type));
    if (kept.overrides) log(LogLevel::kInfo, kept.label + " overrides kiln's built-in op");
    if (kept.def.cuda) log(LogLevel::kInfo, kept.label + ": its CUDA kernel is not used yet (plugin ops run on the CPU)");
  }
  return Status::Ok();
}

// Checks a kiln plugin's declarations and registers them.
Status commit(Registry& r, Library& lib, const Pending& pending, bool allow_override) {
  std::vector<PluginOp> ops;
  for (const KilnPluginOp* src : pending.ops) {
    PluginOp op;
    if (std::string why = take_op(src, op); !why.empty())
      return invalid_argument("plugin '" + lib.info.library + "': " + why);
    ops.push_back(std::move(op));
  }
  return commit_ops(r, lib, std::move(ops), allow_override);
}

}  // namespace

bool plugin_dtype_ok(int32_t code) {
  switch (code) {
    case KILN_DTYPE_FLOAT32: case KILN_DTYPE_UINT8: case KILN_DTYPE_INT8: case KILN_DTYPE_UINT16:
    case KILN_DTYPE_INT16: case KILN_DTYPE_INT32: case KILN_DTYPE_INT64: case KILN_DTYPE_BOOL:
    case KILN_DTYPE_FLOAT16: case KILN_DTYPE_FLOAT64: case KILN_DTYPE_UINT32: case KILN_DTYPE_UINT64:
    case KILN_DTYPE_BFLOAT16: return true;
    default: return false;
  }
}

const KilnPluginHost& host_table() {
  static const KilnPluginHost host = [] {
    KilnPluginHost h;
    std::memset(&h, 0, sizeof(h));
    h.struct_size = sizeof(KilnPluginHost);
    h.abi_version = KILN_PLUGIN_ABI_VERSION;
    h.kiln_version = version();
    h.set_info = set_info;
    h.add_op = add_op;
    h.set_error = set_error;
    h.attr_int = get_int;
    h.attr_float = get_float;
    h.attr_string = get_string;
    h.attr_ints = get_ints;
    h.attr_floats = get_floats;
    h.attr_tensor = get_tensor;
    return h;
  }();
  return host;
}

// An ONNX Runtime custom-op library (plugins/ort_ops.cpp): RegisterCustomOps through kiln's shim of
// ORT's C API. The plugin is named after the file; engines tell builds apart by the file's hash.
static Expected<PluginInfo> load_ort(Registry& r, void* handle, const std::string& path, const std::string& source,
                                     bool allow_override) {
  Library lib;
  lib.info.path = path;
  lib.info.library = fs::path(path).filename().string();
  lib.info.name = lib.info.library;
  lib.info.version = "onnxruntime-custom-ops";
  lib.source = source;
  lib.content_hash = file_content_hash(source);
  if (void* own = private_instance(source)) {
    dlclose(handle);
    handle = own;
  } else {
    log(LogLevel::kWarning, "ONNX Runtime custom-op library " + path + ": no private copy could be made (temporary folder); "
                            "kiln uses the instance it has, which onnxruntime must not use in this process");
  }
  lib.handle = handle;
  // Stays loaded from here on, refused or not (its registration ran).
  auto ops = register_ort_library(handle, lib.info.library);
  if (!ops.ok()) return ops.status();
  if (ops->empty()) return invalid_argument("ONNX Runtime custom-op library '" + path + "' registered no CPU op");
  // Such a library brings many ops: one that kiln has built in is left to kiln unless overrides are
  // allowed, rather than refusing the library.
  std::vector<PluginOp> taken;
  for (PluginOp& op : *ops) {
    if (!allow_override && built_in(op.domain, op.op_type)) {
      log(LogLevel::kInfo, "ONNX Runtime custom-op library " + lib.info.library + ": op " + qualified(op.domain, op.op_type) +
                               " is built into kiln; kiln's is used (load with override allowed to use the library's)");
      continue;
    }
    taken.push_back(std::move(op));
  }
  KILN_RETURN_IF_ERROR(commit_ops(r, lib, std::move(taken), allow_override));
  r.libraries.push_back(lib);
  log(LogLevel::kInfo, "loaded ONNX Runtime custom-op library " + path + ": " + std::to_string(lib.info.ops.size()) + " op(s)");
  return lib.info;
}

Expected<PluginInfo> load(const std::string& library, bool allow_override) {
  if (library.empty()) return invalid_argument("a plugin library path is empty");
  std::string path = library, searched;
  const bool bare = library.find('/') == std::string::npos;
  if (bare)
    if (std::string found = search_plugin_path(library, &searched); !found.empty()) path = found;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return not_found("cannot load plugin '" + library + "': " + (why ? why : "dlopen failed") +
                     (bare ? " (searched KILN_PLUGIN_PATH" + (searched.empty() ? std::string(": unset") : ": " + searched) +
                                 ", then the dynamic loader's path)"
                           : std::string()));
  }
  // The file the dynamic loader opened (a bare name may have been found on its search path).
  std::string opened = path;
  if (struct link_map* lm = nullptr; dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name) opened = lm->l_name;
  std::error_code canon_ec;
  const std::string source = fs::weakly_canonical(fs::path(opened), canon_ec).string();
  for (const Library& lib : r.libraries)
    if (lib.handle == handle || (!lib.source.empty() && lib.source == source)) {
      dlclose(handle);  // the first load's reference keeps it
      return lib.info;
    }
  auto abi = reinterpret_cast<KilnPluginAbiVersionFn>(dlsym(handle, "kiln_plugin_abi_version"));
  auto reg = reinterpret_cast<KilnPluginRegisterFn>(dlsym(handle, "kiln_plugin_register"));
  if ((!abi || !reg) && is_ort_library(handle)) return load_ort(r, handle, path, source.empty() ? path : source, allow_override);
  if (!abi || !reg) {
    Status st = no_entry_point(path);
    dlclose(handle);
    return st;
  }
  const uint32_t found = abi();
  if (found != KILN_PLUGIN_ABI_VERSION) {
    dlclose(handle);
    return Status(StatusCode::kEngineMismatch,
                  "plugin '" + path + "' was built for kiln plugin ABI version " + std::to_string(found) +
                      ", this kiln expects version " + std::to_string(KILN_PLUGIN_ABI_VERSION) +
                      ": rebuild it against this kiln's include/kiln/plugin.h");
  }
  Library lib;
  lib.handle = handle;
  lib.info.path = path;
  lib.info.library = fs::path(path).filename().string();
  lib.content_hash = library_content_hash(reinterpret_cast<void*>(reg), path);
  Pending pending;
  const int32_t rc = reg(&host_table(), reinterpret_cast<KilnPluginRegistry*>(&pending));
  // The library stays loaded from here on, even when it is refused: its registration ran, and it may
  // have handed out pointers (atexit handlers, threads) that must not dangle.
  if (rc != KILN_STATUS_OK)
    return runtime_error("plugin '" + path + "': kiln_plugin_register failed (status " + std::to_string(rc) + ")" +
                         (pending.error.empty() ? std::string() : ": " + pending.error));
  lib.info.name = pending.name.empty() ? lib.info.library : pending.name;
  lib.info.version = pending.version.empty() ? "0" : pending.version;
  if (pending.ops.empty()) return invalid_argument("plugin '" + path + "' registered no op");
  KILN_RETURN_IF_ERROR(commit(r, lib, pending, allow_override));
  r.libraries.push_back(lib);
  log(LogLevel::kInfo, "loaded plugin '" + lib.info.name + "' " + lib.info.version + " from " + path + ": " +
                           std::to_string(lib.info.ops.size()) + " op(s)");
  return lib.info;
}

std::vector<PluginInfo> loaded() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<PluginInfo> out;
  for (const Library& lib : r.libraries) out.push_back(lib.info);
  return out;
}

const PluginOp* find(const std::string& domain, const std::string& op_type) {
  Registry& r = registry();
  if (!r.any) return nullptr;  // the common case: no plugin, no lock
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_name.find({domain == "ai.onnx" ? "" : domain, op_type});
  return it == r.by_name.end() ? nullptr : it->second;
}

static void collect(const ir::Graph& g, std::map<std::pair<std::string, std::string>, OpRecord>& out) {
  for (const ir::Node* n : g.nodes()) {
    if (const PluginOp* op = find(n->domain, n->op_type)) out.emplace(std::make_pair(op->domain, op->op_type), op->record);
    for (const auto& [name, a] : n->attrs) {
      if (a.g) collect(*a.g, out);
      for (const auto& sub : a.graphs) collect(*sub, out);
    }
  }
}

std::vector<OpRecord> records_for(const ir::Graph& graph) {
  std::map<std::pair<std::string, std::string>, OpRecord> found;
  collect(graph, found);
  std::vector<OpRecord> out;
  for (auto& [k, rec] : found) out.push_back(std::move(rec));
  return out;
}

std::vector<std::string> overridden_ops_in(const ir::Graph& graph) {
  std::vector<std::string> out;
  for (const OpRecord& r : records_for(graph))
    if (const PluginOp* op = find(r.domain, r.op_type); op && op->overrides) out.push_back(qualified(r.domain, r.op_type));
  return out;
}

Status check_records(const std::vector<OpRecord>& records) {
  for (const OpRecord& want : records) {
    const std::string op = qualified(want.domain, want.op_type);
    const std::string expected = "library '" + want.library + "' (plugin '" + want.plugin + "' " + want.version +
                                 ", declaration hash " + want.abi_hash + ")";
    const PluginOp* have = find(want.domain, want.op_type);
    if (!have)
      return Status(StatusCode::kEngineMismatch,
                    "the engine runs op " + op + " from plugin " + expected + ", which is not loaded: load it first (kiln --plugin " +
                        want.library + ", kiln::load_plugin, or SessionOptions.register_custom_ops_library in Python)");
    const OpRecord& got = have->record;
    if (!want.library_hash.empty() && got.library == want.library && got.version == want.version &&
        got.abi_hash == want.abi_hash && got.library_hash != want.library_hash)
      return Status(StatusCode::kEngineMismatch,
                    "the engine runs op " + op + " from plugin " + expected + ", file contents " + want.library_hash +
                        ", but the loaded '" + have->record.library + "' is another build of it (contents " +
                        got.library_hash + "): its kernels may compute otherwise; load the build the engine was made "
                        "with, or rebuild the engine with this one");
    if (got.library != want.library || got.version != want.version || got.abi_hash != want.abi_hash)
      return Status(StatusCode::kEngineMismatch,
                    "the engine runs op " + op + " from plugin " + expected + ", but the loaded one is library '" + got.library +
                        "' (plugin '" + got.plugin + "' " + got.version + ", declaration hash " + got.abi_hash +
                        "): load the plugin the engine was built with, or rebuild the engine with this one");
  }
  return Status::Ok();
}

}  // namespace kiln::plugins

namespace kiln {

Expected<PluginInfo> load_plugin(const std::string& library, bool allow_override) {
  return plugins::load(library, allow_override);
}
std::vector<PluginInfo> loaded_plugins() { return plugins::loaded(); }

}  // namespace kiln
