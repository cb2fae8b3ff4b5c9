// Samples the memory and CPU of an experiment's processes from /proc without disturbing them.
//
// statm and stat (0.01-0.07 ms each) are read for every process on every tick. smaps_rollup,
// which walks the page tables (1.5-16 ms for a training worker, by machine), is read under a CPU
// budget (default 1% of one core, a token bucket filled with wall time and drained by the measured
// cost of each walk: the cheap reads count in the sampler's CPU but are not charged, or 20
// processes' would starve the walks; a walk may leave it in debt; a process's first walk is not
// rationed), first for processes never walked, then for those whose sharing changed or whose
// pages the others may have mapped since (the others' file+shmem resident grew), the most PSS at
// stake per byte walked first, then for those not walked for refresh_after, then for those whose
// RSS moved most (WalkCandidates says why, and who goes first
// in a tier). A tick whose sums would be the highest yet first walks, outside the budget, the
// processes whose sharing changed, until what may be wrong in the peak is within 1% of it: the
// peaks are the figures a run is judged by (ConfirmPeak).
// Shared pages mapped fast (64 MiB in a tick, or a burst of ticks doubling by half what the walk
// saw) have a share no walk has seen: that process and every big holder of shared pages are
// walked at once, outside the budget, and again when the burst ends (MarkSharingJumps).
// Between walks a process's PSS is estimated from its last walk and statm: anonymous pages added
// since count whole (they are private), while file and shared-memory pages (the shared data and
// weight segments, the libraries) count at the share of them the walk found to be this process's,
// and in USS at the part of them the walk found private (a leader's LibTorch pages are its own).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shared/os/procfs.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct SamplerOptions {
  double budget_fraction = 0.01;  // of one core, for the whole sampler (walks are what it rations)
  uint64_t burst_ns = 5'000'000;  // the bucket holds at most this much CPU time
  uint64_t refresh_after_ns =
      5'000'000'000;             // re-walk an unchanged process this often (budget permitting)
  double move_threshold = 0.02;  // an RSS change above this fraction asks for a walk
};

class ProcessSampler {
 public:
  using CpuClock = std::function<uint64_t()>;  // CPU time of the sampling thread, ns
  ProcessSampler(ProcReader* reader, SamplerOptions opts, CpuClock cpu_clock);

  void Track(pid_t pid, const std::string& role, int index);
  void Untrack(pid_t pid);
  // Every process's sharing may have changed (a worker loaded its libraries, or started
  // training): walk each again, first in line, as the budget allows.
  void MarkAllDue();
  // A reading a tracked process took of its own PSS and USS (a leader's, just before its workers
  // start; USS where it read one): its own peak counts its PSS; the sums, which need every process
  // at one instant, only where it is the one process tracked but for an idle forkserver tree
  // (counted as its last tick read it).
  void NoteOwnReading(pid_t pid, uint64_t pss_bytes,
                      std::optional<uint64_t> uss_bytes = std::nullopt);
  // One tick at monotonic time now_ns; fills processes and totals of `out`.
  void Tick(uint64_t now_ns, v1::Sample* out);

  uint64_t cpu_ns() const { return cpu_ns_; }
  uint64_t smaps_reads() const { return smaps_reads_; }
  uint64_t statm_reads() const { return statm_reads_; }
  // Walks not taken: their Rss outside statm's just before and after them (WalkIsTorn).
  uint64_t torn_walks() const { return torn_walks_; }
  // The peaks over ticks of the sums over processes; unknown (nullopt) until a tick read one.
  std::optional<uint64_t> peak_pss_sum() const { return Known(peak_pss_sum_); }
  std::optional<uint64_t> peak_rss_sum() const { return Known(peak_rss_sum_); }
  std::optional<uint64_t> peak_uss_sum() const { return Known(peak_uss_sum_); }
  // A process's own peak PSS; unknown if no tick ever read it (it died before the first).
  std::optional<uint64_t> PeakPss(pid_t pid) const;
  // The sum over processes of each one's own peak PSS (what N processes each need), beside
  // peak_pss_sum (what the machine held at once); over the processes read.
  std::optional<uint64_t> sum_of_peak_pss() const;
  // Every process a tick read, tracked now or before: its role and its own peak PSS (what
  // sum_of_peak_pss adds up).
  struct Peak {
    std::string role;
    uint64_t pss = 0;
  };
  std::map<pid_t, Peak> Peaks() const;

