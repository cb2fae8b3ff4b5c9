// shoald: the Shoal coordinator daemon. Runs in the foreground; logs to stderr.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include "server/coordinator.h"
#include "server/disturbance.h"
#include "server/energy.h"
#include "server/metrics.h"
#include "server/metrics_http.h"
#include "server/node_info.h"
#include "server/rpc/access.h"
#include "server/rpc/service.h"
#include "server/rpc/unix_listener.h"
#include "server/run_cgroup.h"
#include "server/run_record.h"
#include "server/slurm.h"
#include "shared/endpoint.h"
#include "shared/os/process.h"
#include "shared/os/procfs.h"
#include "shared/spec/cli_checks.h"
#include "spdlog/spdlog.h"

namespace {

// True when something already accepts connections on the socket path.
bool SocketInUse(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  bool used = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return used;
}

struct DaemonArgs {
  std::string socket_path = shoal::DefaultSocketPath(), state_dir = shoal::DefaultStateDir(),
              worker_bin, leader_bin, log_level = "info", socket_group;
  shoal::AccessPolicy access;
  // TCP (opt-in): TLS and bearer tokens, or plaintext on loopback with --insecure.
  std::string listen, tls_cert, tls_key, tls_client_ca, token_file;
  bool insecure = false;
  std::optional<shoal::TokenTable> tokens;
  std::string metrics_listen;
  int max_watchers = 1024;
  uint64_t max_upload_mb = 1024;
  shoal::CoordinatorOptions opts;
  // One-shot: run one sweep point and write its whole record, no socket (a Slurm array task).
  std::string run_point, record_out, profiles_out;
  std::string record_key;  // the sweep's key its record is sealed with (from kRecordKeyEnv)
  // A run across nodes: this node's rank and where node 0 hosts the c10d store (the script's).
  int node_rank = -1;  // -1: not given
  std::string master;
  // Sweeps placed on Slurm: the folder the nodes share for their orders, script and records.
  std::string slurm_dir;
  int slurm_poll_ms = 2000;
  uint64_t run_memory_limit_mib = 0;  // each run's cgroup memory limit; 0: none
  std::string run_cgroups = "yes";    // yes: a cgroup per run where one can be made
};

// Files clients upload (a model, a tensor data set): their size, and how long an unused one stays.
void AddUploadOptions(CLI::App& app, DaemonArgs& d) {
  app.add_option("--max-upload-mb", d.max_upload_mb,
                 "largest file (a model) a client may upload, in MiB")
      ->capture_default_str()
      ->check(shoal::WholeNumber())
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--upload-grace-s", d.opts.upload_grace_s,
                 "an uploaded model no record uses is removed by rm/prune once this old")
      ->capture_default_str()
      ->check(shoal::WholeNumber())
      ->check(CLI::Range(0, 86400 * 365));
}

// TCP beside the unix socket (TLS, tokens) and the metrics endpoint.
void AddTcpOptions(CLI::App& app, DaemonArgs& d) {
  app.add_option("--listen", d.listen, "also serve TCP on HOST:PORT (needs TLS and --token-file)")
      ->check(shoal::NonEmpty());
  app.add_option("--tls-cert", d.tls_cert, "PEM certificate chain for --listen")
      ->check(shoal::NonEmpty());
  app.add_option("--tls-key", d.tls_key, "PEM private key for --listen")->check(shoal::NonEmpty());
  app.add_option("--tls-client-ca", d.tls_client_ca,
                 "PEM CA: TCP clients must present a certificate it signed (mTLS)")
      ->check(shoal::NonEmpty());
  app.add_option("--token-file", d.token_file,
                 "bearer tokens for TCP clients: NAME TOKEN [admin] [commands] per line, mode 0600")
      ->check(shoal::NonEmpty());
  app.add_option("--metrics-listen", d.metrics_listen,
                 "serve Prometheus metrics at http://HOST:PORT/metrics (unauthenticated)")
      ->check(shoal::NonEmpty());
  app.add_flag("--insecure", d.insecure, "allow --listen without TLS, on a loopback address only");
}

