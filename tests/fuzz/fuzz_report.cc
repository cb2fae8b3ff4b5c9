// Any bytes as a sweep's report (its sweep and experiments, as `report --from-json` reads them
// from a file): what CheckReportInput lets through renders in every format and plot, compares
// with itself, and comes back from its own JSON as the same Markdown.
#include <cstdio>
#include <cstdlib>

#include "client/report/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shoal::v1::SweepReport r;
  if (!r.ParseFromArray(data, int(size))) return 0;
  const shoal::ReportInput in = shoal::ReportInputOf(r);
  if (!shoal::CheckReportInput(in).ok()) return 0;
  const std::string md = shoal::RenderMarkdown(in);
  shoal::RenderCsv(in);
  for (const char* plot : {"memory", "gpu-memory", "gpu-util", "loss"}) shoal::RenderSvg(in, plot);
  shoal::RenderCompareMarkdown(in, in);
  auto back = shoal::ReportFromJson(nlohmann::json::parse(shoal::RenderJson(in).dump()));
  if (!back.ok()) {
    std::fprintf(stderr, "its own JSON does not read back: %s\n", back.status().message().c_str());
    std::abort();
  }
  if (const std::string again = shoal::RenderMarkdown(*back); again != md) {
    std::fprintf(stderr, "its own JSON reads back as another report:\n%s\n---\n%s\n---\n%s\n",
                 md.c_str(), again.c_str(), shoal::RenderJson(in)["sweep"].dump().c_str());
    std::abort();
  }
  return 0;
}
