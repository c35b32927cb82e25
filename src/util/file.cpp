// util/file.cpp — regular files only (see file.h).
#include "util/file.h"

#include <sys/stat.h>

#include <cerrno>

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

}  // namespace kiln
