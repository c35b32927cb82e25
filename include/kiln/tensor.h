// kiln/tensor.h — an n-dimensional array on a device.
//
// A Tensor is a cheap handle: copies share the same storage (like a shared_ptr). Storage is freed
// when the last handle goes. Tensors are not synchronized: concurrent writes to one storage from
// several threads are the caller's business; concurrent reads are fine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln {

enum class DeviceType : int32_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  // Written out (not `= default`, which is C++20): the public headers are C++17.
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  std::string to_string() const;
};

using Shape = std::vector<int64_t>;
// Element count of a shape; 0 when any dim is 0, else INT64_MAX when the product overflows (never
// wraps), so a hostile shape cannot turn into a small size. Negative dims are the caller's to reject (the result is then < 0
// or meaningless).
int64_t shape_numel(const Shape& s);
// Bytes of a dense tensor of this shape; SIZE_MAX when a dim is negative or the size overflows.
size_t shape_nbytes(DataType dtype, const Shape& s);

// The largest tensor kiln creates, in bytes (default: a quarter of the machine's physical memory;
// settable, also through KILN_MAX_TENSOR_BYTES). A larger request fails with an error naming the dtype, shape and
// size, never a crash or an allocation that exhausts the machine.
size_t max_tensor_bytes();
void set_max_tensor_bytes(size_t bytes);
// The most host memory kiln's tensors, arenas and workspaces may hold at once, across the process
// (default: the machine's physical memory; settable, also through KILN_MAX_MEMORY_BYTES). An
// allocation past it fails with an error naming the request, the bytes in use and the limit; a build
// or run that meets it stops with that error, never an abort. 0 restores the default.
size_t max_memory_bytes();
void set_max_memory_bytes(size_t bytes);
size_t host_memory_in_use();  // bytes kiln holds now (what max_memory_bytes bounds)
// "" when a tensor of this dtype and shape may be created, else why not.
std::string check_tensor_size(DataType dtype, const Shape& s);
std::string shape_to_string(const Shape& s);

// The bytes behind one or more tensors. `release` frees them (nullptr when borrowed).
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  std::function<void(void*)> release;
  ~Storage();
};

class Tensor {
 public:
  Tensor() = default;
  // A new CPU tensor, zero-initialized (strings empty). Throws std::length_error when the size fails
  // check_tensor_size (callers run inside the kernel/executor guards, which turn it into a Status).
  static Tensor empty(DataType dtype, const Shape& shape);
  // A tensor over memory the caller owns and keeps alive (no copy).
  static Tensor borrow(DataType dtype, const Shape& shape, void* data, Device device = {});
  // A tensor over a sub-range of an existing storage (used by arenas).
  static Tensor view(std::shared_ptr<Storage> storage, size_t offset, DataType dtype, const Shape& shape);
  // A new tensor on `device` whose storage comes from `alloc` (must return bytes, freed by `release`).
  static Tensor with_storage(DataType dtype, const Shape& shape, std::shared_ptr<Storage> storage);

  bool defined() const { return storage_ != nullptr || dtype_ != DataType::kUndefined; }
  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const;
  Device device() const;

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T> T* data() { return static_cast<T*>(data_); }
  template <typename T> const T* data() const { return static_cast<const T*>(data_); }

  // Same storage, new shape (numel must match; checked by the caller).
  Tensor reshaped(const Shape& shape) const;
  // A deep copy on the CPU (only for CPU tensors).
  Tensor clone() const;

  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  DataType dtype_ = DataType::kUndefined;
  Shape shape_;
  void* data_ = nullptr;
  std::shared_ptr<Storage> storage_;
};

}  // namespace kiln
