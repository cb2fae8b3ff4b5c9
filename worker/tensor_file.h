// A --dataset file (torch.save of {"inputs": ..., "targets": ...}) read in place: the file is
// mapped read-only and each tensor's storage is the mapping at its record's offset (torch.save
// stores its records uncompressed), so reading it makes no copy of the data. Pages come from the
// page cache as they are touched, and the kernel may drop them again (file-backed, clean):
// copying a set into its shared segment holds one anonymous copy, the segment's.
#pragma once

#include <torch/script.h>

#include <string>

#include "shared/status.h"

namespace shoal {

// The file's pickled value, its tensors viewing the mapping (which they keep alive). The mapping
// is read-only: an in-place operation on one of them faults; copy what is to be changed.
// FAILED_PRECONDITION naming what is wrong: not an archive LibTorch reads, a compressed record,
// a tensor past the file's end.
StatusOr<torch::IValue> MapTensorFile(const std::string& path);

// Lets the pages of the file under tensor `t` (a slice of one MapTensorFile returned, contiguous)
// go from this process: they stay in the page cache, and a later read maps them again. The pages
// a neighbouring tensor shares at the slice's edges are kept; any other tensor is left alone.
void ReleaseFilePages(const torch::Tensor& t);

}  // namespace shoal
