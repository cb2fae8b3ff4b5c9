// Who may talk to shoald and to whom the CLI talks: the socket-trust rule, the peer policy, who
// may change a record, and the peer table's reading of gRPC's peer names.
#include "server/rpc/access.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "shared/endpoint.h"

namespace shoal {
namespace {

constexpr uid_t kMe = 1000, kOther = 1001;
const PathInfo kMySocket{kMe, S_IFSOCK | 0600}, kMyDir{kMe, S_IFDIR | 0700};

TEST(SocketTrustTest, OwnSocketInOwnDirectoryIsTrusted) {
  EXPECT_TRUE(JudgeSocket("/run/user/1000/shoal.sock", kMySocket, kMyDir, kMe, {}).ok());
  EXPECT_TRUE(
      JudgeSocket("/run/shoal.sock", {0, S_IFSOCK | 0660}, {0, S_IFDIR | 0755}, kMe, {}).ok());
}

TEST(SocketTrustTest, AnImpostorsSocketInTmpIsRefusedNamingItsOwner) {
  const Status st =
      JudgeSocket("/tmp/shoal-0.sock", {kOther, S_IFSOCK | 0777}, {0, S_IFDIR | 01777}, kMe, {});
  EXPECT_EQ(st.code(), Code::kPermissionDenied);
  EXPECT_NE(st.message().find("it belongs to uid 1001"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--socket-owner 1001"), std::string::npos) << st.message();
  // ...unless the user says that uid runs the daemon they mean.
  EXPECT_TRUE(
      JudgeSocket("/tmp/s.sock", {kOther, S_IFSOCK | 0660}, {0, S_IFDIR | 01777}, kMe, kOther)
          .ok());
}

TEST(SocketTrustTest, ADirectoryOthersCanWriteOrOwnIsRefused) {
  const Status open =
      JudgeSocket("/x/s.sock", kMySocket, {kMe, S_IFDIR | 0777}, kMe, {});  // not sticky
  EXPECT_NE(open.message().find("others can write its directory"), std::string::npos);
  const Status theirs = JudgeSocket("/x/s.sock", kMySocket, {kOther, S_IFDIR | 0700}, kMe, {});
  EXPECT_NE(theirs.message().find("its directory belongs to uid 1001"), std::string::npos);
  const Status file = JudgeSocket("/x/s.sock", {kMe, S_IFREG | 0600}, kMyDir, kMe, {});
  EXPECT_NE(file.message().find("is not a socket"), std::string::npos);
}

TEST(AccessPolicyTest, DaemonUserRootAndTheGroupAreAdmitted) {
  AccessPolicy p{kMe, {}};
  EXPECT_TRUE(AdmitUnixPeer(p, {kMe, kMe, {}})->admin);
  EXPECT_TRUE(AdmitUnixPeer(p, {0, 0, {}})->admin);
  const auto refused = AdmitUnixPeer(p, {kOther, kOther, {}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kPermissionDenied);
  EXPECT_EQ(refused.status().message(),
            "uid 1001 may not use this shoald (it serves uid 1000, root)");
  p.group = 50;
  const auto member = AdmitUnixPeer(p, {kOther, kOther, {7, 50}});
  ASSERT_TRUE(member.ok());
  EXPECT_FALSE(member->admin);
  EXPECT_EQ(member->name, "uid 1001");
  EXPECT_TRUE(AdmitUnixPeer(p, {kOther, 50, {}}).ok());  // primary group
  EXPECT_FALSE(AdmitUnixPeer(p, {kOther, kOther, {7}}).ok());
}

TEST(AccessPolicyTest, OnlyTheSubmitterOrAnAdminMayChangeARecord) {
  const Caller alice{"uid 1001", false}, bob{"uid 1002", false}, root{"uid 0", true};
  EXPECT_TRUE(MayModify(alice, "uid 1001", "experiment x1").ok());
  EXPECT_TRUE(MayModify(root, "uid 1001", "experiment x1").ok());
  const Status st = MayModify(bob, "uid 1001", "experiment x1");
  EXPECT_EQ(st.code(), Code::kPermissionDenied);
  EXPECT_NE(st.message().find("experiment x1 was submitted by uid 1001"), std::string::npos);
  EXPECT_FALSE(MayModify(alice, "", "experiment x0").ok());  // recorded before submitters were
}

// Kind command runs the caller's program as shoald's user: only shoald's uid, root and tokens
// marked `commands`, and only on a daemon started with --allow-commands.
TEST(AccessPolicyTest, OnlyTrustedCallersOfAWillingDaemonRunCommands) {
  AccessPolicy p{kMe, 50};
  const Caller me = AdmitUnixPeer(p, {kMe, kMe, {}}).value();
  const Caller member = AdmitUnixPeer(p, {kOther, kOther, {50}}).value();
  EXPECT_TRUE(me.may_run_code);
  EXPECT_TRUE(AdmitUnixPeer(p, {0, 0, {}})->may_run_code);
  EXPECT_FALSE(member.may_run_code);
  EXPECT_TRUE(MayRunKinds(me, true, {"command"}).ok());
  EXPECT_TRUE(MayRunKinds(member, false, {"hogwild", "pipeline"}).ok());  // no program of theirs
  const Status group = MayRunKinds(member, true, {"hogwild", "command"});
  EXPECT_EQ(group.code(), Code::kPermissionDenied);
  EXPECT_EQ(group.message(),
            "kind command: uid 1001 may not run programs as shoald's user (its own uid, root, or "
            "a token marked 'commands' in the token file may)");
  const Status off = MayRunKinds(me, false, {"command"});
  EXPECT_EQ(off.code(), Code::kPermissionDenied);
  EXPECT_NE(off.message().find("started without --allow-commands"), std::string::npos);
}

TEST(PeerTableTest, FindsTheConnectionByGrpcsPeerName) {
  PeerTable t;
  t.Set(7, {kOther, kOther, {}});
  ASSERT_TRUE(t.Find("fd:7").has_value());
  EXPECT_EQ(t.Find("fd:7")->uid, kOther);
  t.Set(7, {kMe, kMe, {}});  // the fd reused by the next connection
  EXPECT_EQ(t.Find("fd:7")->uid, kMe);
  for (const char* bad : {"fd:8", "fd:", "fd:7x", "unix:/tmp/s", "ipv4:127.0.0.1:1"})
    EXPECT_FALSE(t.Find(bad).has_value()) << bad;
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

TEST(TokenTableTest, NamesTokensAndAdminsAndRefusesShortOnes) {
  const auto t = TokenTable::Parse(
      "# who\nalice 0123456789abcdef0123\n\nops fedcba9876543210fedc admin  # on call\n", "f");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->size(), 2u);
  EXPECT_EQ(t->Find("0123456789abcdef0123")->name, "token alice");
  EXPECT_FALSE(t->Find("0123456789abcdef0123")->admin);
  EXPECT_TRUE(t->Find("fedcba9876543210fedc")->admin);
  EXPECT_FALSE(t->Find("0123456789abcdef012").has_value());  // a prefix is not the token
  EXPECT_FALSE(t->Find("").has_value());
  EXPECT_EQ(TokenTable::Parse("bob short\n", "f").status().message(),
            "f line 1: want NAME TOKEN [admin] [commands], a token of 16 characters or more");
  EXPECT_FALSE(TokenTable::Parse("bob 0123456789abcdef0123 root\n", "f").ok());
  EXPECT_FALSE(TokenTable::Parse("bob 0123456789abcdef0123 admin admin\n", "f").ok());
  const auto marked =
      TokenTable::Parse("ci 0123456789abcdef0123 commands\nops fedcba9876543210fedc admin\n", "f");
  ASSERT_TRUE(marked.ok()) << marked.status().message();
  EXPECT_TRUE(marked->Find("0123456789abcdef0123")->may_run_code);
  EXPECT_FALSE(marked->Find("0123456789abcdef0123")->admin);
  EXPECT_FALSE(marked->Find("fedcba9876543210fedc")->may_run_code);  // admin is not code
  EXPECT_FALSE(TokenTable::Parse("# nothing\n", "f").ok());
}

TEST(IdentifyTest, UnixPeersByCredentialsTcpPeersByBearerToken) {
  PeerTable peers;
  peers.Set(5, {1000, 1000, {}});
  const AccessPolicy policy{1000, {}};
  const auto tokens = TokenTable::Parse("alice 0123456789abcdef0123\n", "f").value();
  EXPECT_EQ(IdentifyCaller("fd:5", {}, peers, policy, &tokens)->name, "uid 1000");
  const std::string tcp = "ipv4:127.0.0.1:5555";
  EXPECT_EQ(IdentifyCaller(tcp, "Bearer 0123456789abcdef0123", peers, policy, &tokens)->name,
            "token alice");
  for (const std::optional<std::string>& auth :
       {std::optional<std::string>{}, std::optional<std::string>{"0123456789abcdef0123"},
        std::optional<std::string>{"Bearer nope"}}) {
    const auto who = IdentifyCaller(tcp, auth, peers, policy, &tokens);
    ASSERT_FALSE(who.ok());
    EXPECT_EQ(who.status().code(), Code::kUnauthenticated);
    EXPECT_EQ(who.status().message().find("0123456789abcdef0123"), std::string::npos);
  }
  EXPECT_FALSE(IdentifyCaller(tcp, "Bearer 0123456789abcdef0123", peers, policy, nullptr).ok());
}

}  // namespace
}  // namespace shoal
