// Which of a run's sample ticks the store keeps: at most `max` of them, evenly spaced. When full,
// every other kept sample goes and from then on every other tick is kept, so a long run keeps its
// whole history at a coarser interval and a short one every tick.
#pragma once

#include <cstdint>
#include <functional>

#include "shoal/v1/shoal.pb.h"

namespace shoal {

class SampleKeeper {
 public:
  // `add` stores one sample; `thin` deletes every other one stored so far (of this keeper's).
  SampleKeeper(std::function<void(const v1::Sample&)> add, std::function<void()> thin, uint64_t max)
      : add_(std::move(add)), thin_(std::move(thin)), max_(max) {}

  void Offer(const v1::Sample& s) {
    if (!add_ || ticks_++ % keep_every_ != 0) return;
    if (kept_ == max_ && thin_) {
      thin_();
      kept_ /= 2;
      keep_every_ *= 2;
    }
    add_(s);
    ++kept_;
  }

 private:
  std::function<void(const v1::Sample&)> add_;
  std::function<void()> thin_;
  uint64_t max_;
  uint64_t ticks_ = 0, kept_ = 0, keep_every_ = 1;
};

}  // namespace shoal
