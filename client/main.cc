// shoal: the command-line client of shoald.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>

#include "client/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"shoal: submit, watch and inspect Shoal experiments"};
  app.require_subcommand(1);
  const char* env = std::getenv("SHOAL_SOCKET");
  std::string socket = env ? env : "/tmp/shoal-" + std::to_string(getuid()) + ".sock";
  app.add_option("--socket", socket, "shoald's unix socket (env SHOAL_SOCKET)")
      ->capture_default_str();
  std::vector<shoal::cli::Command> commands;
  shoal::cli::AddNodeCommands(app, &commands);
  shoal::cli::AddExperimentCommands(app, &commands);
  shoal::cli::AddSweepCommands(app, &commands);
  shoal::cli::AddRecordCommands(app, &commands);
  CLI11_PARSE(app, argc, argv);
  shoal::cli::ShoalClient client(socket);
  for (const auto& c : commands)
    if (c.app->parsed()) return c.run(client);
  return 2;
}
