// Access end to end, with real users: an impostor's socket is refused before a byte is sent,
// a user the daemon does not serve is PERMISSION_DENIED, and with --socket-group its members may
// submit but change only their own records. The other user is nobody (uid 65534), by setpriv.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/testutil.h"

namespace shoal {
namespace {

using testing::CommandResult;
using testing::Daemon;
using testing::RunCommand;
using testing::TempDir;

const std::vector<std::string> kAsNobody = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534"};

// The CLI run as nobody (in group nogroup when `in_group`).
CommandResult CliAsNobody(const std::string& socket, std::vector<std::string> args,
                          bool in_group = false) {
  std::vector<std::string> argv = kAsNobody;
  argv.push_back(in_group ? "--groups=65534" : "--clear-groups");
  argv.insert(argv.end(), {testing::BinDir() + "/shoal", "--socket", socket});
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

// The reported scenario: another user listens on the path first (in a sticky /tmp-like
// directory). The CLI refuses to talk to it, and the impostor is never connected to.
TEST(AccessE2E, AnImpostorsSocketIsRefusedBeforeAnythingIsSent) {
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 01777), 0);
  const std::string path = dir / "shoal.sock";
  CommandResult impostor;
  std::thread listen([&] {
    std::vector<std::string> argv = kAsNobody;
    argv.insert(argv.end(),
                {"--clear-groups", "/usr/bin/python3", "-c",
                 "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\n"
                 "s.listen()\ns.settimeout(4)\ntry:\n  s.accept()\n  print('CONNECTED')\n"
                 "except socket.timeout:\n  print('NONE')\n",
                 path});
    impostor = RunCommand(argv);
  });
  ASSERT_TRUE(testing::WaitFor([&] { return ::access(path.c_str(), F_OK) == 0; }, 5));
  const CommandResult r = RunCommand(
      {testing::BinDir() + "/shoal", "--socket", path, "submit", "--name", "secret-project"});
  listen.join();
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("refusing " + path + ": it belongs to uid 65534"), std::string::npos)
      << r.err;
  EXPECT_EQ(impostor.out, "NONE\n") << impostor.err;
}

class AccessDaemonE2E : public ::testing::Test {
 protected:
  // A daemon whose socket nobody can reach: the directory is traversable, the socket opened up.
  void StartDaemon(std::vector<std::string> extra) {
    daemon_ = std::make_unique<Daemon>(dir_ / "state", socket_);
    ASSERT_TRUE(daemon_->Start(extra));
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
  }
  std::string Submit(const std::string& as, std::vector<std::string> args) {
    args.insert(args.begin(), "submit");
    args.insert(args.end(), {"--dataset", "synthetic", "--eval-samples", "0", "--json"});
    const CommandResult r = as == "root" ? daemon_->Cli(args) : CliAsNobody(socket_, args, true);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return testing::Parse(r).value("id", "");
  }
  TempDir dir_;
  std::string socket_ = dir_ / "s.sock";
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(AccessDaemonE2E, AUserTheDaemonDoesNotServeIsPermissionDenied) {
  StartDaemon({});
  ASSERT_EQ(::chmod(socket_.c_str(), 0666), 0);  // opened up by hand: the peer check still holds
  const CommandResult r = CliAsNobody(socket_, {"node"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("uid 65534 may not use this shoald (it serves uid 0, root)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(daemon_->Cli({"node"}).exit_code, 0);
}

// A member of the socket's group may submit experiments, but not run a program of theirs as
// the daemon's user, even on a daemon that runs commands; the daemon's own user may.
TEST_F(AccessDaemonE2E, AGroupMemberMayNotRunACommand) {
  StartDaemon({"--socket-group", "nogroup", "--allow-commands"});
  const CommandResult denied = CliAsNobody(
      socket_, {"submit", "--kind", "command", "--wait", "--", "/bin/sh", "-c", "id"}, true);
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_NE(denied.err.find("kind command: uid 65534 may not run programs as shoald's user"),
            std::string::npos)
      << denied.err;
  const CommandResult mine =
      daemon_->Cli({"submit", "--kind", "command", "--wait", "--json", "--", "/bin/true"});
  EXPECT_EQ(mine.exit_code, 0) << mine.err << mine.out;
}

TEST_F(AccessDaemonE2E, GroupMembersSubmitButChangeOnlyTheirOwn) {
  StartDaemon({"--socket-group", "nogroup"});
  struct stat st {};
  ASSERT_EQ(::stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, 65534u);
  const std::string mine = Submit("root", {"--batches", "100000"});
  const std::string theirs = Submit("nobody", {"--batches", "100000"});
  const CommandResult denied = CliAsNobody(socket_, {"cancel", mine}, true);
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_NE(denied.err.find("experiment " + mine + " was submitted by uid 0"), std::string::npos)
      << denied.err;
  EXPECT_EQ(CliAsNobody(socket_, {"cancel", theirs}, true).exit_code, 0);
  EXPECT_EQ(CliAsNobody(socket_, {"prune", "--keep", "0"}, true).exit_code, 1);  // admins only
  EXPECT_EQ(daemon_->Cli({"cancel", mine}).exit_code, 0);                        // root may
  // A running experiment is cancelled once every process of it is gone, after the call returns.
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return testing::Parse(daemon_->Cli({"get", mine, "--json"}))["state"] == "CANCELLED";
      },
      30));
  const auto got = testing::Parse(daemon_->Cli({"get", theirs, "--json"}));
  EXPECT_EQ(got["submitter"], "uid 65534");
  EXPECT_EQ(got["state"], "CANCELLED");
  // Listings by submitter, state and kind.
  auto ids = [](const CommandResult& r) {
    std::vector<std::string> out;
    for (const auto& e : testing::Parse(r).value("experiments", nlohmann::json::array()))
      out.push_back(e["id"]);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(ids(CliAsNobody(socket_, {"list", "--mine", "--json"}, true)), V{theirs});
  EXPECT_EQ(ids(daemon_->Cli({"list", "--mine", "--json"})), V{mine});
  EXPECT_EQ(ids(daemon_->Cli({"list", "--submitter", "uid 65534", "--json"})), V{theirs});
  EXPECT_EQ(ids(daemon_->Cli({"list", "--state", "cancelled", "--kind", "hogwild", "--json"})),
            (V{mine, theirs}));
  EXPECT_TRUE(ids(daemon_->Cli({"list", "--kind", "multi_model", "--json"})).empty());
  const CommandResult bad = daemon_->Cli({"list", "--state", "sleeping"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--state: 'sleeping' is not one of"), std::string::npos) << bad.err;
  // A filter nothing could match is refused, not answered with an empty table.
  for (const auto& [flag, value, why] : std::vector<std::array<std::string, 3>>{
           {"--kind", "hogwlid", "kind: 'hogwlid' is not one of: hogwild, multi_model"},
           {"--kind", "", "kind: '' is not one of"},
           {"--submitter", "65534", "submitter: '65534' is not a caller's name"},
           {"--submitter", "", "submitter: '' is not a caller's name"}}) {
    const CommandResult r = daemon_->Cli({"list", flag, value});
    EXPECT_EQ(r.exit_code, 1) << flag << " " << value;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace shoal
