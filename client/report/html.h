// A sweep's report as one self-contained HTML file to hand on: every table with its footnotes
// and the spread of repeated cells, the pictures as inline SVG, the fixed fields, the node the
// sweep ran on (CPU, memory, GPUs, driver, versions) and the environment its processes had. No
// script, no stylesheet, image or font from elsewhere: a browser with nothing installed and no
// network shows all of it.
#pragma once

#include <string>

#include "client/report/report.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

// `node`: the daemon's NodeInfo when the report came from it; null for a report read from a file
// (the page says the node was not recorded).
std::string RenderHtml(const ReportInput& in, const v1::NodeInfoResponse* node);

// The report in one of `shoal report`'s text formats (md, csv, json, html, svg) with svg's
// `plot` (empty: memory, loss for an optimiser sweep): what the CLI prints and what the daemon's
// Report answers. INVALID_ARGUMENT naming what cannot be drawn or does not apply.
StatusOr<std::string> RenderReport(const ReportInput& in, const std::string& format,
                                   const std::string& plot, const v1::NodeInfoResponse* node);

}  // namespace shoal
