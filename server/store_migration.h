// Records written before a field moved are read as they are now: issue 55 moved each kind's
// spec fields into its message of ExperimentSpec.settings and its figures into Result.kind_result.
// An older body parses with those fields as unknown ones (proto3 keeps them); these move them
// where they live now, by their old numbers, and drop nothing else.
#pragma once

#include "shoal/v1/shoal.pb.h"

namespace shoal {

void MigrateSpec(v1::ExperimentSpec* spec);
void MigrateRecord(v1::Experiment* e);
void MigrateRecord(v1::Sweep* s);
template <typename Msg>
void MigrateRecord(Msg*) {}  // events and samples: nothing moved

}  // namespace shoal