// A sweep's point placed on this node by another daemon (a Slurm array task): run it on a daemon
// of its own in --state-dir, write its record, exit.
void AddRunPointOptions(CLI::App& app, DaemonArgs& d) {
  auto* point = app.add_option("--run-point", d.run_point,
                               "run the point this order (JSON, a PointOrder) names, write its "
                               "record to --record-out and exit; no socket")
                    ->check(CLI::ExistingFile);
  auto* out = app.add_option("--record-out", d.record_out,
                             "where --run-point writes the run's record (a RunRecord)");
  point->needs(out);
  out->needs(point);
  app.add_option("--profiles-out", d.profiles_out,
                 "with --run-point: where the run's profiler traces (kind command) are copied "
                 "for the placing daemon")
      ->needs(point);
  // A point over several nodes (data_parallel on Slurm): each node's part, told by the script.
  app.add_option("--node-rank", d.node_rank,
                 "with --run-point over nodes > 1: this node's rank in the allocation")
      ->needs(point)
      ->check(CLI::Range(0, 63));
  app.add_option("--master", d.master,
                 "with --run-point over nodes > 1: HOST:PORT where node 0 hosts the c10d store")
      ->needs(point);
}

// Sweeps placed on Slurm (shoal sweep --slurm): where their files go, how often Slurm is asked.
void AddSlurmOptions(CLI::App& app, DaemonArgs& d) {
  app.add_option("--run-cgroups", d.run_cgroups,
                 "yes: each run in a control group of its own where one can be made (the "
                 "default); no: runs held by their process group and /proc alone (the fallback "
                 "where none can be made)")
      ->check(CLI::IsMember({"yes", "no"}));
  app.add_option("--run-memory-limit-mib", d.run_memory_limit_mib,
                 "each run's memory limit, in MiB, set on its cgroup (needs the cgroup memory "
                 "controller; the kernel's OOM killer then takes a process of the run that "
                 "passes it, and the run fails saying so); 0: none")
      ->check(shoal::WholeNumber());
  app.add_option("--slurm-dir", d.slurm_dir,
                 "where a sweep placed on Slurm keeps each task's order, script, record and "
                 "output: a folder every node reads and writes at the same path (default: "
                 "STATE_DIR/slurm)");
  app.add_option("--slurm-poll-ms", d.slurm_poll_ms,
                 "how often each Slurm job array is looked at (one scontrol call)")
      ->capture_default_str()
      ->check(shoal::WholeNumber())
      ->check(CLI::Range(100, 600000));
}

