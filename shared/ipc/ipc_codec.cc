#include "shared/ipc/ipc_codec.h"

#include <unistd.h>

#include <cerrno>

#include "shared/os/process.h"

namespace shoal {

std::string EncodeFrame(const google::protobuf::MessageLite& m) {
  std::string body = m.SerializeAsString();
  const uint32_t n = static_cast<uint32_t>(body.size());
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + body;
}

bool WriteFrame(int fd, const google::protobuf::MessageLite& m) {
  return WriteAll(fd, EncodeFrame(m));
}

StatusOr<bool> FrameReader::Next(google::protobuf::MessageLite* m) {
  if (!failed_.ok()) return failed_;
  if (buf_.size() < 4) return false;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t(static_cast<unsigned char>(buf_[i])) << (8 * i);
  if (n > kMaxFrameBytes) {
    failed_ = DataLoss("frame of " + std::to_string(n) + " bytes (at most " +
                       std::to_string(kMaxFrameBytes) + ")");
    return failed_;
  }
  if (buf_.size() < 4 + size_t(n)) return false;
  const bool parsed = m->ParseFromArray(buf_.data() + 4, static_cast<int>(n));
  buf_.erase(0, 4 + size_t(n));
  if (!parsed) {
    failed_ = DataLoss("a frame of " + std::to_string(n) + " bytes is not a " + m->GetTypeName());
    return failed_;
  }
  return true;
}

std::string EncodePacket(const google::protobuf::MessageLite& m) { return m.SerializeAsString(); }

Status DecodePacket(const std::string& data, google::protobuf::MessageLite* m) {
  if (!m->ParseFromString(data)) return DataLoss("a packet is not a " + m->GetTypeName());
  return Status::Ok();
}

}  // namespace shoal
