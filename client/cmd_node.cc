#include <cstdio>
#include <iostream>
#include <memory>

#include "client/commands.h"
#include "client/format.h"
#include "client/report/pbjson.h"
#include "shared/spec/wire_check.h"

namespace shoal::cli {

void Die(const std::string& message) {
  std::fprintf(stderr, "shoal: %s\n", PrintableText(message).c_str());
  std::exit(1);
}

void OrDie(const Status& st) {
  if (!st.ok()) Die(st.message());
}

void PrintJson(const google::protobuf::Message& m) { std::cout << ToJson(m).dump() << "\n"; }

void Emit(const std::string& data, const std::string& path) {
  if (path.empty()) {
    std::fwrite(data.data(), 1, data.size(), stdout);
    return;
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) Die("cannot write " + path);
  const bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  if (std::fclose(f) != 0 || !ok) Die("cannot write " + path);
}

void AddNodeCommands(CLI::App& app, std::vector<Command>* out) {
  auto json = std::make_shared<bool>(false);
  auto* node =
      app.add_subcommand("node", "what this node has: cores, memory, /dev/shm, GPUs, versions");
  node->add_flag("--json", *json, "print one JSON object");
  out->push_back({node, [json](ShoalClient& c) {
                    auto r = OrDie(c.NodeInfo());
                    if (*json) {
                      PrintJson(r);
                    } else {
                      std::fputs(FormatNode(r).c_str(), stdout);
                    }
                    return 0;
                  }});
}

}  // namespace shoal::cli
