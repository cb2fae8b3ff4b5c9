// The "real output" blocks of README.md and docs/ cannot drift from what their commands print
// (issue 58): deploy/examples.py runs every block that starts with `$ shoal` against a real
// shoald and fails when the shape of what a command printed (its keys: `experiment`, each field
// line's label, `## ` headings, tables' header rows; figures may differ from machine to machine,
// the lines may not) is not its block's; `deploy/examples.py --write` writes the blocks from the
// current build. Here it runs cut short (--quick: fewer repeats, batches, samples, iterations).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/testutil.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::Daemon;

class ExamplesE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    models_ = testing::MadeModels({{"make_models.py"}}, &error);
    ASSERT_FALSE(models_.empty()) << error;
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    ASSERT_TRUE(daemon_->Start({"--allow-commands"}));
  }
  // deploy/examples.py --check --quick over `files` (paths in this checkout).
  CommandResult Check(const std::vector<std::string>& files) const {
    std::vector<std::string> argv = {
        "/usr/bin/python3", std::string(SHOAL_SOURCE_DIR) + "/deploy/examples.py",
        "--check",          "--quick",
        "--bin-dir",        testing::BinDir(),
        "--socket",         daemon_->socket(),
        "--models",         models_};
    for (const auto& f : files)
      argv.push_back(f.front() == '/' ? f : std::string(SHOAL_SOURCE_DIR) + "/" + f);
    return testing::RunCommand(argv);
  }
  testing::TempDir dir_;
  std::string models_;
  std::unique_ptr<Daemon> daemon_;
};

// The Markdown files under docs/ (this checkout's).
std::vector<std::string> DocsPages() {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(std::string(SHOAL_SOURCE_DIR) + "/docs"))
    if (e.path().extension() == ".md") out.push_back(e.path().string());
  return out;
}

TEST_F(ExamplesE2E, TheReadmesExamplesHaveTheShapeTheirCommandsPrint) {
  const CommandResult r = Check({"README.md"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << "(deploy/examples.py --write rewrites them)";
  // Your model, your script, a sweep: a fourth one is checked too.
  EXPECT_NE(r.out.find("3 examples in 1 files"), std::string::npos) << r.out;
}

TEST_F(ExamplesE2E, TheDocsExamplesHaveTheShapeTheirCommandsPrint) {
  const CommandResult r = Check(DocsPages());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << "(deploy/examples.py --write rewrites them)";
  // hogwild, baseline, data_loading (2), data_parallel (2), multi_model, figures, sweeps.
  EXPECT_NE(r.out.find("9 examples in "), std::string::npos) << r.out;
}

// The check can fail: a block missing a line its command prints, and one whose excerpt shows a
// table no longer printed, are each named with what differs.
TEST_F(ExamplesE2E, ABlockWhoseShapeDiffersFromWhatItsCommandPrintsFails) {
  std::ofstream(dir_ / "page.md") << "```\n"
                                     "$ shoal submit --kind baseline --workers 1 --touch-mib 8 "
                                     "--wait\n"
                                     "experiment x0123456789  succeeded\n"
                                     "  spec        baseline, 1 workers\n"
                                     "  memory      peak PSS sum 0.26 GiB\n"
                                     "```\n\n"
                                     "```\n"
                                     "$ shoal get x0123456789\n"
                                     "...\n"
                                     "## A table no command prints\n"
                                     "```\n";
  const CommandResult r = Check({dir_ / "page.md"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("2 examples in 1 files"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("page.md:2: `shoal submit --kind baseline"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the block's keys: ['experiment', 'spec', 'memory']"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("'leader', 'time'"), std::string::npos) << r.out;  // what it printed
  EXPECT_NE(r.out.find("page.md:9: `shoal get x"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace shoal