void AddOptions(CLI::App& app, DaemonArgs& d) {
  auto& opts = d.opts;
  AddRunPointOptions(app, d);
  AddSlurmOptions(app, d);
  // A TOML (or INI) file of the same options, `key = value` with the flag's name ("max-workers =
  // 8"); a flag on the command line overrides the file.
  // An empty name would make CLI11 read no file at all: a unit's unset ${CONF} starting the
  // daemon on built-in defaults.
  app.set_config("--config", "", "read options from this file (flags given here override it)")
      ->check(shoal::NonEmpty("empty: name the configuration file"));
  app.allow_config_extras(false);  // a misspelt key is an error, not silently ignored
  app.add_option("--socket", d.socket_path,
                 "unix socket to listen on (mode 0600); env SHOAL_SOCKET, else "
                 "$XDG_RUNTIME_DIR/shoal.sock, else the default state dir's shoal.sock")
      ->capture_default_str()
      ->check(shoal::NonEmpty());
  app.add_option("--socket-group", d.socket_group,
                 "a group whose members may use the daemon too (the socket becomes 0660)")
      ->check(shoal::NonEmpty());
  AddTcpOptions(app, d);
  app.add_option("--state-dir", d.state_dir, "directory for the SQLite store")
      ->capture_default_str()
      ->check(shoal::NonEmpty());
  app.add_option("--worker-bin", d.worker_bin, "shoal-worker executable (default: next to shoald)")
      ->check(shoal::NonEmpty());
  app.add_option("--leader-bin", d.leader_bin,
                 "shoal-leader executable, the LibTorch-free leader (default: next to shoald)")
      ->check(shoal::NonEmpty());
  app.add_option("--max-workers", opts.limits.max_workers,
                 "most workers one experiment may ask for")
      ->capture_default_str()
      ->check(shoal::WholeNumber())
      ->check(CLI::Range(1, 1024));
  app.add_option("--sampler-budget", opts.sampler.budget_fraction,
                 "CPU share of one core the smaps_rollup walks may use")
      ->capture_default_str()
      ->check(shoal::DecimalNumber())  // no nan, which CLI11's Range lets through
      ->check(CLI::Range(0.0001, 1.0));
  app.add_option("--disturbed-cores", opts.disturbed_cores,
                 "a run is marked disturbed when processes outside it used this many cores on "
                 "average while it ran")
      ->capture_default_str()
      ->check(shoal::DecimalNumber())
      ->check(CLI::Range(0.01, 4096.0));
  app.add_option("--grace-ms", opts.grace_ms, "SIGTERM to SIGKILL grace period")
      ->capture_default_str()
      ->check(shoal::WholeNumber())
      ->check(CLI::Range(0, 600000));
  app.add_option("--forkserver-pool", opts.fork_server_pool,
                 "idle workers the forkserver keeps forked ahead of demand")
      ->capture_default_str()
      ->check(shoal::WholeNumber())
      ->check(CLI::Range(0, 1024));
  app.add_flag("--allow-commands", opts.allow_commands,
               "run kind command (a caller's own program, as this daemon's user) for this uid, "
               "root and tokens marked 'commands'");
  app.add_option("--data-root", opts.limits.data_roots,
                 "a directory datasets must lie under (repeatable; default /usr/share/datasets and "
                 "STATE_DIR/data)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--max-queued", opts.max_queued,
                 "most experiments waiting at once (a sweep's points count; more are refused: "
                 "RESOURCE_EXHAUSTED)")
      ->capture_default_str()
      ->check(shoal::WholeNumber())
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--max-watchers", d.max_watchers,
                 "most concurrent watch streams (more are refused: RESOURCE_EXHAUSTED)")
      ->capture_default_str()
      ->check(shoal::WholeNumber())
      ->check(CLI::Range(1, 1 << 20));
  // spdlog reads an unknown name as "off", which would hide even a critical error.
  app.add_option("--log-level", d.log_level, "trace|debug|info|warn|error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  AddUploadOptions(app, d);
}

}  // namespace

namespace {

// The key the task's record is sealed with, taken out of the environment before any thread or
// child starts: no process of the run (a user's command) sees it. A task of a sweep placed before
// records were sealed has none, and writes its record unsealed, as that daemon reads it.
bool TakeRecordKey(DaemonArgs& d) {
  char* hex = std::getenv(shoal::kRecordKeyEnv);
  if (hex == nullptr) return true;
  auto key = shoal::KeyFromHex(hex);
  // unsetenv alone leaves the bytes in the block /proc/PID/environ shows: overwritten first.
  std::memset(hex, '0', std::strlen(hex));
  ::unsetenv(shoal::kRecordKeyEnv);
  if (!key.ok()) {
    spdlog::critical("{}: {}", shoal::kRecordKeyEnv, key.status().message());
    return false;
  }
  d.record_key = std::move(key).value();
  return true;
}

bool CheckTcp(DaemonArgs& d);

// A short name for a state folder (its absolute path's hash): the runs' cgroups of daemons on
// other state folders are kept apart under one parent.
std::string StateKey(const std::string& state_dir) {
  const std::string path = std::filesystem::absolute(state_dir).lexically_normal().string();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(path));
  return std::string("state-") + hex;
}

