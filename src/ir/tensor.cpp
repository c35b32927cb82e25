#include "kiln/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace kiln {

std::string Device::to_string() const {
  return type == DeviceType::kCPU ? "cpu" : "cuda:" + std::to_string(index);
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
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
