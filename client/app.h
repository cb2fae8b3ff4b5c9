// The CLI as one object: the app with its connection options and every command, built the same
// way by main and by the reference generator (`shoal reference`, docs/cli-reference.md), so the
// reference is the --help text and cannot drift from it.
#pragma once

#include <sys/types.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/commands.h"
#include "client/shoal_client.h"

namespace shoal::cli {

struct Cli {
  CLI::App app{"shoal: submit, watch and inspect Shoal experiments", "shoal"};
  std::string socket;  // empty: DefaultSocketPath(), resolved when a command needs the daemon
  std::optional<uid_t> owner;
  Endpoint endpoint;
  std::string token_file;
  std::vector<Command> commands;
};

std::unique_ptr<Cli> BuildCli();

// Markdown: the app's --help and every command's, in the order they were added, then the spec
// fields' table (option, default, what) from the spec field table.
std::string CliReference();

}  // namespace shoal::cli
