#include "kiln/tensor.h"
#include "ir/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>

namespace kiln {

std::string Device::to_string() const {
  return type == DeviceType::kCPU ? "cpu" : "cuda:" + std::to_string(index);
}

int64_t shape_numel(const Shape& s) {
  // A zero dim makes the count 0 wherever it stands (a product that overflows before it must not win;
  // shape_nbytes agrees, so a size check and an allocation never disagree: fuzz_npy found one that did).
  // One pass: this is Tensor::numel().
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : s) {
    if (d == 0) return 0;
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  return overflow ? std::numeric_limits<int64_t>::max() : n;
}

size_t shape_nbytes(DataType dtype, const Shape& s) {
  size_t n = 1;
  bool overflow = false, zero = false;
  for (int64_t d : s) {
    if (d < 0) return SIZE_MAX;
    if (d == 0) zero = true;
    else overflow = overflow || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n);
  }
  if (zero) return 0;
  const size_t esz = dtype == DataType::kString ? sizeof(std::string) : dtype_size(dtype);
  return overflow || __builtin_mul_overflow(n, esz, &n) ? SIZE_MAX : n;
}

namespace {

// A limit's default: the environment variable when it holds a positive number, else physical memory
// divided by `share`.
size_t default_limit(const char* env_name, size_t share) {
  if (const char* env = std::getenv(env_name)) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (end != env && *end == '\0' && v > 0) return static_cast<size_t>(v);
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) return static_cast<size_t>(pages) * static_cast<size_t>(page) / share;
  return (size_t{1} << 40) / share;
}
// One tensor may take a quarter of the machine (#47: with the whole machine as the bound, a 100-byte
// model whose attributes ask for a huge tensor made the process as large as the machine before the
// allocation failed); everything kiln holds at once, the machine. Both are raised by the setters.
size_t default_max_tensor_bytes() { return default_limit("KILN_MAX_TENSOR_BYTES", 4); }
size_t default_max_memory_bytes() { return default_limit("KILN_MAX_MEMORY_BYTES", 1); }

std::atomic<size_t>& max_bytes() {
  static std::atomic<size_t> v{default_max_tensor_bytes()};
  return v;
}
std::atomic<size_t>& max_memory() {
  static std::atomic<size_t> v{default_max_memory_bytes()};
  return v;
}
std::atomic<size_t>& in_use() {
  static std::atomic<size_t> v{0};
  return v;
}

}  // namespace

size_t max_tensor_bytes() { return max_bytes().load(std::memory_order_relaxed); }
void set_max_tensor_bytes(size_t bytes) { max_bytes().store(bytes ? bytes : default_max_tensor_bytes()); }
size_t max_memory_bytes() { return max_memory().load(std::memory_order_relaxed); }
void set_max_memory_bytes(size_t bytes) { max_memory().store(bytes ? bytes : default_max_memory_bytes()); }
size_t host_memory_in_use() { return in_use().load(std::memory_order_relaxed); }

