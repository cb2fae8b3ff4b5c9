// The CLI's subcommands, one file per group: node (cmd_node.cc), experiments (cmd_experiment.cc:
// submit, watch, list, get, cancel), sweeps (cmd_sweep.cc: sweep, sweeps, report).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "client/shoal_client.h"
#include "shared/status.h"

namespace shoal::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int(ShoalClient&)> run;  // returns the exit code
  // Whether, as parsed, it talks to shoald (its socket or target is checked first).
  std::function<bool()> needs_daemon = [] { return true; };
};

void AddNodeCommands(CLI::App& app, std::vector<Command>* out);
void AddExperimentCommands(CLI::App& app, std::vector<Command>* out);
void AddSweepCommands(CLI::App& app, std::vector<Command>* out);
void AddRecordCommands(CLI::App& app, std::vector<Command>* out);
void AddTraceCommands(CLI::App& app, std::vector<Command>* out);

// Prints "shoal: <message>" to stderr and exits 1.
[[noreturn]] void Die(const std::string& message);
// The value, or Die with the status's message.
template <typename T>
T OrDie(StatusOr<T> v) {
  if (!v.ok()) Die(v.status().message());
  return std::move(v).value();
}
void OrDie(const Status& st);
// Prints a message as one line of JSON.
void PrintJson(const google::protobuf::Message& m);
// Writes `data` to `path`, or stdout when path is empty.
void Emit(const std::string& data, const std::string& path);

}  // namespace shoal::cli
