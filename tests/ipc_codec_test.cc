// The codec between Shoal's processes (shared/ipc/ipc_codec.h): length-prefixed frames on the
// leader's status pipe, one message per packet on the forkserver's socket, and what corrupt
// input does to them.
#include "shared/ipc/ipc_codec.h"

#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "shoal/ipc/v1/ipc.pb.h"

namespace shoal {
namespace {

using ipc::v1::ForkRequest;
using ipc::v1::ForkServerReply;
using ipc::v1::LeaderEvent;

// One LeaderEvent of every case of its oneof, each with content in its fields.
std::vector<LeaderEvent> EveryLeaderEvent() {
  std::vector<LeaderEvent> out;
  LeaderEvent e;
  e.mutable_segment()->set_what("weights");
  e.mutable_segment()->set_bytes(1u << 20);
  out.push_back(e);

  e.Clear();
  e.mutable_worker_started()->set_index(3);
  e.mutable_worker_started()->set_pid(4242);
  out.push_back(e);

  e.Clear();
  e.mutable_worker_exited()->set_index(1);
  e.mutable_worker_exited()->set_pid(4243);
  e.mutable_worker_exited()->set_wait_status(9);
  out.push_back(e);

  e.Clear();
  for (uint32_t i = 0; i < 3; ++i) {
    auto* w = e.mutable_progress()->add_workers();
    w->set_index(i);
    w->set_pid(int32_t(100 + i));
    w->set_phase(ipc::v1::TRAINING);
    w->set_steps(10 * i);
    w->set_samples(640 * i);
    w->set_last_loss(0.5f);
    w->set_last_step_ns(1700000000000000000ull + i);
  }
  out.push_back(e);

  e.Clear();
  e.mutable_self_memory()->set_pss_bytes(195ull << 20);
  out.push_back(e);

  e.Clear();
  auto* r = e.mutable_result();
  r->set_ok(true);
  r->set_initial_checksum(0xdeadbeefcafef00dull);
  r->set_final_checksum(0x0123456789abcdefull);
  r->set_leader_vmhwm_bytes(123456789);
  auto* w = r->add_workers();
  w->set_index(0);
  w->set_phase(ipc::v1::FINISHED);
  w->set_first_loss(2.25f);
  w->set_tail_loss(0.125f);
  w->set_test_accuracy(0.875f);
  w->set_weights_checksum(77);
  auto* ep = w->add_epochs();
  ep->set_epoch(1);
  ep->set_wall_ns(5000000000ull);
  ep->set_loss_sum(12.5);
  ep->set_test_accuracy(0.75f);
  auto* c = w->add_curve();
  c->set_step(10);
  c->set_t_ms(1.5);
  c->set_loss(0.25);
  auto* x = r->add_exits();
  x->set_index(0);
  x->set_pid(4244);
  x->set_wait_status(0);
  out.push_back(e);

  e.Clear();
  e.mutable_error()->set_message("worker 2 could not map the weights: ENOMEM");
  out.push_back(e);

  e.Clear();  // no case set at all: an empty body
  out.push_back(e);
  return out;
}

void ExpectSame(const google::protobuf::Message& want, const google::protobuf::Message& got) {
  EXPECT_EQ(got.GetTypeName(), want.GetTypeName());
  EXPECT_EQ(got.SerializeAsString(), want.SerializeAsString());
  EXPECT_EQ(got.DebugString(), want.DebugString());
}

TEST(IpcCodecTest, FrameIsALittleEndianLengthAndTheBody) {
  LeaderEvent e;
  e.mutable_error()->set_message(std::string(300, 'x'));
  const std::string body = e.SerializeAsString();
  // error: tag, 2-byte length 303; its message: tag, 2-byte length 300, the text.
  ASSERT_EQ(body.size(), 306u);
  const std::string frame = EncodeFrame(e);
  ASSERT_EQ(frame.size(), 4u + 306u);
  EXPECT_EQ(frame.substr(0, 4), std::string("\x32\x01\x00\x00", 4));
  EXPECT_EQ(frame.substr(4), body);
  EXPECT_EQ(EncodeFrame(LeaderEvent()), std::string(4, '\0'));
}

TEST(IpcCodecTest, EveryLeaderEventRoundTripsFedWhole) {
  const auto events = EveryLeaderEvent();
  std::string stream;
  for (const auto& e : events) stream += EncodeFrame(e);
  FrameReader reader;
  reader.Feed(stream.data(), stream.size());  // several frames in one Feed
  for (size_t i = 0; i < events.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i));
    LeaderEvent got;
    auto next = reader.Next(&got);
    ASSERT_TRUE(next.ok()) << next.status().message();
    ASSERT_TRUE(*next);
    EXPECT_EQ(got.what_case(), events[i].what_case());
    ExpectSame(events[i], got);
  }
  LeaderEvent none;
  auto next = reader.Next(&none);
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(*next);
  EXPECT_EQ(reader.pending(), 0u);
}