std::string reserve_host_memory(size_t bytes) {
  const size_t limit = max_memory_bytes();
  size_t cur = in_use().load(std::memory_order_relaxed);
  do {
    if (bytes > limit || cur > limit - bytes)
      return "allocating " + std::to_string(bytes) + " bytes of host memory with " + std::to_string(cur) +
             " in use: over the limit of " + std::to_string(limit) + " (max_memory_bytes)";
  } while (!in_use().compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
  return "";
}

void release_host_memory(size_t bytes) { in_use().fetch_sub(bytes, std::memory_order_relaxed); }

std::shared_ptr<Storage> allocate_host_storage(size_t bytes, std::string* why) {
  if (std::string w = reserve_host_memory(bytes); !w.empty()) {
    *why = std::move(w);
    return nullptr;
  }
  // 64-byte alignment for vector loads; at least one byte so data() is never null. Buffers of 4 MiB
  // and more start on a 2 MiB boundary and ask the kernel for transparent huge pages (in its default
  // "madvise" mode it gives them only on request): a 25 MiB output written for the first time
  // faulted 6,282 times in 4 KiB pages (GPT-2's logits, 20-40 ms of a 150 ms product at 1 thread).
  const size_t alloc = ((bytes ? bytes : 1) + 63) / 64 * 64;
  constexpr size_t kHuge = size_t{2} << 20;
  const bool huge = alloc >= 2 * kHuge;
  void* p = std::aligned_alloc(huge ? kHuge : 64, huge ? (alloc + kHuge - 1) / kHuge * kHuge : alloc);
#ifdef MADV_HUGEPAGE
  if (p && huge) madvise(p, alloc / kHuge * kHuge, MADV_HUGEPAGE);  // advice only: failure changes nothing
#endif
  if (!p) {
    release_host_memory(bytes);
    *why = "out of host memory allocating " + std::to_string(bytes) + " bytes";
    return nullptr;
  }
  auto st = std::make_shared<Storage>();
  st->data = p;
  st->bytes = bytes;
  st->release = [bytes](void* q) {
    std::free(q);
    release_host_memory(bytes);
  };
  return st;
}

std::string check_tensor_size(DataType dtype, const Shape& s) {
  for (int64_t d : s)
    if (d < 0) return std::string(dtype_name(dtype)) + " tensor of shape " + shape_to_string(s) + " has a negative dimension";
  const size_t bytes = shape_nbytes(dtype, s);
  if (bytes == SIZE_MAX)
    return std::string(dtype_name(dtype)) + " tensor of shape " + shape_to_string(s) + " is too large (its size overflows)";
  if (bytes > max_tensor_bytes())
    return std::string(dtype_name(dtype)) + " tensor of shape " + shape_to_string(s) + " needs " + std::to_string(bytes) +
           " bytes, over the limit of " + std::to_string(max_tensor_bytes()) + " (max_tensor_bytes)";
  return "";
}

std::string shape_to_string(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

Storage::~Storage() {
  if (release && data) release(data);
}

size_t Tensor::nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

Device Tensor::device() const { return storage_ ? storage_->device : Device{}; }

Tensor Tensor::empty(DataType dtype, const Shape& shape) {
  if (std::string why = check_tensor_size(dtype, shape); !why.empty()) throw std::length_error(why);
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  std::shared_ptr<Storage> st;
  const size_t n = static_cast<size_t>(shape_numel(shape));
  if (dtype == DataType::kString) {
    const size_t bytes = n * sizeof(std::string);
    if (std::string why = reserve_host_memory(bytes); !why.empty()) throw std::length_error(why);
    st = std::make_shared<Storage>();
    try {
      st->data = new std::string[n ? n : 1];
    } catch (...) {
      release_host_memory(bytes);
      throw;
    }
    st->bytes = bytes;
    st->release = [bytes](void* p) {
      delete[] static_cast<std::string*>(p);
      release_host_memory(bytes);
    };
  } else {
    std::string why;
    st = allocate_host_storage(n * dtype_size(dtype), &why);
    if (!st) throw std::length_error(why);
    std::memset(st->data, 0, ((st->bytes ? st->bytes : 1) + 63) / 64 * 64);
  }
  t.data_ = st->data;
  t.storage_ = std::move(st);
  return t;
}

Tensor Tensor::borrow(DataType dtype, const Shape& shape, void* data, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  auto st = std::make_shared<Storage>();
  st->data = data;
  st->bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  st->device = device;
  t.data_ = data;
  t.storage_ = std::move(st);
  return t;
}

Tensor Tensor::view(std::shared_ptr<Storage> storage, size_t offset, DataType dtype, const Shape& shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.data_ = static_cast<char*>(storage->data) + offset;
  t.storage_ = std::move(storage);
  return t;
}

Tensor Tensor::with_storage(DataType dtype, const Shape& shape, std::shared_ptr<Storage> storage) {
  return view(std::move(storage), 0, dtype, shape);
}

Tensor Tensor::reshaped(const Shape& shape) const {
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(dtype_, shape_);
  if (dtype_ == DataType::kString) {
    for (int64_t i = 0; i < numel(); ++i) t.data<std::string>()[i] = data<std::string>()[i];
  } else if (nbytes()) {
    std::memcpy(t.raw(), raw(), nbytes());
  }
  return t;
}

}  // namespace kiln