 private:
  // What a walk found: kept until the next, or given by an idle twin's (ShareWithTwins).
  struct WalkFigures {
    uint64_t rss = 0, pss = 0, uss = 0;  // at the last walk
    uint64_t anon = 0, shared = 0;       // anonymous and file+shmem resident, as the walk saw them
    uint64_t pss_anon = 0, pss_shared = 0;  // the walk's Pss_Anon and Pss_File + Pss_Shmem
    bool split = false;                     // the kernel gave that split
    // The part of its file+shmem resident that was its alone at the walk (USS - Pss_Anon over
    // those pages: a lower bound, exact while no anonymous page is shared with a fork).
    double private_shared_share = 0;
  };
  struct Proc : WalkFigures {
    std::string role;
    int index = -1;
    bool walked = false;
    bool due = false;  // its sharing changed since its walk: walk it again
    // A child of its is new this tick, or left: its pages just gained or lost sharers (the last
    // sharer of a copy-on-write page holds it privately again).
    bool forked = false;
    pid_t ppid = 0;
    uint64_t rss_now = 0, shared_now = 0;
    // The other processes' file+shmem resident at its walk: as they map more, some of it may be
    // its pages, whose share of its PSS falls while its own RSS stands still.
    uint64_t others_shared_at_walk = 0;
    uint64_t walked_at_ns = 0;
    // Minor faults since its walk, in bytes, less what its RSS grew at the ticks they came
    // (tick by tick): what may be copy-on-write breaks, each turning a page it shared into its
    // own with no RSS moving.
    uint64_t faulted = 0;
    uint64_t minflt = 0;  // at its last read
    // The PSS its walks found it gained on the pages it shared (Anonymous - Pss_Anon falling) per
    // byte of those faults, last measured: a step's buffers freed and faulted in again are faults
    // too, and a walk that finds them so keeps them from asking for walks they do not need.
    double cow_per_fault = 1.0;
    uint64_t cpu_ticks = 0, cpu_at_ns = 0;
    uint64_t cpu_ticks_at_walk = 0;     // none since: idle (a forkserver's pool child, say)
    std::optional<double> cpu_percent;  // none until a second reading
    uint64_t peak_pss = 0;
    bool read = false;                 // some tick emitted it: peak_pss is a reading
    std::optional<uint64_t> own_peak;  // the highest reading it gave of itself
    bool gone = false;                 // not readable (exited, or a zombie) at this tick
    // Shared pages jumped (MarkSharingJumps): walk it now, outside the budget.
    bool jumped = false;
    bool bursting = false;          // its shared pages grew 16 MiB or more at its last growing tick
    uint64_t shared_last_tick = 0;  // its file+shmem resident at the tick before
    std::string comm;               // its command name at the last tick (an exec changes it)
  };

  static std::optional<Peak> PeakOf(const Proc& p);
  // Some tick emitted some process (one untracked since left its peak behind).
  bool ReadAny() const;
  std::optional<uint64_t> Known(uint64_t peak) const {
    return ReadAny() ? std::optional<uint64_t>(peak) : std::nullopt;
  }
  void ReadCheap(pid_t pid, Proc& p, uint64_t now_ns);
  void RereadUnwalked(uint64_t now_ns);    // statm and stat again after the tick's walks
  void DropThoseLeaving(uint64_t now_ns);  // those walked this tick that began to exit
  void MarkParentsOfNew();
  // Marks the processes whose shared pages jumped, and those holding many of them; returns whether
  // any did.
  bool MarkSharingJumps();
  uint64_t SharedMoved(const std::map<pid_t, uint64_t>& before) const;
  // Its file+shmem resident by this tick's statm (never above its RSS: the two are read apart).
  static uint64_t SharedNow(const Proc& p) { return std::min(p.shared_now, p.rss_now); }
  uint64_t OthersShared(const Proc& p) const;  // shared_sum_ less p's own
  double SharingRisk(const Proc& p) const;
  static double Mappable(const Proc& p);
  static double MappableNow(const Proc& p);
  static double SharedShare(const Proc& p);
  std::vector<pid_t> WalkCandidates(uint64_t now_ns) const;  // the walks wanted, first first
  // Walks `want` in order, as many as the budget allows where `rationed`; returns their CPU time.
  uint64_t Walk(const std::vector<pid_t>& want, uint64_t now_ns, bool rationed = true);
  // How far its estimate may be off at a new peak: its sharing changed, or a stale walk's risk.
  double Doubt(const Proc& p, uint64_t now_ns, double least_risk, double least_share) const;
  // What the shared pages it mapped since its walk may count too high, each at least least_share.
  static double MappedRisk(const Proc& p, double least_share);
  static double MappedSinceWalk(const Proc& p);
  static double MissedOnMapped(const Proc& p);
  // Walks the stale worker whose estimate may be missing a peak most, once each 500 ms.
  uint64_t WalkMissedPeak(uint64_t now_ns, uint64_t pss_sum);
  // Whether a walk of `walk_rss` counted pages while they moved; if so, takes statm's after it.
  bool WalkIsTorn(pid_t pid, Proc& p, uint64_t walk_rss);
  // How much of its PSS the estimate may be missing: pages it shared becoming its own.
  static double Unseen(const Proc& p);
  // At a walk: how much of its faults since the last were copy-on-write breaks.
  static void LearnCopyOnWrite(Proc& p, const SmapsRollup& r);
  // A pool child's walk is its idle twins' too.
  void ShareWithTwins(pid_t walked, uint64_t now_ns);
  // Its figures are a walk's of now: nothing in doubt, no fault since.
  void MarkWalked(Proc& p, uint64_t now_ns);
  // Walks the processes most in doubt, outside the budget, when this tick's sums would be the
  // highest yet; returns the walks' CPU time.
  uint64_t ConfirmPeak(uint64_t now_ns);
  void Emit(uint64_t now_ns, bool jumped, uint64_t shared_moved, v1::Sample* out);
  // PSS and USS now, from the last walk and this tick's statm.
  static std::pair<uint64_t, uint64_t> Estimate(const Proc& p);

  ProcReader* reader_;
  SamplerOptions opts_;
  CpuClock cpu_clock_;
  uint64_t page_size_;
  double ticks_per_sec_;
  std::map<pid_t, Proc> procs_;
  std::map<pid_t, Peak> finished_peaks_;
  bool ticked_read_ = false;  // some tick emitted some process: the sums are readings
  double tokens_ns_;
  uint64_t last_tick_ns_ = 0;
  uint64_t cpu_ns_ = 0, smaps_reads_ = 0, statm_reads_ = 0, torn_walks_ = 0;
  uint64_t last_missed_walk_ns_ = 0;
  uint64_t peak_pss_sum_ = 0, peak_rss_sum_ = 0, peak_uss_sum_ = 0;
  // How much the peak PSS sum may be above the truth: the doubt left unwalked when it was set.
  double peak_doubt_ = 0;
  uint64_t shared_sum_ = 0;  // this tick's file+shmem resident, summed over the live processes
};

}  // namespace shoal
