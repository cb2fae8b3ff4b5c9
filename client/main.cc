// shoal: the command-line client of shoald.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "client/app.h"
#include "client/commands.h"
#include "client/shoal_client.h"
#include "client/spec_flags.h"
#include "shared/endpoint.h"
#include "shared/os/procfs.h"
#include "shared/spec/cli_checks.h"

namespace {

// Before a byte goes out: a socket someone else made could be an impostor that takes the spec and
// answers with a fake id; a TCP target needs its token.
shoal::Status Prepare(shoal::cli::Endpoint* e, const std::string& token_file,
                      std::optional<uid_t> owner, const CLI::App& app) {
  if (app.count("--target") == 0) {
    // TCP's options without TCP would be silently unused: the user meant something else.
    for (const char* tcp : {"--tls-ca", "--tls-cert", "--tls-key", "--token-file", "--insecure"})
      if (app.count(tcp) > 0) return shoal::InvalidArgument(std::string(tcp) + " needs --target");
    return shoal::CheckSocketTrust(e->socket, ::getuid(), owner);
  }
  if (e->target.empty()) return shoal::InvalidArgument("--target: empty; give HOST:PORT");
  // The socket's options without the socket would be silently unused, as TCP's are without TCP.
  for (const char* unix_only : {"--socket", "--socket-owner"})
    if (app.count(unix_only) > 0)
      return shoal::InvalidArgument(std::string(unix_only) +
                                    " is for the unix socket, not --target");
  if (e->insecure) {
    // The token would cross the network in plaintext: only to this host, as shoald allows.
    ASSIGN_OR_RETURN(auto hp, shoal::ParseHostPort("target", e->target));
    if (!shoal::IsLoopbackHost(hp.first))
      return shoal::InvalidArgument("--insecure: " + e->target +
                                    " is not a loopback address (plaintext would send the token "
                                    "over the network)");
    for (const char* tls : {"--tls-ca", "--tls-cert", "--tls-key"})
      if (app.count(tls) > 0)
        return shoal::InvalidArgument(std::string(tls) + " with --insecure: TLS or plaintext?");
  }
  if (token_file.empty()) return shoal::InvalidArgument("--target needs --token-file");
  ASSIGN_OR_RETURN(std::string token, shoal::ReadSmallFile(token_file));
  e->token = token.substr(0, token.find_first_of("\r\n"));
  if (e->token.empty())
    return shoal::InvalidArgument("--token-file " + token_file + ": no token in it");
  // The options named PEM files; the channel wants their text.
  for (std::string* pem : {&e->tls_ca, &e->tls_cert, &e->tls_key}) {
    if (pem->empty()) continue;
    ASSIGN_OR_RETURN(*pem, shoal::ReadSmallFile(*pem));
  }
  if (e->tls_cert.empty() != e->tls_key.empty())
    return shoal::InvalidArgument("--tls-cert and --tls-key go together");
  return shoal::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<shoal::cli::Cli> cli = shoal::cli::BuildCli();
  CLI::App& app = cli->app;
  // Everything after the first `--` is kind command's program, as typed.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    shoal::cli::ProgramArgs().assign(argv + i + 1, argv + argc);
    argc = i;
    break;
  }
  CLI11_PARSE(app, argc, argv);
  if (!shoal::cli::ProgramArgs().empty() && !app.got_subcommand("submit") &&
      !app.got_subcommand("sweep")) {
    std::fprintf(stderr, "shoal: only submit and sweep take a program after --\n");
    return 2;
  }
  cli->endpoint.socket = cli->socket.empty() ? shoal::DefaultSocketPath() : cli->socket;
  auto parsed = std::find_if(cli->commands.begin(), cli->commands.end(),
                             [](const shoal::cli::Command& c) { return c.app->parsed(); });
  if (parsed == cli->commands.end()) return 2;
  if (parsed->needs_daemon()) {
    if (shoal::Status st = Prepare(&cli->endpoint, cli->token_file, cli->owner, app); !st.ok()) {
      std::fprintf(stderr, "shoal: %s\n", st.message().c_str());
      return 1;
    }
  }
  shoal::cli::ShoalClient client(cli->endpoint);  // connects at its first call, if any
  return parsed->run(client);
}