// `*path`, or `name` next to shoald when empty; false (logged) when it cannot run.
bool ResolveProgram(const char* what, const char* name, std::string* path) {
  if (path->empty()) *path = shoal::SelfExeDir() + "/" + name;
  if (::access(path->c_str(), X_OK) == 0) return true;
  spdlog::critical("{} executable {} is not runnable: {}", what, *path, std::strerror(errno));
  return false;
}

// Resolves paths and defaults after parsing; false (logged) when the worker cannot run.
bool Resolve(DaemonArgs& d) {
  auto& opts = d.opts;
  if (!ResolveProgram("worker", "shoal-worker", &d.worker_bin) ||
      !ResolveProgram("leader", "shoal-leader", &d.leader_bin))
    return false;
  opts.worker_bin = d.worker_bin;
  opts.leader_bin = d.leader_bin;
  if (opts.limits.data_roots.empty())
    opts.limits.data_roots = {"/usr/share/datasets", d.state_dir + "/data"};
  opts.fork_server_socket = d.state_dir + "/forkserver.sock";
  if (opts.fork_server_socket.size() >=
      sizeof(sockaddr_un{}.sun_path)) {  // else it restarts forever
    spdlog::critical(
        "--state-dir: {} is too long for the forkserver's socket {} (at most {} bytes)",
        d.state_dir, opts.fork_server_socket, sizeof(sockaddr_un{}.sun_path) - 1);
    return false;
  }
  opts.logs_dir = d.state_dir + "/logs";
  opts.profiles_dir = d.state_dir + "/profiles";
  // Absolute: workers open models there, whatever their working directory. Set before any
  // thread starts; every process shoald starts is given it (PassedEnvironmentNames).
  opts.blobs_dir = std::filesystem::absolute(d.state_dir + "/blobs").lexically_normal().string();
  ::setenv("SHOAL_BLOB_DIR", opts.blobs_dir.c_str(), 1);
  opts.max_upload_bytes = d.max_upload_mb << 20;
  // Absolute, as every node reads them: the tasks run elsewhere, from elsewhere.
  opts.slurm.dir =
      std::filesystem::absolute(d.slurm_dir.empty() ? d.state_dir + "/slurm" : d.slurm_dir)
          .lexically_normal()
          .string();
  opts.slurm.shoald = shoal::SelfExeDir() + "/shoald";
  // Private to this daemon, not on the shared file system: the keys its sweeps' records are
  // sealed with.
  opts.slurm.keys_dir = d.state_dir + "/slurm-keys";
  opts.slurm.profiles_dir = d.state_dir + "/profiles";
  // --run-point: the order was admitted by the daemon that placed it (a command only where that
  // one was started with --allow-commands): trusted where only this user can have written it.
  if (!d.run_point.empty()) opts.allow_commands = shoal::WrittenOnlyByMe(d.run_point);
  if (!d.run_point.empty() && !TakeRecordKey(d)) return false;
  opts.slurm_poll = std::chrono::milliseconds(d.slurm_poll_ms);
  d.access.daemon_uid = ::geteuid();
  if (!CheckTcp(d)) return false;
  if (!d.socket_group.empty()) {
    group* g = ::getgrnam(d.socket_group.c_str());
    if (g == nullptr) {
      spdlog::critical("--socket-group: no group named {}", d.socket_group);
      return false;
    }
    d.access.group = g->gr_gid;
  }
  return true;
}

bool IsLoopback(const std::string& host_port) {
  auto hp = shoal::ParseHostPort("listen", host_port);
  return hp.ok() && shoal::IsLoopbackHost(hp->first);
}

// --listen's rules: tokens always; TLS unless the address is loopback and --insecure is given.
// Logs why shoald cannot start as asked; false, for the check that found it to return.
template <typename... Args>
bool Refuse(spdlog::format_string_t<Args...> format, Args&&... args) {
  spdlog::critical(format, std::forward<Args>(args)...);
  return false;
}