TEST(IpcCodecTest, EveryCaseOfTheOneofIsCovered) {
  std::vector<bool> seen(LeaderEvent::descriptor()->oneof_decl(0)->field_count() + 1);
  for (const auto& e : EveryLeaderEvent()) {
    if (e.what_case() != LeaderEvent::WHAT_NOT_SET) seen[size_t(e.what_case()) - 1] = true;
  }
  for (int i = 0; i < LeaderEvent::descriptor()->oneof_decl(0)->field_count(); ++i)
    EXPECT_TRUE(seen[size_t(i)]) << LeaderEvent::descriptor()->oneof_decl(0)->field(i)->name();
}

TEST(IpcCodecTest, EveryLeaderEventRoundTripsFedByteByByte) {
  const auto events = EveryLeaderEvent();
  std::string stream;
  for (const auto& e : events) stream += EncodeFrame(e);
  FrameReader reader;
  std::vector<LeaderEvent> got;
  size_t fed_at_last_frame = 0;
  for (size_t i = 0; i < stream.size(); ++i) {
    reader.Feed(&stream[i], 1);
    for (;;) {
      LeaderEvent m;
      auto next = reader.Next(&m);
      ASSERT_TRUE(next.ok()) << next.status().message();
      if (!*next) break;
      got.push_back(m);
      fed_at_last_frame = i + 1;
    }
    // A partial frame waits: the bytes since the last whole frame are pending.
    EXPECT_EQ(reader.pending(), i + 1 - fed_at_last_frame);
  }
  ASSERT_EQ(got.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) ExpectSame(events[i], got[i]);
  EXPECT_EQ(reader.pending(), 0u);
}

TEST(IpcCodecTest, FramesSplitAcrossFeedsAtEveryBoundary) {
  const auto events = EveryLeaderEvent();
  std::string stream;
  for (const auto& e : events) stream += EncodeFrame(e);
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    FrameReader reader;
    reader.Feed(stream.data(), cut);
    size_t n = 0;
    LeaderEvent m;
    auto drain = [&] {
      for (;;) {
        auto next = reader.Next(&m);
        ASSERT_TRUE(next.ok()) << next.status().message();
        if (!*next) return;
        ExpectSame(events[n++], m);
      }
    };
    drain();
    reader.Feed(stream.data() + cut, stream.size() - cut);
    drain();
    EXPECT_EQ(n, events.size()) << "cut at " << cut;
  }
}

TEST(IpcCodecTest, WriteFrameGoesThroughAPipe) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const auto events = EveryLeaderEvent();
  for (const auto& e : events) ASSERT_TRUE(WriteFrame(fds[1], e));
  ::close(fds[1]);
  FrameReader reader;
  char buf[7];  // odd reads, so frames arrive in pieces
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) reader.Feed(buf, size_t(n));
  ::close(fds[0]);
  for (const auto& e : events) {
    LeaderEvent m;
    auto next = reader.Next(&m);
    ASSERT_TRUE(next.ok() && *next);
    ExpectSame(e, m);
  }
  EXPECT_EQ(reader.pending(), 0u);
}

TEST(IpcCodecTest, WriteFrameIsFalseWhenTheReaderIsGone) {
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGPIPE, &ignore, &old), 0);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  EXPECT_FALSE(WriteFrame(fds[1], EveryLeaderEvent()[0]));
  ::close(fds[1]);
  ::sigaction(SIGPIPE, &old, nullptr);
}

