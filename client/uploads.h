// A model file named by its local path on the command line travels to shoald before the spec
// does: uploaded (ShoalClient::Upload), then named in the spec by what the daemon stored it as
// ("sha256:<hex>"). A value that already is such a name is sent as it is. With a model file, a
// --dataset naming a file here (a tensor file) travels the same way.
#pragma once

#include "client/shoal_client.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal::cli {

Status UploadModelFiles(ShoalClient& c, v1::ExperimentSpec* spec);
// The base spec's and every value of a model_file axis.
Status UploadModelFiles(ShoalClient& c, v1::SweepSpec* sweep);

}  // namespace shoal::cli
