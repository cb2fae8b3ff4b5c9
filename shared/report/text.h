// The words and numbers of `shoal get`, shared by the CLI's generic lines (client/format.cc) and
// each kind's own (KindRules::spec_lines, result_lines, detail_lines).
#pragma once

#include <cstdint>
#include <string>

#include "shoal/v1/shoal.pb.h"

namespace shoal::text {

// printf into a string, sized first: an error may be long.
std::string F(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

std::string Gib(uint64_t bytes);  // "1.50 GiB"
std::string Mib(uint64_t bytes);  // "512M"
// An optional figure: "-" when it is unknown.
std::string MibIf(bool known, uint64_t bytes);
std::string GibIf(bool known, uint64_t bytes);
// GiB from 1 GiB up, MiB below: a small model's 5 MB is not "0.00 GiB".
std::string SizeIf(bool known, uint64_t bytes);
std::string MsIf(bool known, double ms);

// "sgd lr 0.01 momentum 0.5 dampening 0 weight_decay 0"
std::string Optimizer(const v1::ExperimentSpec& s);
// "node1: AMD EPYC 7B13, 2 cores, 23.47 GiB, Linux 6.1.0-25; LibTorch 1.13.0, Shoal 0.1.0[; GPU
// 2 x NVIDIA H100, driver 550.54, CUDA 12.4]": a record's host, for `get` and reports.
std::string HostText(const v1::Host& h);
// "batch 64 x 100 batches", "batch 64 x 2 epochs of 6000 samples"
std::string Length(const v1::ExperimentSpec& s);

// How a leader marks worker N's lines of output in the run's log ("[rank 3] ", as torchrun marks
// its ranks'), and how `logs --worker N` finds them.
inline std::string WorkerLinePrefix(uint32_t index) {
  return "[rank " + std::to_string(index) + "] ";
}

using UL = unsigned long;

}  // namespace shoal::text