bool CheckTcp(DaemonArgs& d) {
  if (d.listen.empty()) {  // TCP's options without TCP: the user meant something else
    for (auto [given, flag] : {std::pair{d.insecure, "--insecure"},
                               {!d.token_file.empty(), "--token-file"},
                               {!d.tls_cert.empty(), "--tls-cert"},
                               {!d.tls_key.empty(), "--tls-key"},
                               {!d.tls_client_ca.empty(), "--tls-client-ca"}})
      if (given) return Refuse("{} needs --listen", flag);
    return true;
  }
  if (d.token_file.empty()) return Refuse("--listen needs --token-file");
  auto tokens = shoal::TokenTable::Load(d.token_file);
  if (!tokens.ok()) return Refuse("{}", tokens.status().message());
  d.tokens = std::move(tokens).value();
  const bool tls = !d.tls_cert.empty() || !d.tls_key.empty();
  if (tls && (d.tls_cert.empty() || d.tls_key.empty()))
    return Refuse("--tls-cert and --tls-key go together");
  if (!d.tls_client_ca.empty() && !tls)  // plaintext would check no client certificate
    return Refuse("--tls-client-ca needs --tls-cert and --tls-key");
  if (tls && d.insecure) return Refuse("--insecure with --tls-*: TLS or plaintext?");
  // From here on the --tls-* options hold the PEM texts, not their paths.
  for (std::string* pem : {&d.tls_cert, &d.tls_key, &d.tls_client_ca}) {
    if (pem->empty()) continue;
    auto text = shoal::ReadSmallFile(*pem);
    if (!text.ok()) return Refuse("{}", text.status().message());
    *pem = std::move(text).value();
  }
  if (!tls && !(d.insecure && IsLoopback(d.listen))) {
    spdlog::critical(
        "--listen {} without TLS: give --tls-cert and --tls-key (plaintext is allowed "
        "only on a loopback address with --insecure)",
        d.listen);
    return false;
  }
  return true;
}

std::shared_ptr<grpc::ServerCredentials> TcpCredentials(const DaemonArgs& d) {
  if (d.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(
      d.tls_client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_key_cert_pairs.push_back({d.tls_key, d.tls_cert});
  o.pem_root_certs = d.tls_client_ca;
  return grpc::SslServerCredentials(o);
}

// The state dir, made 0700 when shoald creates it; one that exists (a group's shared directory)
// keeps its mode.
bool MakeStateDir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return true;
    spdlog::critical("state dir {} exists and is not a directory", dir);
    return false;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    spdlog::critical("cannot create state dir {}: {}", dir, ec.message());
    return false;
  }
  ::chmod(dir.c_str(), 0700);
  return true;
}

// One shoald per state dir: a lock on the directory itself, held until exit, which a cleaner
// cannot delete from under it as it could a lock file's name.
bool LockStateDir(const std::string& dir) {
  if (::access(dir.c_str(), W_OK) != 0) {
    spdlog::critical("cannot use state dir {}: {}", dir, std::strerror(errno));
    return false;
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // held until exit
  if (fd < 0) {
    spdlog::critical("cannot use state dir {}: {}", dir, std::strerror(errno));
    return false;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      spdlog::critical("another shoald uses state dir {}", dir);
    } else {
      spdlog::critical("cannot lock state dir {}: {}", dir, std::strerror(errno));
    }
    return false;
  }
  return true;
}

// The socket's path: free, or a socket nobody listens on (a crashed daemon's). Anything else
// there is not shoald's to delete.
bool FreeSocketPath(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  // A directory made here for the socket (the default state directory's when --state-dir is
  // another) is the user's alone, as the state directory is.
  if (!dir.empty() && std::filesystem::create_directories(dir, ec))
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return true;
  if (!S_ISSOCK(st.st_mode)) {
    spdlog::critical("--socket {}: something that is not a socket is there; not removing it", path);
    return false;
  }
  if (SocketInUse(path)) {
    spdlog::critical("another process is listening on {}", path);
    return false;
  }
  ::unlink(path.c_str());
  return true;
}

