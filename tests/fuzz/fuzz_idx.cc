// Any bytes as an IDX image, in memory and as a file (raw, and gzipped whole): the parser and the
// streaming reader never crash, never read past what a header promises, and agree.
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <string>

#include "shared/idx.h"

namespace {

std::string TempPath(const char* suffix) {
  return "/tmp/shoal-fuzz-idx-" + std::to_string(::getpid()) + suffix;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = shoal::ParseIdx(data, size, "input");
  const std::string raw = TempPath(".idx"), gz = TempPath(".idx.gz");
  if (FILE* f = std::fopen(raw.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  auto from_file = shoal::ReadIdxFile(raw);
  // A raw file that is not gzip reads as the bytes do.
  if (size < 2 || data[0] != 0x1f || data[1] != 0x8b) {
    if (parsed.ok() != from_file.ok()) std::abort();
    if (parsed.ok() && parsed->data != from_file->data) std::abort();
  }
  if (gzFile g = gzopen(gz.c_str(), "wb")) {
    gzwrite(g, data, unsigned(size));
    gzclose(g);
  }
  auto from_gz = shoal::ReadIdxFile(gz);
  if (parsed.ok() != from_gz.ok()) std::abort();
  (void)shoal::ReadIdxFile(gz, "", /*body=*/false);
  return 0;
}
