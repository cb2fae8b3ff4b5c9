// Helpers for the tests: temporary directories, running a real command, a real shoald.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace shoal::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "shoal-test-").string() + std::string(6, 'X');
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs argv (no shell) and collects stdout, stderr and the exit code.
inline CommandResult RunCommand(const std::vector<std::string>& argv) {
  int out[2], err[2];
  CommandResult r;
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return r;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    ::close(err[0]);
    return r;
  }
  // Drain both pipes without deadlocking on a full one.
  fd_set set;
  bool out_open = true, err_open = true;
  char buf[8192];
  while (out_open || err_open) {
    FD_ZERO(&set);
    if (out_open) FD_SET(out[0], &set);
    if (err_open) FD_SET(err[0], &set);
    if (::select(std::max(out[0], err[0]) + 1, &set, nullptr, nullptr, nullptr) < 0) break;
    for (auto [fd, open, dst] :
         {std::tuple{out[0], &out_open, &r.out}, std::tuple{err[0], &err_open, &r.err}}) {
      if (*open && FD_ISSET(fd, &set)) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) {
          *open = false;
        } else {
          dst->append(buf, size_t(n));
        }
      }
    }
  }
  ::close(out[0]);
  ::close(err[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

#ifdef SHOAL_SOURCE_DIR
// Runs one of tests/models/'s scripts with Debian's PyTorch: the models the tests train are made
// when they run, never committed.
inline CommandResult RunModelScript(const std::string& script,
                                    const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/python3", "-W", "ignore",
                                   std::string(SHOAL_SOURCE_DIR) + "/tests/models/" + script};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

// One run of a tests/models/ script: "{}" in its arguments stands for the output directory.
struct ModelScript {
  std::string script;
  std::vector<std::string> args = {"{}"};
};

// The directory `scripts` fill, made once per build tree and reused while tests/models/ is
// unchanged (the key hashes every script there, the arguments and PyTorch's version): ctest runs
// each test in a process of its own, and scripting torchvision's models took 9 s for each of them.
// Made under a lock in a directory of its own and renamed into place, so tests beside each other
// wait for one maker and never read half a model. Empty, with `error` set, when a script fails.
inline std::string MadeModels(const std::vector<ModelScript>& scripts, std::string* error) {
  namespace fs = std::filesystem;
  const fs::path models = fs::path(SHOAL_SOURCE_DIR) / "tests/models";
  uint64_t key = 1469598103934665603ull;  // FNV-1a over the scripts' text and the arguments
  auto mix = [&key](const std::string& text) {
    for (unsigned char c : text) key = (key ^ c) * 1099511628211ull;
  };
  std::vector<fs::path> sources;
  for (const auto& entry : fs::directory_iterator(models))
    if (entry.path().extension() == ".py") sources.push_back(entry.path());
  std::sort(sources.begin(), sources.end());
  for (const auto& f : sources) {
    std::ifstream in(f, std::ios::binary);
    mix(f.filename().string() + '\0' + std::string(std::istreambuf_iterator<char>(in), {}) + '\0');
  }
  // And the PyTorch that runs them: an upgraded torch or torchvision makes them again.
  for (const char* version : {"/usr/lib/python3/dist-packages/torch/version.py",
                              "/usr/lib/python3/dist-packages/torchvision/version.py"}) {
    std::ifstream in(version, std::ios::binary);
    mix(std::string(std::istreambuf_iterator<char>(in), {}) + '\0');
  }
  for (const auto& s : scripts) {
    mix(s.script + '\0');
    for (const auto& a : s.args) mix(a + '\0');
  }
  const fs::path cache = fs::path(SHOAL_BIN_DIR).parent_path() / "tests/made-models";
  fs::create_directories(cache);
  char name[32];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(key));
  const fs::path done = cache / name;
  const int lock =
      ::open((cache / (std::string(name) + ".lock")).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    *error = "cannot lock " + (cache / name).string() + ".lock";
    if (lock >= 0) ::close(lock);
    return "";
  }
  std::string made = done.string();
  if (!fs::is_directory(done)) {
    const fs::path part = cache / (std::string(name) + ".part");
    std::error_code ec;
    fs::remove_all(part, ec);
    fs::create_directories(part);
    for (const auto& s : scripts) {
      std::vector<std::string> args = s.args;
      for (auto& a : args)
        if (auto at = a.find("{}"); at != std::string::npos) a.replace(at, 2, part.string());
      const CommandResult r = RunModelScript(s.script, args);
      if (r.exit_code != 0) {
        *error = s.script + " failed: " + r.err;
        made.clear();
        break;
      }
    }
    if (!made.empty()) fs::rename(part, done);
  }
  ::close(lock);
  return made;
}

// The models people really train (tests/models/make_zoo.py) and a tiny GPT: one directory for
// every test that trains them (ZooE2E, FiguresE2E), made once.
inline std::string MadeZoo(std::string* error) {
  return MadeModels({{"make_zoo.py"}, {"gpt.py", {"{}/gpt_tiny.pt", "tiny"}}}, error);
}
#endif

// The command's stdout as JSON; null when it is not JSON.
inline nlohmann::json Parse(const CommandResult& r) {
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  return j.is_discarded() ? nlohmann::json() : j;
}

inline constexpr char kFashion[] = "/usr/share/datasets/fashion-mnist";

inline std::string BinDir() { return SHOAL_BIN_DIR; }

// A file's whole text ("" when it cannot be read, as a log not written yet).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// How many of a file's lines hold `part`.
inline int CountLinesWith(const std::string& path, const std::string& part) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(part) != std::string::npos;
  return n;
}