// The state directory, its lock (one daemon per directory) and a free socket path.
bool ClaimStateDir(const DaemonArgs& d) {
  return MakeStateDir(d.state_dir) && LockStateDir(d.state_dir) &&
         (!d.run_point.empty() || FreeSocketPath(d.socket_path));
}

// Signals are taken by sigwait in main; every thread started after this inherits the mask.
sigset_t BlockSignals() {
  // Orphaned workers of a dead leader are reparented to us, so we can reap and account for them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return sigs;
}

// A gRPC server with no port of its own: the unix listener hands it each connection it accepts,
// with the peer's credentials recorded.
// With --listen it also listens on TCP itself.
std::unique_ptr<grpc::Server> StartServer(const DaemonArgs& d,
                                          grpc::CallbackGenericService* service) {
  // The standard grpc.health.v1.Health service, so stock probes can ask; it sits beside the
  // generic service (which takes only the methods no registered service has).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(service);
  // A client may ping every 2 s on a quiet watch (gRPC keepalive) to notice a dead daemon:
  // accept that rather than answer with GOAWAY "too many pings".
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  int port = 0;
  if (!d.listen.empty()) builder.AddListeningPort(d.listen, TcpCredentials(d), &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server && !d.listen.empty() && port == 0) {
    spdlog::critical("cannot listen on {}", d.listen);
    return nullptr;
  }
  if (server) server->GetHealthCheckService()->SetServingStatus("shoal.v1.Shoal", true);
  if (server && !d.listen.empty())
    spdlog::info("listening on {} ({}, {} tokens)", d.listen,
                 d.tls_cert.empty() ? "plaintext, loopback" : "TLS", d.tokens->size());
  return server;
}

// The --metrics-listen endpoint, or none without the flag; false when it cannot listen.
// `build`: the versions `shoal node` lists, shoal_build_info's labels.
bool StartMetrics(const DaemonArgs& d, shoal::Coordinator& coord,
                  std::map<std::string, std::string> build,
                  std::unique_ptr<shoal::MetricsServer>* metrics) {
  if (d.metrics_listen.empty()) return true;
  auto started = shoal::MetricsServer::Start(d.metrics_listen, [&coord, build] {
    auto m = coord.Metrics();
    if (m.ok()) m->node.build = build;
    return m.ok() ? shoal::RenderMetrics(*m) : "# " + m.status().message() + "\n";
  });
  if (!started.ok()) {
    spdlog::critical("{}", started.status().message());
    return false;
  }
  *metrics = std::move(started).value();
  spdlog::info("metrics on http://{}/metrics", d.metrics_listen);
  return true;
}

// --run-point: the point's run to its end and its record written (a failed run too: the record
// says why), then shut down. A signal (scancel's SIGTERM) cancels the run, whose record is still
// written. 0 when the record was written.
int RunPointOnce(const DaemonArgs& d, shoal::Coordinator& coord, shoal::Store* store,
                 sigset_t sigs) {
  auto order = shoal::ReadPointOrder(d.run_point);
  if (!order.ok()) {
    spdlog::critical("{}", order.status().message());
    coord.Shutdown();
    return 1;
  }
  if (d.node_rank >= 0 || !d.master.empty()) {  // this node's part of a run across nodes
    shoal::v1::ExperimentSpec* spec = order->mutable_spec();
    if (d.node_rank >= 0) spec->set_node_rank(uint32_t(d.node_rank));
    if (!d.master.empty()) spec->set_master(d.master);
  }
  coord.Start();
  // Static: the detached thread may outlive this frame (a signal while the process exits).
  static std::atomic<bool> stop{false};
  std::thread([sigs] {  // detached: it ends with the process
    int sig = 0;
    sigwait(&sigs, &sig);
    stop = true;
  })
      .detach();
  auto record = shoal::RunPoint(&coord, store, *order, &stop);
  // Out of the throwaway state, which goes with this task.
  if (record.ok() && !d.profiles_out.empty()) shoal::ShipProfileTraces(&*record, d.profiles_out);
  shoal::Status written =
      record.ok() ? shoal::WriteRunRecord(*record, d.record_out, d.record_key) : record.status();
  if (!written.ok()) spdlog::critical("point {}: {}", order->index(), written.message());
  coord.Shutdown();
  return written.ok() ? 0 : 1;
}

