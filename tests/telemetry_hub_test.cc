#include "server/telemetry_hub.h"

#include <gtest/gtest.h>

#include <thread>

namespace shoal {
namespace {

v1::WatchEvent Ev(int i) {
  v1::WatchEvent e;
  e.mutable_sample()->set_steps(static_cast<uint64_t>(i));
  return e;
}

TEST(TelemetryHubTest, StalledSubscriberDoesNotBlockPublisherOrOthers) {
  TelemetryHub hub;
  auto stalled = hub.Subscribe("x", 8);  // never reads
  auto reader = hub.Subscribe("x", 4096);
  std::vector<uint64_t> got;
  std::thread t([&] {
    v1::WatchEvent ev;
    while (got.size() < 1000 && reader->Next(&ev, std::chrono::seconds(5)))
      got.push_back(ev.sample().steps());
  });
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) hub.Publish("x", Ev(i));
  const auto took = std::chrono::steady_clock::now() - t0;
  t.join();
  EXPECT_LT(took, std::chrono::seconds(1));
  ASSERT_EQ(got.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(got[i], uint64_t(i));
  // The stalled one kept the newest 8 and counted the rest as dropped.
  EXPECT_EQ(stalled->dropped(), 992u);
  v1::WatchEvent ev;
  ASSERT_TRUE(stalled->Next(&ev, std::chrono::milliseconds(0)));
  EXPECT_EQ(ev.sample().steps(), 992u);
}

TEST(TelemetryHubTest, CloseEndsSubscriptionsAfterTheirLastEvent) {
  TelemetryHub hub;
  auto s = hub.Subscribe("x");
  auto other = hub.Subscribe("y");
  hub.Publish("x", Ev(1));
  hub.Close("x");
  EXPECT_FALSE(s->Finished());
  v1::WatchEvent ev;
  EXPECT_TRUE(s->Next(&ev, std::chrono::milliseconds(10)));
  EXPECT_TRUE(s->Finished());
  EXPECT_FALSE(s->Next(&ev, std::chrono::milliseconds(10)));
  EXPECT_FALSE(other->Finished());
}

TEST(TelemetryHubTest, GoneWatchersAreForgotten) {
  TelemetryHub hub;
  { auto s = hub.Subscribe("x"); }
  hub.Publish("x", Ev(1));  // must not touch the destroyed subscription
  auto s = hub.Subscribe("x");
  hub.Publish("x", Ev(2));
  v1::WatchEvent ev;
  ASSERT_TRUE(s->Next(&ev, std::chrono::milliseconds(10)));
  EXPECT_EQ(ev.sample().steps(), 2u);
}

// A watcher that finds its experiment over ends alone: the others still get the last event the
// runner is about to publish, and no entry is left once the last one goes.
TEST(TelemetryHubTest, UnsubscribeEndsOnlyThatWatcher) {
  TelemetryHub hub;
  auto early = hub.Subscribe("x");
  auto late = hub.Subscribe("x");
  hub.Unsubscribe("x", late);
  EXPECT_TRUE(late->Finished());
  EXPECT_FALSE(early->Finished());
  hub.Publish("x", Ev(7));  // the final state, published after the record was stored
  v1::WatchEvent ev;
  ASSERT_TRUE(early->Next(&ev, std::chrono::milliseconds(10)));
  EXPECT_EQ(ev.sample().steps(), 7u);
  EXPECT_EQ(hub.watched(), 1u);
  hub.Unsubscribe("x", early);
  EXPECT_EQ(hub.watched(), 0u);
  hub.Unsubscribe("x", early);  // twice, or for an id with no entry: nothing happens
  EXPECT_EQ(hub.watched(), 0u);
}

}  // namespace
}  // namespace shoal
