#include "arbench/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace arbench {

std::optional<std::string> check_writable(const std::string& flag, const std::string& path) {
  auto failure = [&](const std::string& why) {
    return flag + " " + path + ": cannot write the file: " + why;
  };
  if (path.empty()) return flag + ": the file name is empty";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return failure("it is a directory");
  // Try the temporary file that write_atomically will use.
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return failure(std::strerror(errno));
  ::close(fd);
  ::unlink(temporary.c_str());
  return std::nullopt;
}

void write_atomically(const std::string& path, const std::string& content) {
  const std::string temporary = path + ".tmp";
  auto fail = [&](const std::string& what) {
    const std::string why = std::strerror(errno);
    ::unlink(temporary.c_str());
    throw std::runtime_error("cannot write " + path + ": " + what + ": " + why);
  };
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("open " + temporary);
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      fail("write");
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) fail("close");
  if (::rename(temporary.c_str(), path.c_str()) != 0) fail("rename");
}

}  // namespace arbench