TEST(IpcCodecTest, ForkMessagesRoundTripAsPackets) {
  ForkRequest req;
  req.set_experiment_id("e42");
  req.set_index(7);
  req.set_pgid(5000);
  req.set_leader_pid(5001);
  req.mutable_spec()->set_workers(8);
  req.mutable_spec()->set_start("forkserver");
  req.mutable_spec()->mutable_optimizer()->set_name("adam");
  req.mutable_spec()->mutable_optimizer()->set_lr(0.0);  // present though zero
  const std::string packet = EncodePacket(req);
  EXPECT_EQ(packet, req.SerializeAsString());  // no framing on a packet
  ForkRequest back;
  ASSERT_TRUE(DecodePacket(packet, &back).ok());
  ExpectSame(req, back);
  EXPECT_TRUE(back.spec().optimizer().has_lr());
  EXPECT_FALSE(back.spec().has_batches());

  std::vector<ForkServerReply> replies(3);
  replies[0].mutable_forked()->set_index(7);
  replies[0].mutable_forked()->set_pid(6000);
  replies[1].mutable_error()->set_message("fork: EAGAIN");
  replies[2].mutable_exited()->set_pid(6000);
  replies[2].mutable_exited()->set_wait_status(256);
  for (const auto& r : replies) {
    ForkServerReply got;
    ASSERT_TRUE(DecodePacket(EncodePacket(r), &got).ok());
    EXPECT_EQ(got.what_case(), r.what_case());
    ExpectSame(r, got);
  }
  // An empty packet is an empty message.
  ForkServerReply empty;
  ASSERT_TRUE(DecodePacket("", &empty).ok());
  EXPECT_EQ(empty.what_case(), ForkServerReply::WHAT_NOT_SET);
}

TEST(IpcCodecTest, APacketThatDoesNotParseIsDataLoss) {
  google::protobuf::LogSilencer quiet;
  ForkRequest req;
  Status st = DecodePacket(std::string("\xff\xff\xff", 3), &req);
  EXPECT_EQ(st.code(), Code::kDataLoss);
  EXPECT_EQ(st.message(), "a packet is not a shoal.ipc.v1.ForkRequest");
  ForkServerReply reply;
  st = DecodePacket(std::string("\x0a\x05\x08", 3), &reply);  // forked, 5 bytes, 1 there
  EXPECT_EQ(st.code(), Code::kDataLoss);
  EXPECT_EQ(st.message(), "a packet is not a shoal.ipc.v1.ForkServerReply");
}

TEST(IpcCodecTest, AFrameTooLongIsDataLossAndTheReaderStaysFailed) {
  const uint32_t n = kMaxFrameBytes + 1;
  std::string header(4, '\0');
  for (int i = 0; i < 4; ++i) header[size_t(i)] = char((n >> (8 * i)) & 0xff);
  FrameReader reader;
  reader.Feed(header.data(), header.size());
  LeaderEvent m;
  auto next = reader.Next(&m);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), Code::kDataLoss);
  EXPECT_EQ(next.status().message(), "frame of 16777217 bytes (at most 16777216)");
  // Good frames after it do not revive the stream.
  const std::string good = EncodeFrame(EveryLeaderEvent()[1]);
  reader.Feed(good.data(), good.size());
  for (int i = 0; i < 3; ++i) {
    next = reader.Next(&m);
    ASSERT_FALSE(next.ok());
    EXPECT_EQ(next.status().code(), Code::kDataLoss);
    EXPECT_EQ(next.status().message(), "frame of 16777217 bytes (at most 16777216)");
  }
}

TEST(IpcCodecTest, AFrameOfExactlyTheLimitIsWaitedFor) {
  const uint32_t n = kMaxFrameBytes;
  std::string header(4, '\0');
  for (int i = 0; i < 4; ++i) header[size_t(i)] = char((n >> (8 * i)) & 0xff);
  FrameReader reader;
  reader.Feed(header.data(), header.size());
  LeaderEvent m;
  auto next = reader.Next(&m);
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_FALSE(*next);
  EXPECT_EQ(reader.pending(), 4u);
}

TEST(IpcCodecTest, ABodyThatDoesNotParseIsDataLossAndTheReaderStaysFailed) {
  const std::string bad("\x03\x00\x00\x00\xff\xff\xff", 7);
  const std::string good = EncodeFrame(EveryLeaderEvent()[0]);
  FrameReader reader;
  const std::string stream = good + bad + good;
  reader.Feed(stream.data(), stream.size());
  LeaderEvent m;
  auto next = reader.Next(&m);
  ASSERT_TRUE(next.ok() && *next);  // the frame before the bad one is delivered
  for (int i = 0; i < 3; ++i) {
    next = reader.Next(&m);
    ASSERT_FALSE(next.ok());
    EXPECT_EQ(next.status().code(), Code::kDataLoss);
    EXPECT_EQ(next.status().message(), "a frame of 3 bytes is not a shoal.ipc.v1.LeaderEvent");
  }
}