// Runs the daemon until a signal; returns the exit code.
// The options as this machine sets them: what the worker's LibTorch and NVML allow, and the host
// every record names (from `node`, read once at start).
shoal::CoordinatorOptions OptionsHere(const DaemonArgs& d, const shoal::WorkerInfo& worker,
                                      shoal::GpuMonitor* gpu,
                                      const shoal::v1::NodeInfoResponse& node) {
  shoal::CoordinatorOptions opts = d.opts;
  opts.limits.cuda_missing = shoal::CudaMissing(gpu->Probe(), worker);
  opts.limits.cuda_devices = uint32_t(std::max(0, worker.cuda_devices));
  opts.limits.bf16_missing = shoal::Bf16MissingHere();
  if (!opts.limits.cuda_missing.empty())
    spdlog::info("device cuda unavailable: {}", opts.limits.cuda_missing);
  opts.host = shoal::HostOf(node);
  opts.run_memory_limit_bytes = d.run_memory_limit_mib << 20;
  return opts;
}

// A control group per run, under this daemon's own, keyed by its state folder; none (and why in
// `no_cgroup`) where none can be made. `ok` false: a memory limit was asked that none can hold.
std::unique_ptr<shoal::RunCgroups> OpenRunCgroups(const DaemonArgs& d, std::string* no_cgroup,
                                                  bool* ok) {
  const bool wanted = d.run_cgroups == "yes";
  auto cgroups = wanted ? shoal::MakeRunCgroups(StateKey(d.state_dir), no_cgroup)
                        : std::unique_ptr<shoal::RunCgroups>();
  if (!wanted) *no_cgroup = "--run-cgroups no";
  if (!cgroups) spdlog::info("runs are held by their process group and /proc: {}", *no_cgroup);
  if (d.run_memory_limit_mib > 0 && (!cgroups || cgroups->memory().empty())) {
    spdlog::critical("--run-memory-limit-mib needs a cgroup memory controller for the runs: {}",
                     cgroups ? "none is available to shoald's cgroup" : *no_cgroup);
    *ok = false;
  }
  return cgroups;
}

