// Any bytes on the leader's status pipe, cut anywhere, and as forkserver packets: the decoders
// never crash, and a stream that failed stays failed.
#include <cstdlib>

#include "shared/ipc/ipc_codec.h"
#include "shoal/ipc/v1/ipc.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  shoal::FrameReader reader;
  bool failed = false;
  for (size_t at = 0; at < size;) {
    const size_t n = std::min<size_t>(size - at, 1 + (data[at] % 7));  // odd cuts
    reader.Feed(bytes + at, n);
    at += n;
    for (;;) {
      shoal::ipc::v1::LeaderEvent ev;
      auto got = reader.Next(&ev);
      if (!got.ok()) {
        failed = true;
        break;
      }
      if (failed) std::abort();  // a failed stream must not recover
      if (!*got) break;
    }
  }
  const std::string packet(bytes, size);
  shoal::ipc::v1::ForkRequest req;
  shoal::ipc::v1::ForkServerReply reply;
  shoal::ipc::v1::WorkerReading report;
  (void)shoal::DecodePacket(packet, &req);
  (void)shoal::DecodePacket(packet, &reply);
  (void)shoal::DecodePacket(packet, &report);
  return 0;
}