TEST(IpcCodecTest, ATruncatedStreamLeavesBytesPending) {
  const std::string frame = EncodeFrame(EveryLeaderEvent()[3]);
  ASSERT_GT(frame.size(), 8u);
  {
    FrameReader reader;
    reader.Feed(frame.data(), frame.size() - 1);  // the last byte never came
    LeaderEvent m;
    auto next = reader.Next(&m);
    ASSERT_TRUE(next.ok());
    EXPECT_FALSE(*next);
    EXPECT_EQ(reader.pending(), frame.size() - 1);
  }
  {
    FrameReader reader;
    reader.Feed(frame.data(), 2);  // half a length prefix
    LeaderEvent m;
    auto next = reader.Next(&m);
    ASSERT_TRUE(next.ok());
    EXPECT_FALSE(*next);
    EXPECT_EQ(reader.pending(), 2u);
  }
  {
    FrameReader reader;  // a whole frame and a piece of the next
    const std::string stream = frame + frame.substr(0, 5);
    reader.Feed(stream.data(), stream.size());
    LeaderEvent m;
    auto next = reader.Next(&m);
    ASSERT_TRUE(next.ok() && *next);
    next = reader.Next(&m);
    ASSERT_TRUE(next.ok());
    EXPECT_FALSE(*next);
    EXPECT_EQ(reader.pending(), 5u);
  }
}

// Random input never crashes a reader: each Next parses a frame, waits for more, or fails with
// DATA_LOSS, and a failed reader stays failed.
TEST(IpcCodecTest, RandomBytesParseOrFailCleanly) {
  google::protobuf::LogSilencer quiet;  // invalid UTF-8 in a string field is logged, then refused
  std::mt19937 rng(20240607);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 64), coin(0, 2);
  int parsed = 0, failed = 0, waiting = 0, packets_ok = 0, packets_bad = 0;
  for (int round = 0; round < 10000; ++round) {
    std::string data;
    const int kind = coin(rng);
    if (kind == 0) {
      const int n = len(rng);  // bytes as they come
      for (int i = 0; i < n; ++i) data += char(byte(rng));
    } else {
      // Plausible frames: a small length and a random body (sometimes shorter than it says).
      const int frames = 1 + len(rng) % 4;
      for (int f = 0; f < frames; ++f) {
        const int n = len(rng) % 24;
        data += char(n);
        data += std::string(3, '\0');
        const int body = kind == 1 ? n : len(rng) % 24;
        for (int i = 0; i < body; ++i) data += char(byte(rng));
      }
    }
    FrameReader reader;
    // Fed in random pieces.
    size_t at = 0;
    bool dead = false;
    do {
      const size_t piece = std::min(data.size() - at, size_t(1 + len(rng) % 16));
      reader.Feed(data.data() + at, piece);
      at += piece;
      for (int guard = 0; guard < 1000; ++guard) {
        LeaderEvent m;
        auto next = reader.Next(&m);
        if (!next.ok()) {
          ASSERT_EQ(next.status().code(), Code::kDataLoss) << next.status().message();
          dead = true;
          break;
        }
        if (!*next) break;
        ++parsed;
      }
    } while (!dead && at < data.size());
    if (dead) {
      ++failed;
      reader.Feed(data.data(), data.size());  // more bytes change nothing
      LeaderEvent m;
      auto again = reader.Next(&m);
      ASSERT_FALSE(again.ok());
      EXPECT_EQ(again.status().code(), Code::kDataLoss);
    }
    if (!dead && reader.pending() > 0) ++waiting;
    if (!dead) {
      EXPECT_LE(reader.pending(), data.size());
    }

    ForkServerReply reply;
    ForkRequest req;
    for (google::protobuf::MessageLite* m :
         std::initializer_list<google::protobuf::MessageLite*>{&reply, &req}) {
      Status st = DecodePacket(data, m);
      if (st.ok()) {
        ++packets_ok;
      } else {
        ASSERT_EQ(st.code(), Code::kDataLoss);
        ++packets_bad;
      }
    }
  }
  // The rounds reached every outcome.
  EXPECT_GT(parsed, 100);
  EXPECT_GT(failed, 1000);
  EXPECT_GT(waiting, 100);
  EXPECT_GT(packets_ok, 50);
  EXPECT_GT(packets_bad, 1000);
}

}  // namespace
}  // namespace shoal
