// util/file.cpp — regular files only (see file.h).
#include "util/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kiln {

std::string special_file_kind(const std::string& path, bool follow_links) {
  struct stat st {};
  // stat() and lstat() never open the file, so they do not wait on a FIFO.
  if ((follow_links ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) return "";
  if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) return "";
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "a special file";
}

Status check_readable_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT)
    return not_found("cannot read " + what + " '" + path + "': file not found");
  const std::string kind = special_file_kind(path);
  if (!kind.empty()) return io_error("cannot read " + what + " '" + path + "': it is " + kind + ", not a regular file");
  return Status::Ok();
}

Status check_writable_file(const std::string& path, const std::string& what) {
  const std::string kind = special_file_kind(path);
  if (!kind.empty())
    return io_error("cannot write " + what + " '" + path + "': it is " + kind + ", not a regular file (give a file path)");
  return Status::Ok();
}

bool is_null_device(const std::string& path) {
  struct stat st {}, null {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) && ::stat("/dev/null", &null) == 0 &&
         S_ISCHR(null.st_mode) && st.st_rdev == null.st_rdev;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    data_ = o.data_, size_ = o.size_;
    o.data_ = nullptr, o.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

Expected<MappedFile> MappedFile::map(const std::string& path, const std::string& what) {
  KILN_RETURN_IF_ERROR(check_readable_file(path, what));
  // O_NONBLOCK: a FIFO put in place after the check above would otherwise block the open; fstat
  // then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return io_error("cannot read " + what + " '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error("cannot read " + what + " '" + path + "': not a regular file");
  }
  MappedFile m;
  if (st.st_size > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return io_error("cannot read " + what + " '" + path + "': cannot map it (" + std::strerror(err) + ")");
    }
    m.data_ = p;
    m.size_ = static_cast<size_t>(st.st_size);
  }
  ::close(fd);
  return m;
}

}  // namespace kiln
