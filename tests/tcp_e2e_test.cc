// shoald over TCP: TLS (a certificate made here with openssl) and bearer tokens; plaintext only on
// loopback with --insecure; a daemon that would listen unprotected refuses to start.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/testutil.h"

namespace shoal {
namespace {

using testing::CommandResult;
using testing::Daemon;
using testing::RunCommand;
using testing::TempDir;

constexpr const char* kAliceToken = "alice-0123456789abcdef";

void Write(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}

class TcpE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    Write(dir_ / "tokens",
          std::string("alice ") + kAliceToken + "\nops ops-fedcba9876543210 admin\n", 0600);
    Write(dir_ / "alice.tok", std::string(kAliceToken) + "\n", 0600);
    Write(dir_ / "wrong.tok", "mallory-0123456789abcdef\n", 0600);
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
  }
  void MakeCertificate() {
    const CommandResult r =
        RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    dir_ / "key.pem", "-out", dir_ / "cert.pem", "-days", "1", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  CommandResult Cli(const std::string& target, std::vector<std::string> extra,
                    std::vector<std::string> args) {
    std::vector<std::string> argv = {testing::BinDir() + "/shoal", "--target", target};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }
  TempDir dir_;
  const int port_ = testing::FreeLoopbackPort();
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(TcpE2E, TlsAndATokenLetInOnlyTheTokensHolder) {
  MakeCertificate();
  const std::string listen = "127.0.0.1:" + std::to_string(port_);
  ASSERT_TRUE(daemon_->Start({"--listen", listen, "--tls-cert", dir_ / "cert.pem", "--tls-key",
                              dir_ / "key.pem", "--token-file", dir_ / "tokens"}));
  const std::string target = "localhost:" + std::to_string(port_);
  const std::vector<std::string> tls = {"--tls-ca", dir_ / "cert.pem"};
  auto with = [&](const std::string& token) {
    auto v = tls;
    v.insert(v.end(), {"--token-file", dir_ / token});
    return v;
  };
  EXPECT_EQ(Cli(target, with("alice.tok"), {"node"}).exit_code, 0);
  const CommandResult wrong = Cli(target, with("wrong.tok"), {"node"});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("the bearer token is not one this shoald knows"), std::string::npos)
      << wrong.err;
  EXPECT_EQ(wrong.err.find("mallory"), std::string::npos);  // a token is never echoed
  const CommandResult sub = Cli(target, with("alice.tok"),
                                {"submit", "--batches", "2", "--dataset", "synthetic",
                                 "--eval-samples", "0", "--wait", "--json"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  EXPECT_EQ(testing::Parse(sub)["submitter"], "token alice");
  // Plaintext against the TLS port gets nowhere.
  const CommandResult plain =
      Cli(target, {"--insecure", "--token-file", dir_ / "alice.tok"}, {"node"});
  EXPECT_EQ(plain.exit_code, 1);
}

TEST_F(TcpE2E, PlaintextOnlyOnLoopbackWithInsecureAndNeverWithoutTokens) {
  const std::string port = std::to_string(port_);
  EXPECT_FALSE(daemon_->Start({"--listen", "0.0.0.0:" + port, "--insecure", "--token-file",
                               dir_ / "tokens"}));                                // not loopback
  EXPECT_FALSE(daemon_->Start({"--listen", "127.0.0.1:" + port, "--insecure"}));  // no tokens
  Write(dir_ / "open-tokens", std::string("alice ") + kAliceToken + "\n", 0644);
  EXPECT_FALSE(daemon_->Start(
      {"--listen", "127.0.0.1:" + port, "--insecure", "--token-file", dir_ / "open-tokens"}));
  ASSERT_TRUE(daemon_->Start(
      {"--listen", "127.0.0.1:" + port, "--insecure", "--token-file", dir_ / "tokens"}));
  const std::string target = "127.0.0.1:" + port;
  EXPECT_EQ(Cli(target, {"--insecure", "--token-file", dir_ / "alice.tok"}, {"node"}).exit_code, 0);
  const CommandResult none = Cli(target, {"--insecure"}, {"node"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("--target needs --token-file"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace shoal
