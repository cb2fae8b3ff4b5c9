// The spec's fields as command-line options: one per field of shared/spec/spec_fields.h, spelled
// --field-name. Only what the user typed is sent: a field left out is absent on the wire and
// shoald fills it from its one table of defaults.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "shared/spec/spec_fields.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal::cli {

// "1,2,4" -> 1, 2, 4; a comma inside brackets stays ("float32[B,3,32,32],float32[B,784]" is
// two values); an empty piece ("1,,2", "1,") is refused, not dropped.
StatusOr<std::vector<std::string>> SplitList(const std::string& field, const std::string& text);

// What followed `--` on the command line (kind command's program and its arguments): main takes
// it off before CLI11 parses the rest, so a stray argument elsewhere is still refused.
std::vector<std::string>& ProgramArgs();

class SpecFlags {
 public:
  // `lists`: each option takes a comma-separated list (sweep); otherwise one value (submit).
  void Add(CLI::App* cmd, bool lists);
  // A spec with exactly the given fields set. Refuses a list.
  StatusOr<v1::ExperimentSpec> Spec() const;
  // One value: fixed in the base spec; a list: an axis.
  StatusOr<v1::SweepSpec> Sweep() const;

 private:
  struct Given {
    const SpecField* field;
    std::vector<std::string> values;
  };
  std::vector<Given> GivenFields() const;
  void AddProgramOptions(CLI::App* cmd);
  void SetProgram(v1::ExperimentSpec* spec) const;
  Status EnvAxes(v1::SweepSpec* sweep) const;

  std::map<std::string, std::vector<std::string>> values_;
  std::map<std::string, CLI::Option*> options_;
  bool force_ = false;
  CLI::Option* force_opt_ = nullptr;
  std::vector<std::string> env_;  // kind command's extra environment
  std::string cwd_;
  CLI::Option* cwd_opt_ = nullptr;
};

}  // namespace shoal::cli