// The gRPC service on the socket (and TCP) until a signal, then shut down in order.
int ServeClients(const DaemonArgs& d, const sigset_t& sigs, shoal::Coordinator& coord,
                 shoal::TelemetryHub& hub, const shoal::WorkerInfo& worker, shoal::GpuMonitor* gpu,
                 uint32_t max_workers) {
  shoal::PeerTable peers;
  auto identify = [&](grpc::GenericCallbackServerContext* ctx) -> shoal::StatusOr<shoal::Caller> {
    std::optional<std::string> auth;
    const auto& md = ctx->client_metadata();
    if (auto it = md.find("authorization"); it != md.end())
      auth = std::string(it->second.data(), it->second.size());
    return shoal::IdentifyCaller(ctx->peer(), auth, peers, d.access,
                                 d.tokens ? &*d.tokens : nullptr);
  };
  shoal::ShoalService service(
      &coord, &hub,
      [&] {
        auto info = shoal::CollectNodeInfo(d.state_dir, max_workers, worker, gpu);
        info.set_fork_server_pid(coord.fork_server_pid());
        info.set_fork_server_restarts(static_cast<uint32_t>(coord.fork_server_restarts()));
        return info;
      },
      identify, d.max_watchers);
  std::unique_ptr<grpc::Server> server = StartServer(d, &service);
  if (!server) {
    spdlog::critical("the gRPC server did not start");
    return 1;
  }
  // Last: a client that finds the socket accepting finds the whole daemon up (TCP, /metrics).
  auto listener = shoal::UnixListener::Open(d.socket_path, d.access.group);
  if (!listener.ok()) {
    spdlog::critical("cannot listen on unix:{}: {}", d.socket_path, listener.status().message());
    server->Shutdown(std::chrono::system_clock::now());
    return 1;
  }
  (*listener)->Serve(server.get(), &peers);
  spdlog::info("listening on unix:{} (state {}, worker {}, libtorch {})", d.socket_path,
               d.state_dir, d.worker_bin, worker.torch_version);
  int sig = 0;
  sigwait(&sigs, &sig);
  spdlog::info("signal {}: shutting down", sig);
  server->GetHealthCheckService()->Shutdown();  // probes see NOT_SERVING while we stop
  listener->reset();                            // no new connections
  coord.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

int Serve(const DaemonArgs& d, const sigset_t& sigs) {
  const shoal::WorkerInfo worker = shoal::QueryWorker(d.worker_bin);
  if (worker.torch_version.rfind("unknown", 0) == 0)
    spdlog::warn("{}: experiments will fail until it runs", worker.cuda_why);
  const std::unique_ptr<shoal::GpuMonitor> gpu = shoal::OpenNvml();
  const auto node =
      shoal::CollectNodeInfo(d.state_dir, d.opts.limits.max_workers, worker, gpu.get());
  const shoal::CoordinatorOptions opts = OptionsHere(d, worker, gpu.get(), node);
  auto store = shoal::Store::Open(d.state_dir + "/shoal.db");
  if (!store.ok()) {
    spdlog::critical("{}", store.status().message());
    return 1;
  }
  shoal::TelemetryHub hub;
  shoal::RealProcReader procfs;
  shoal::RealProcessControl proc;
  shoal::RealChildWaiter waiter;
  shoal::RealSegmentJanitor segments;
  shoal::RealClock clock;
  const auto machine = shoal::RealMachineProcs();
  const auto cpu_energy = shoal::PowercapEnergy();
  // Slurm's tools, run beside the coordinator's one reaper (RunCapturingOutput says how).
  const auto slurm = shoal::MakeSlurm(
      [&proc](const std::vector<std::string>& argv, const std::vector<std::string>& env) {
        return shoal::RunCapturingOutput(&proc, argv, std::chrono::seconds(15), env);
      });
  std::string no_cgroup;
  bool cgroups_ok = true;
  const auto cgroups = OpenRunCgroups(d, &no_cgroup, &cgroups_ok);
  if (!cgroups_ok) return 1;
  shoal::Coordinator coord(opts, store->get(), &hub,
                           {&proc, &waiter, &segments, &clock, &procfs, gpu.get(), machine.get(),
                            cpu_energy.get(), slurm.get(), cgroups.get(), no_cgroup.c_str()});
  if (auto st = coord.Recover(); !st.ok()) {
    spdlog::critical("recovery: {}", st.ToString());
    return 1;
  }
  if (!d.run_point.empty()) return RunPointOnce(d, coord, store->get(), sigs);
  std::unique_ptr<shoal::MetricsServer> metrics;
  const auto& versions = node.versions();
  if (!StartMetrics(d, coord, {versions.begin(), versions.end()}, &metrics)) return 1;
  coord.Start();
  return ServeClients(d, sigs, coord, hub, worker, gpu.get(), opts.limits.max_workers);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoald: the Shoal coordinator daemon"};
  DaemonArgs d;
  d.opts.limits.cores = static_cast<uint32_t>(sysconf(_SC_NPROCESSORS_ONLN));
  AddOptions(app, d);
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(d.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ shoald: %v");
  if (!Resolve(d) || !ClaimStateDir(d)) return 1;
  const sigset_t sigs = BlockSignals();
  return Serve(d, sigs);
}
