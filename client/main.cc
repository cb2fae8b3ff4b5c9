// shoal: the command-line client of shoald.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "client/commands.h"
#include "shared/endpoint.h"

int main(int argc, char** argv) {
  CLI::App app{"shoal: submit, watch and inspect Shoal experiments"};
  app.require_subcommand(1);
  std::string socket = shoal::DefaultSocketPath();
  app.add_option("--socket", socket,
                 "shoald's unix socket (env SHOAL_SOCKET, else $XDG_RUNTIME_DIR/shoal.sock, else "
                 "~/.local/state/shoal/shoal.sock)")
      ->capture_default_str();
  std::optional<uid_t> owner;
  app.add_option(
      "--socket-owner", owner,
      "a uid besides yours and root's trusted to own the socket (a shared daemon's user)");
  std::vector<shoal::cli::Command> commands;
  shoal::cli::AddNodeCommands(app, &commands);
  shoal::cli::AddExperimentCommands(app, &commands);
  shoal::cli::AddSweepCommands(app, &commands);
  shoal::cli::AddRecordCommands(app, &commands);
  CLI11_PARSE(app, argc, argv);
  // Before a byte goes out: a socket someone else made could be an impostor that takes the spec
  // and answers with a fake id.
  if (shoal::Status st = shoal::CheckSocketTrust(socket, ::getuid(), owner); !st.ok()) {
    std::fprintf(stderr, "shoal: %s\n", st.message().c_str());
    return 1;
  }
  shoal::cli::ShoalClient client(socket);
  for (const auto& c : commands)
    if (c.app->parsed()) return c.run(client);
  return 2;
}
