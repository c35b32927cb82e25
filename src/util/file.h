// util/file.h — what kiln accepts as a file to read or write: a regular file.
//
// Opening a FIFO blocks until another process opens its other end (for ever, when none does); a
// character device may never end (/dev/zero) and a directory or a socket cannot be read as a file.
// Every path a user names (a model, its external data, an engine, calibration inputs, caches, an
// output) is checked here before it is opened, so such a path is an error naming what it is.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "kiln/status.h"

namespace kiln {

// What the file at `path` is when it is not a regular file: "a FIFO (named pipe)", "a character
// device", "a block device", "a directory", "a socket"; "" for a regular file or when nothing is there
// (or it cannot be examined: opening it then reports why). Links are followed, unless `follow_links`
// is false: then a link itself is "" (what replaces a file, as util/atomic_file.h does, replaces it).
std::string special_file_kind(const std::string& path, bool follow_links = true);

// Ok for a regular file; kNotFound when nothing is at `path`; kIoError naming what it is otherwise.
// `what` names the file's role in the message ("model", "external data file").
Status check_readable_file(const std::string& path, const std::string& what);

// Ok when `path` is a regular file or does not exist yet (it will be created); kIoError naming what
// it is otherwise (writing into a FIFO would wait for a reader).
Status check_writable_file(const std::string& path, const std::string& what);

// Whether `path` itself (not a link to it) is the null device (/dev/null, or another node of the
// same device): an output a user may name to discard what kiln writes (write_output_file in
// util/atomic_file.h). Other devices (/dev/zero, a terminal, /dev/mem) stay refused.
bool is_null_device(const std::string& path);

// A regular file mapped read-only (private): its bytes are read from the page cache as they are
// touched, never copied into the process first, so a check that stops early touches almost nothing.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr, o.size_ = 0; }
  MappedFile& operator=(MappedFile&& o) noexcept;
  ~MappedFile();
  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }

  // Maps the regular file at `path` (check_readable_file's errors first; `what` names its role).
  // An empty file maps to no bytes.
  static Expected<MappedFile> map(const std::string& path, const std::string& what);

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kiln
