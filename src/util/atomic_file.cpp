#include "util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "util/file.h"

namespace kiln {
namespace {

// A name for the temporary file beside `path`: the target's name, the process id and random digits,
// so that two writers (or a name planted in advance) never share it.
std::string temporary_name(const std::string& path, std::mt19937_64& rng) {
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".%ld.%016llx.tmp", static_cast<long>(::getpid()),
                static_cast<unsigned long long>(rng()));
  return path + suffix;
}

// 0, or the errno of the write that failed.
int write_all(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

Status write_file_atomically(const std::string& path, std::string_view bytes, const std::string& what) {
  if (path.empty()) return invalid_argument("no file name given for the " + what);
  // A link at `path` is replaced, not followed (the rename below swaps the link itself).
  if (const std::string kind = special_file_kind(path, false); !kind.empty())
    return invalid_argument("cannot write the " + what + " to '" + path + "': it is " + kind +
                            ", not a regular file; give the path of a file to create or replace");
  std::random_device seed;
  std::mt19937_64 rng((static_cast<uint64_t>(seed()) << 32) ^ seed());
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = temporary_name(path, rng);
    // O_EXCL: never an existing file, and (with O_CREAT) never through a symlink, dangling or not;
    // O_NOFOLLOW says so again. The mode is the umask's, as a plain file the user writes.
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0)
    return io_error("cannot write the " + what + " '" + path + "': cannot create a temporary file beside it (" +
                    std::strerror(errno) + ")");
  int e = write_all(fd, bytes);
  if (::close(fd) != 0 && e == 0) e = errno;
  if (e != 0) {
    ::unlink(tmp.c_str());
    return io_error("error writing the " + what + " '" + path + "': " + std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    e = errno;
    ::unlink(tmp.c_str());
    return io_error("cannot replace the " + what + " '" + path + "': " + std::strerror(e));
  }
  return Status::Ok();
}

Status write_output_file(const std::string& path, std::string_view bytes, const std::string& what) {
  if (!is_null_device(path)) return write_file_atomically(path, bytes, what);
  // O_NOFOLLOW: a link put there since the check is not followed; no O_CREAT, so nothing is made.
  const int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return io_error("cannot write the " + what + " to '" + path + "': " + std::strerror(errno));
  int e = write_all(fd, bytes);
  if (::close(fd) != 0 && e == 0) e = errno;
  if (e != 0) return io_error("error writing the " + what + " to '" + path + "': " + std::strerror(e));
  return Status::Ok();
}

}  // namespace kiln
