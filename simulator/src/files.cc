#include "files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sim {

namespace {
const char* kind_of(mode_t m) {
  return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a fifo" : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "a special file";
}

int open_regular_fd(const std::string& path, uint64_t* size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw SimError(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw SimError(path + ": cannot open: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw SimError(path + ": is " + kind_of(st.st_mode) + ", not a regular file");
  }
  if (size) *size = uint64_t(st.st_size);
  return fd;
}
}  // namespace

FILE* open_regular(const std::string& path, uint64_t* size) {
  int fd = open_regular_fd(path, size);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  FILE* f = fdopen(fd, "rb");
  if (!f) {
    int e = errno;
    ::close(fd);
    throw SimError(path + ": cannot open: " + std::strerror(e));
  }
  return f;
}

void refuse_irregular(const std::string& path, const std::string& what) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw SimError(path + ": " + what + ": is " + kind_of(st.st_mode) + ", not a regular file");
}

FILE* open_output(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0666);
  if (fd < 0) {
    if (errno == ENXIO) throw SimError(path + ": cannot write: a fifo with no reader");
    throw SimError(path + ": cannot write: " + std::strerror(errno));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  FILE* f = fdopen(fd, "wb");
  if (!f) {
    int e = errno;
    ::close(fd);
    throw SimError(path + ": cannot write: " + std::strerror(e));
  }
  return f;
}

}  // namespace sim
