#include "kiln/tensor.h"

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
  int64_t n = 1;
  for (int64_t d : s) {
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

size_t shape_nbytes(DataType dtype, const Shape& s) {
  size_t n = 1;
  for (int64_t d : s) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return SIZE_MAX;
  }
  const size_t esz = dtype == DataType::kString ? sizeof(std::string) : dtype_size(dtype);
  return __builtin_mul_overflow(n, esz, &n) ? SIZE_MAX : n;
}

namespace {

size_t default_max_tensor_bytes() {
  if (const char* env = std::getenv("KILN_MAX_TENSOR_BYTES")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (end != env && *end == '\0' && v > 0) return static_cast<size_t>(v);
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) return static_cast<size_t>(pages) * static_cast<size_t>(page);
  return size_t{1} << 40;
}

std::atomic<size_t>& max_bytes() {
  static std::atomic<size_t> v{default_max_tensor_bytes()};
  return v;
}

}  // namespace

size_t max_tensor_bytes() { return max_bytes().load(std::memory_order_relaxed); }
void set_max_tensor_bytes(size_t bytes) { max_bytes().store(bytes ? bytes : default_max_tensor_bytes()); }

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
  auto st = std::make_shared<Storage>();
  const size_t n = static_cast<size_t>(shape_numel(shape));
  if (dtype == DataType::kString) {
    auto* strings = new std::string[n ? n : 1];
    st->data = strings;
    st->bytes = n * sizeof(std::string);
    st->release = [](void* p) { delete[] static_cast<std::string*>(p); };
  } else {
    const size_t bytes = n * dtype_size(dtype);
    // 64-byte alignment for vector loads; at least one byte so data() is never null.
    const size_t alloc = ((bytes ? bytes : 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, alloc);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, alloc);
    st->data = p;
    st->bytes = bytes;
    st->release = [](void* q) { std::free(q); };
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
