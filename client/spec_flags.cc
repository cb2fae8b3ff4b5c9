#include "client/spec_flags.h"

#include <algorithm>
#include <filesystem>

#include "shared/spec/spec.h"

namespace shoal::cli {

void SpecFlags::Add(CLI::App* cmd, bool lists) {
  for (const auto& f : SpecFields()) {
    if (f.name == "force") {
      force_opt_ = cmd->add_flag("--force", force_, SpecFieldHelp(f));
      continue;
    }
    std::string flag = "--" + f.name;
    for (auto& c : flag)
      if (c == '_') c = '-';
    std::string help = SpecFieldHelp(f) + " [default: " + SpecFieldDefault(f) + "]";
    if (lists) help += f.axis ? "; a comma-separated list makes it an axis" : "; not an axis";
    // No CLI11 delimiter: it drops empty pieces ("1,,2" would be 1 and 2), and each typed value
    // must be kept or refused. Lists are split in Sweep(). No extra arguments either: with them
    // CLI11 reads "[a,b]" as a list, unwrapping a typed name or path.
    options_[f.name] = cmd->add_option(flag, values_[f.name], help)->allow_extra_args(false);
  }
  AddProgramOptions(cmd);
}

// Kind command's program: outside the field table (a list of arguments, not one value).
void SpecFlags::AddProgramOptions(CLI::App* cmd) {
  cmd->add_option("--env", env_,
                  "kind command: NAME=value added to each worker's environment (repeatable; in "
                  "a sweep, NAME=a,b makes it an axis)")
      ->allow_extra_args(false);
  cwd_opt_ = cmd->add_option("--cwd", cwd_,
                             "kind command: the workers' working directory (default: this one; the "
                             "program and its arguments follow --, run as typed, no shell)");
}

// In a sweep, `--env NAME=a,b` makes NAME an axis ("env.NAME"), as a list does any field.
Status SpecFlags::EnvAxes(v1::SweepSpec* sweep) const {
  if (!sweep->base().has_command()) return Status::Ok();  // no program, no environment
  auto* env = sweep->mutable_base()->mutable_command()->mutable_env();
  for (auto it = env->begin(); it != env->end();) {
    const size_t eq = it->find('=');
    if (eq == std::string::npos || it->find(',', eq) == std::string::npos) {
      ++it;
      continue;
    }
    const std::string name = it->substr(0, eq);
    ASSIGN_OR_RETURN(auto values, SplitList("env " + name, it->substr(eq + 1)));
    v1::Axis* a = sweep->add_axes();
    a->set_field("env." + name);
    for (const auto& v : values) a->add_values(v);
    it = env->erase(it);
  }
  return Status::Ok();
}

std::vector<std::string>& ProgramArgs() {
  static std::vector<std::string> args;
  return args;
}

void SpecFlags::SetProgram(v1::ExperimentSpec* spec) const {
  for (const auto& a : ProgramArgs()) spec->mutable_command()->add_argv(a);
  for (const auto& e : env_) spec->mutable_command()->add_env(e);
  if (cwd_opt_ != nullptr && cwd_opt_->count() > 0) {
    spec->mutable_command()->set_cwd(cwd_);
  } else if (!ProgramArgs().empty()) {  // `python3 train.py` means the train.py here, as torchrun
    std::error_code ec;
    const std::string here = std::filesystem::current_path(ec).string();
    if (!ec) spec->mutable_command()->set_cwd(here);
  }
}

std::vector<SpecFlags::Given> SpecFlags::GivenFields() const {
  std::vector<Given> out;
  for (const auto& f : SpecFields()) {
    auto it = options_.find(f.name);
    if (it == options_.end() || it->second->count() == 0) continue;
    out.push_back({&f, values_.at(f.name)});
  }
  return out;
}

StatusOr<v1::ExperimentSpec> SpecFlags::Spec() const {
  v1::ExperimentSpec spec;
  for (const auto& g : GivenFields()) {
    if (g.values.size() != 1) {
      return InvalidArgument(g.field->name + ": given " + std::to_string(g.values.size()) +
                             " times; it takes one value");
    }
    // A field that is no axis (name, balance) or a path may hold commas.
    // A comma inside brackets is an input's dimension's.
    auto parts = SplitList(g.field->name, g.values[0]);
    if (g.field->axis && g.field->name != "dataset" && (!parts.ok() || parts->size() > 1)) {
      return InvalidArgument(g.field->name +
                             ": submit takes one value (a list is a sweep: " + "shoal sweep)");
    }
    RETURN_IF_ERROR(SetSpecField(&spec, *g.field, g.values[0]));
  }
  // --force=no is typed too: it means no (CLI11 counts it as given).
  if (force_opt_ != nullptr && force_opt_->count() > 0) spec.set_force(force_);
  SetProgram(&spec);
  return spec;
}

StatusOr<std::vector<std::string>> SplitList(const std::string& field, const std::string& text) {
  std::vector<std::string> out(1);
  int depth = 0;  // a comma inside [...] is a dimension's, not the list's
  for (char c : text) {
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    if (c == ',' && depth <= 0) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  if (out.size() > 1 && std::count(out.begin(), out.end(), "") > 0)
    return InvalidArgument(field + ": an empty value in the list '" + text + "'");
  return out;
}

StatusOr<v1::SweepSpec> SpecFlags::Sweep() const {
  v1::SweepSpec sweep;
  for (const auto& g : GivenFields()) {
    if (g.values.size() != 1) {
      return InvalidArgument(g.field->name + ": given " + std::to_string(g.values.size()) +
                             " times; " +
                             (g.field->axis ? "a sweep takes one comma-separated list"
                                            : "it takes one value (not an axis)"));
    }
    std::vector<std::string> values = {g.values[0]};
    if (g.field->axis) {
      ASSIGN_OR_RETURN(values, SplitList(g.field->name, g.values[0]));
    }
    if (values.size() == 1) {
      RETURN_IF_ERROR(SetSpecField(sweep.mutable_base(), *g.field, values[0]));
      continue;
    }
    v1::Axis* a = sweep.add_axes();
    a->set_field(g.field->name);
    for (const auto& v : values) a->add_values(v);
  }
  if (force_opt_ != nullptr && force_opt_->count() > 0) sweep.mutable_base()->set_force(force_);
  SetProgram(sweep.mutable_base());
  RETURN_IF_ERROR(EnvAxes(&sweep));
  sweep.set_name(sweep.base().name());
  return sweep;
}

}  // namespace shoal::cli
