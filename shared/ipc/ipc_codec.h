// The one codec for messages between Shoal's processes (proto/shoal/ipc/v1/ipc.proto).
// On a byte stream (the leader's status pipe) each message is a 4-byte little-endian length and
// the serialized message; on SOCK_SEQPACKET (the forkserver) one message is one packet.
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstdint>
#include <string>

#include "shared/status.h"

namespace shoal {

// Frames above this are corrupt input, not messages (a result with 64 workers is ~60 KB).
constexpr uint32_t kMaxFrameBytes = 16u << 20;

// A frame: length prefix and body.
std::string EncodeFrame(const google::protobuf::MessageLite& m);
// Writes one frame to fd, retrying short writes; false when the reader is gone.
bool WriteFrame(int fd, const google::protobuf::MessageLite& m);

// Cuts a byte stream into messages. After an error the stream is corrupt and stays failed.
class FrameReader {
 public:
  void Feed(const char* data, size_t n) { buf_.append(data, n); }
  // Parses the next whole frame into *m: true when one was there, false when more bytes are
  // needed; DATA_LOSS when the frame is too long or its body does not parse.
  StatusOr<bool> Next(google::protobuf::MessageLite* m);
  // Bytes of an incomplete frame left when the stream ended (0 for a clean end).
  size_t pending() const { return buf_.size(); }

 private:
  std::string buf_;
  Status failed_;
};

// One message as one packet, and back (DATA_LOSS when it does not parse).
std::string EncodePacket(const google::protobuf::MessageLite& m);
Status DecodePacket(const std::string& data, google::protobuf::MessageLite* m);

}  // namespace shoal
