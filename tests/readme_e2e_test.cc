// README.md's "real output" blocks cannot drift from what the commands print (issue 58): each
// block that starts with `$ shoal submit` is run against a real shoald, and the shape of what it
// printed (the label of every line: `uploaded`, `experiment`, `spec`, `memory`, ...; the figures
// may differ from machine to machine, the lines may not) must be the block's.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testutil.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::Daemon;

struct Example {
  std::string command;               // the `$ shoal ...` line(s), continuations joined
  std::vector<std::string> printed;  // the lines after it
};

// The fenced blocks of `text` whose first line starts with `prefix` ("$ shoal submit").
std::vector<Example> Examples(const std::string& text, const std::string& prefix) {
  std::vector<Example> out;
  std::istringstream in(text);
  std::string line;
  bool fenced = false, wanted = false, continued = false;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      fenced = !fenced;
      wanted = false;
      continue;
    }
    if (!fenced) continue;
    if (!wanted && out.size() < 16 && line.rfind(prefix, 0) == 0) {
      out.push_back({line.substr(2), {}});
      wanted = true;
      continued = line.back() == '\\';
      if (continued) out.back().command.pop_back();
    } else if (wanted && continued) {
      continued = line.back() == '\\';
      out.back().command += " " + line.substr(line.find_first_not_of(' '));
      if (continued) out.back().command.pop_back();
    } else if (wanted) {
      out.back().printed.push_back(line);
    }
  }
  return out;
}

// The words of a shell command line: spaces split, single quotes keep (what the README uses).
std::vector<std::string> ShellWords(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool quoted = false, any = false;
  for (char c : line) {
    if (c == '\'') {
      quoted = !quoted;
      any = true;
    } else if (c == ' ' && !quoted) {
      if (any) words.push_back(word);
      word.clear();
      any = false;
    } else {
      word += c;
      any = true;
    }
  }
  if (any) words.push_back(word);
  return words;
}

// A line's label: `experiment` and `uploaded` lines by their first word, a field line (two
// spaces, a label padded to 11) by its label; rows under a label (a table's, a continuation) and
// `...` lines have none.
std::vector<std::string> Labels(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  for (const std::string& l : lines) {
    if (l.rfind("experiment ", 0) == 0 || l.rfind("uploaded ", 0) == 0) {
      out.push_back(l.substr(0, l.find(' ')));
    } else if (l.size() > 3 && l.rfind("  ", 0) == 0 &&
               std::isalpha(static_cast<unsigned char>(l[2]))) {
      std::string label = l.substr(2, 11);  // "  %-11s value"
      label.erase(label.find_last_not_of(' ') + 1);
      out.push_back(label);
    }
  }
  return out;
}

class ReadmeE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    models_ = testing::MadeModels({{"make_models.py"}}, &error);
    ASSERT_FALSE(models_.empty()) << error;
    fs::copy_file(models_ + "/bench_cnn.pt", dir_ / "mynet.pt");
    fs::create_directories(dir_ / "out");
    fs::copy_file(std::string(SHOAL_SOURCE_DIR) + "/bench/command_train.py", dir_ / "train.py");
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    ASSERT_TRUE(daemon_->Start({"--allow-commands"}));
  }
  // The example's command as run here: its files are this test's, its paths this checkout's.
  std::vector<std::string> Args(const std::string& command) const {
    std::vector<std::string> words = ShellWords(command);
    std::vector<std::string> args;
    for (size_t i = 1; i < words.size(); ++i) {  // words[0] is `shoal`
      std::string w = words[i];
      if (w == "mynet.pt" || w == "train.py" || w == "out") w = dir_ / w;
      if (w.rfind("PYTHONPATH=", 0) == 0)
        w = "PYTHONPATH=" + std::string(SHOAL_SOURCE_DIR) + "/client/python";
      args.push_back(w);
    }
    return args;
  }
  testing::TempDir dir_;
  std::string models_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(ReadmeE2E, EverySubmitExampleHasTheShapeItsCommandPrints) {
  std::ifstream in(std::string(SHOAL_SOURCE_DIR) + "/README.md");
  const std::vector<Example> examples =
      Examples(std::string((std::istreambuf_iterator<char>(in)), {}), "$ shoal submit");
  ASSERT_EQ(examples.size(), 2u);  // your model, your script: a third one is checked too
  for (const Example& ex : examples) {
    const CommandResult r = daemon_->Cli(Args(ex.command));
    ASSERT_EQ(r.exit_code, 0) << ex.command << "\n" << r.out << r.err;
    std::vector<std::string> printed;
    std::istringstream lines(r.err + r.out);  // `uploaded` is on stderr, the record on stdout
    for (std::string l; std::getline(lines, l);)
      if (l.rfind("uploaded ", 0) == 0 || l.rfind("experiment ", 0) == 0 || l.rfind("  ", 0) == 0)
        printed.push_back(l);
    EXPECT_EQ(Labels(printed), Labels(ex.printed))
        << ex.command << "\nprinted:\n"
        << r.out << "\n(regenerate the README block from it)";
  }
}

// The sweep example's block is an excerpt (`...`): every table it shows (its `## ` headings, in
// order) must still be printed, run here with one repeat of 2 batches a point (what it prints,
// not how long it takes).
TEST_F(ReadmeE2E, TheSweepExamplePrintsTheTablesItsBlockShows) {
  std::ifstream in(std::string(SHOAL_SOURCE_DIR) + "/README.md");
  const std::vector<Example> examples =
      Examples(std::string((std::istreambuf_iterator<char>(in)), {}), "$ shoal sweep");
  ASSERT_EQ(examples.size(), 1u);
  std::vector<std::string> args = Args(examples[0].command);
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--repeats") args[i + 1] = "1";
    if (args[i] == "--batches") args[i + 1] = "2";
  }
  const CommandResult r = daemon_->Cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto headings = [](const std::vector<std::string>& lines) {
    std::vector<std::string> out;
    for (const auto& l : lines)
      if (l.rfind("## ", 0) == 0) out.push_back(l);
    return out;
  };
  std::vector<std::string> printed;
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);) printed.push_back(l);
  const std::vector<std::string> shown = headings(examples[0].printed), all = headings(printed);
  ASSERT_FALSE(shown.empty());
  size_t at = 0;  // each shown heading found after the one before it
  for (const std::string& h : shown) {
    while (at < all.size() && all[at] != h) ++at;
    EXPECT_LT(at, all.size()) << "'" << h << "' is not printed (in this order):\n" << r.out;
  }
}

}  // namespace
}  // namespace shoal
