#include "server/log_capture.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace shoal {

StatusOr<std::unique_ptr<LogCapture>> LogCapture::Open(const std::string& path, uint64_t cap) {
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (file < 0) return Internal("log " + path + ": " + std::strerror(errno));
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    ::close(file);
    return Internal(std::string("log pipe: ") + std::strerror(errno));
  }
  ::fcntl(p[0], F_SETFL, O_NONBLOCK);
  return std::unique_ptr<LogCapture>(new LogCapture(file, p[0], p[1], cap));
}

LogCapture::~LogCapture() { Finish(); }

void LogCapture::CloseWriteEnd() {
  if (write_fd_ >= 0) ::close(write_fd_);
  write_fd_ = -1;
}

void LogCapture::Append(const char* data, size_t n) {
  const uint64_t room = cap_ - std::min(cap_, written_);
  const size_t keep = size_t(std::min<uint64_t>(room, n));
  size_t done = 0;  // a short write (a full disk) is counted as dropped, not lost unsaid
  while (done < keep) {
    const ssize_t w = ::write(file_, data + done, keep - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += size_t(w);
  }
  written_ += done;
  dropped_ += n - done;
}

bool LogCapture::Drain() {
  if (read_fd_ < 0 || eof_) return false;
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(read_fd_, chunk, sizeof chunk);
    if (n > 0) {
      Append(chunk, size_t(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    eof_ = true;  // every writer has closed its end
    return false;
  }
}

void LogCapture::Finish() {
  if (file_ < 0) return;
  CloseWriteEnd();
  Drain();
  if (dropped_ > 0) {
    const std::string note = "\n[shoald: " + std::to_string(dropped_) +
                             " more bytes dropped: the log is capped at " + std::to_string(cap_) +
                             " bytes]\n";
    (void)!::write(file_, note.data(), note.size());
  }
  ::close(file_);
  ::close(read_fd_);
  file_ = read_fd_ = -1;
}

std::string LogPath(const std::string& logs_dir, const std::string& experiment_id) {
  return logs_dir + "/" + experiment_id + ".log";
}

StatusOr<v1::LogsResponse> ReadLog(const std::string& path, uint64_t offset, uint32_t max_bytes,
                                   bool ended) {
  v1::LogsResponse r;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT) return Internal("log: " + std::string(std::strerror(errno)));
  std::string data(max_bytes, '\0');
  ssize_t n = 0;
  if (fd >= 0) {
    n = ::pread(fd, data.data(), data.size(), off_t(offset));
    ::close(fd);
    if (n < 0) return Internal("log: " + std::string(std::strerror(errno)));
  }
  data.resize(size_t(n));
  r.set_next_offset(offset + uint64_t(n));
  r.set_complete(ended && uint64_t(n) < max_bytes);
  r.set_data(std::move(data));
  return r;
}

}  // namespace shoal
