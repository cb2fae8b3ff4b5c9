// What arrives over the wire: ids, strings, lists (shared/spec/wire_check.h), and listing pages
// (server/paging.h).
#include "shared/spec/wire_check.h"

#include <gtest/gtest.h>

#include "server/paging.h"

namespace shoal {
namespace {

TEST(WireCheckTest, IdsAreTheDaemonsOwnFormat) {
  EXPECT_TRUE(CheckId("x0123456789", "x").ok());
  EXPECT_TRUE(CheckId("sabcdef0123", "xs").ok());
  // The other kind's id is named as such, not as no id at all.
  EXPECT_EQ(CheckId("sabcdef0123", "x").message(),
            "id: 'sabcdef0123' is a sweep's id; this takes an experiment's ('x...')");
  EXPECT_EQ(CheckId("x0123456789", "s").message(),
            "id: 'x0123456789' is an experiment's id; this takes a sweep's ('s...')");
  EXPECT_EQ(CheckId("s012345678", "x").message(),
            "id: 's012345678' is not an id ('x' and 10 hex digits)");
  EXPECT_FALSE(CheckId("x012345678", "x").ok());                     // short
  EXPECT_FALSE(CheckId("x0123456789a", "x").ok());                   // long
  EXPECT_FALSE(CheckId("x012345678G", "x").ok());                    // not hex
  EXPECT_FALSE(CheckId(std::string("x012345678\0", 11), "x").ok());  // a NUL is not a digit
  const Status st = CheckId(std::string(8000, 'y'), "x");
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_LT(st.message().size(), 120u) << st.message();  // a short prefix, not the input
  EXPECT_NE(st.message().find("(8000 bytes)"), std::string::npos) << st.message();
}

TEST(WireCheckTest, QuoteShortEscapesAndCuts) {
  EXPECT_EQ(QuoteShort("abc"), "'abc'");
  EXPECT_EQ(QuoteShort(std::string("a\0b\n'", 5)), "'a\\x00b\\x0a\\x27'");
  EXPECT_EQ(QuoteShort(std::string(50, 'z')), "'" + std::string(40, 'z') + "'... (50 bytes)");
}

TEST(WireCheckTest, EverySpecStringIsBoundedAndPrintable) {
  v1::ExperimentSpec spec;
  spec.set_kind("hogwild");
  spec.set_dataset("/usr/share/datasets/fashion-mnist");
  spec.mutable_optimizer()->set_name("adam");
  EXPECT_TRUE(CheckSpecStrings(spec).ok());
  for (auto set : std::vector<std::function<void(v1::ExperimentSpec*)>>{
           [](v1::ExperimentSpec* s) { s->set_kind(std::string(65, 'k')); },
           [](v1::ExperimentSpec* s) { s->set_model(std::string(1 << 16, 'm')); },
           [](v1::ExperimentSpec* s) { s->set_start("fork\x01"); },
           [](v1::ExperimentSpec* s) { s->set_name(std::string(129, 'n')); },
           [](v1::ExperimentSpec* s) { s->set_dataset(std::string(5000, '/')); },
           [](v1::ExperimentSpec* s) { s->mutable_optimizer()->set_name(std::string(100, 'o')); },
       }) {
    v1::ExperimentSpec bad = spec;
    set(&bad);
    const Status st = CheckSpecStrings(bad);
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_LT(st.message().size(), 160u) << st.message();
  }
  v1::ExperimentSpec named = spec;
  named.set_name("ok name, with spaces — and UTF-8");
  EXPECT_TRUE(CheckSpecStrings(named).ok());
}

// Lists and host names have room for what their own rules allow: a balance for many stages, a
// long master name; past that they are refused.
TEST(WireCheckTest, ListsAndHostNamesHaveRoomForWhatTheirRulesAllow) {
  std::string balance;
  for (int i = 0; i < 64; ++i) balance += (i ? ",12" : "12");
  v1::ExperimentSpec spec;
  spec.mutable_pipeline()->set_balance(balance);
  spec.set_master(std::string(253, 'h') + ":29500");
  EXPECT_TRUE(CheckSpecStrings(spec).ok()) << CheckSpecStrings(spec).message();
  v1::SweepSpec sweep;
  *sweep.mutable_base() = spec;
  auto* axis = sweep.add_axes();
  axis->set_field("balance");
  axis->add_values(balance);
  EXPECT_TRUE(CheckSweepStrings(sweep).ok()) << CheckSweepStrings(sweep).message();
  spec.set_master(std::string(300, 'h') + ":29500");
  EXPECT_NE(CheckSpecStrings(spec).message().find("master: 306 bytes"), std::string::npos)
      << CheckSpecStrings(spec).message();
  spec.clear_master();
  spec.mutable_pipeline()->set_balance(std::string(kMaxListBytes + 1, '1'));
  EXPECT_EQ(CheckSpecStrings(spec).code(), Code::kInvalidArgument);
}

// A name is UTF-8 without control characters: C1 (U+009B is a terminal's CSI) and broken or
// overlong sequences are refused like C0; ordinary UTF-8 is kept.
TEST(WireCheckTest, NamesAreUtf8WithoutControlCharacters) {
  EXPECT_TRUE(CheckText("name", "résumé — 実験 🐟", kMaxNameBytes).ok());
  for (const char* bad : {"a\xc2\x9b"
                          "2J",
                          "\xff", "\xc0\xaf", "\xe2\x82", "\xed\xa0\x80"}) {
    const Status st = CheckText("name", bad, kMaxNameBytes);
    EXPECT_FALSE(st.ok()) << QuoteShort(bad);
    EXPECT_EQ(st.message().rfind("name: ", 0), 0u) << st.message();
  }
}

TEST(WireCheckTest, PrintableTextEscapesWhatATerminalWouldObey) {
  EXPECT_EQ(PrintableText("ok é 実"), "ok é 実");
  EXPECT_EQ(PrintableText("\x1b[2Jx"), "\\x1b[2Jx");
  EXPECT_EQ(PrintableText("a\xc2\x9b"
                          "b"),
            "a\\xc2\\x9bb");
  EXPECT_EQ(PrintableText("\xff\n"), "\\xff\\x0a");
  v1::Experiment e;
  e.set_error("bad \x1b]0;pwned\x07");
  e.mutable_spec()->set_name("n\x1b");
  (*e.mutable_environment())["K\x1b"] = "v\x07";
  MakePrintable(&e);
  EXPECT_EQ(e.error(), "bad \\x1b]0;pwned\\x07");
  EXPECT_EQ(e.spec().name(), "n\\x1b");
  EXPECT_EQ(e.environment().at("K\\x1b"), "v\\x07");
}

TEST(WireCheckTest, SweepsHaveBoundedNamesAxesAndValues) {
  v1::SweepSpec sw;
  sw.set_name("batch sizes");
  auto* a = sw.add_axes();
  a->set_field("batch_size");
  a->add_values("16");
  EXPECT_TRUE(CheckSweepStrings(sw).ok());
  v1::SweepSpec long_name = sw;
  long_name.set_name(std::string(4 << 20, 'n'));
  EXPECT_NE(CheckSweepStrings(long_name).message().find("name: 4194304 bytes"), std::string::npos);
  v1::SweepSpec many = sw;
  for (int i = 0; i < 300; ++i) many.mutable_axes(0)->add_values("1");
  EXPECT_NE(CheckSweepStrings(many).message().find("at most 256"), std::string::npos);
  v1::SweepSpec ctl = sw;
  ctl.mutable_axes(0)->set_values(0, "1\n6");
  EXPECT_FALSE(CheckSweepStrings(ctl).ok());
}

struct Rec {
  int64_t ms;
  std::string name;
  int64_t submitted_unix_ms() const { return ms; }
  const std::string& id() const { return name; }
};

TEST(PagingTest, PagesFollowTokensAndSurviveDeletesAndInserts) {
  std::vector<Rec> all = {{5, "xb"}, {1, "xa"}, {5, "xa"}, {9, "xz"}, {3, "xq"}};
  auto p1 = TakePage(all, {2, ""});
  ASSERT_TRUE(p1.ok());
  ASSERT_EQ(p1->items.size(), 2u);
  EXPECT_EQ(p1->items[0].name, "xa");
  EXPECT_EQ(p1->items[1].name, "xq");
  EXPECT_EQ(p1->next, "3.xq");
  all.erase(all.begin() + 4);  // the last record of the page goes
  all.push_back({2, "xc"});    // one lands before the token: already passed
  auto p2 = TakePage(all, {2, p1->next});
  ASSERT_TRUE(p2.ok());
  ASSERT_EQ(p2->items.size(), 2u);
  EXPECT_EQ(p2->items[0].name, "xa");  // (5, xa)
  EXPECT_EQ(p2->items[1].name, "xb");
  auto p3 = TakePage(all, {2, p2->next});
  ASSERT_TRUE(p3.ok());
  ASSERT_EQ(p3->items.size(), 1u);
  EXPECT_EQ(p3->next, "");
  EXPECT_FALSE(TakePage(all, {2, "garbage"}).ok());
  EXPECT_FALSE(TakePage(all, {2, "-4.x"}).ok());
}

}  // namespace
}  // namespace shoal