// The step-timeout error's entries "worker I: STEPS (last moved MS ms ago)", in their order.
struct LastMove {
  int worker;
  long long steps, ms_ago;
};
inline std::vector<LastMove> LastMoves(const std::string& error) {
  static const std::regex entry(R"(worker (\d+): (\d+) \(last moved (\d+) ms ago\))");
  std::vector<LastMove> out;
  for (std::sregex_iterator it(error.begin(), error.end(), entry), end; it != end; ++it)
    out.push_back({std::stoi((*it)[1]), std::stoll((*it)[2]), std::stoll((*it)[3])});
  return out;
}

// A real shoald on a temporary socket and state directory.
class Daemon {
 public:
  Daemon(const std::string& state_dir, const std::string& socket)
      : state_(state_dir), socket_(socket) {}
  ~Daemon() { Stop(SIGKILL); }

  // Runs shoald as the last argument of `prefix` (an absolute path first), which must exec it in
  // the same process: `ip netns exec NS ...` puts the daemon in a network namespace.
  void WrapWith(std::vector<std::string> prefix) { prefix_ = std::move(prefix); }

  // `env`: NAME=VALUE entries added to (or replacing) this process's environment for shoald.
  bool Start(const std::vector<std::string>& extra = {}, const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = prefix_;
    for (const char* a :
         {"--socket", socket_.c_str(), "--state-dir", state_.c_str(), "--log-level", "warn"})
      argv.push_back(a);
    argv.insert(argv.begin() + long(prefix_.size()), BinDir() + "/shoald");
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<std::string> entries = env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const std::string name = kv.substr(0, kv.find('=') + 1);
      if (std::none_of(env.begin(), env.end(),
                       [&](const auto& x) { return x.rfind(name, 0) == 0; }))
        entries.push_back(kv);
    }
    std::vector<char*> envp;
    for (auto& kv : entries) envp.push_back(const_cast<char*>(kv.c_str()));
    envp.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0].c_str(), nullptr, nullptr, args.data(), envp.data()) != 0)
      return false;
    // Up to 60 s until it accepts connections, as long as shoald itself gives `shoal-worker
    // --version` (LibTorch loaded from a cold page cache) before it listens; an exit fails at once.
    for (int i = 0; i < 1200; ++i) {
      if (Connectable()) return true;
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Stops the daemon with `sig` and reaps it; returns its wait status.
  int Stop(int sig = SIGTERM) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    return st;
  }
  pid_t pid() const { return pid_; }

  // True when something accepts connections on the socket (a stale file does not count).
  bool Connectable() const {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_.c_str());
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return ok;
  }

  const std::string& socket() const { return socket_; }

  CommandResult Cli(std::vector<std::string> args) const {
    args.insert(args.begin(), {BinDir() + "/shoal", "--socket", socket_});
    return RunCommand(args);
  }

 private:
  std::string state_, socket_;
  std::vector<std::string> prefix_;
  pid_t pid_ = -1;
};

// Alive means running or sleeping: a zombie (dead, waiting for its parent or init to reap it)
// answers kill() but holds no memory and runs nothing.
inline bool ProcessAlive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return false;
  char buf[512] = {0};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string stat(buf, n);
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ||
         (stat[close + 2] != 'Z' && stat[close + 2] != 'X');
}

// Polls `pred` every 50 ms for up to `seconds`.
template <typename Pred>
bool WaitFor(Pred pred, double seconds) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int(seconds * 1000));
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

// A loopback TCP port nothing listens on now (the kernel's choice, released at once).
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace shoal::testing
