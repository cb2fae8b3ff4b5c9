// What arrives over the wire is checked here before anything is stored, echoed or acted on: ids in
// the daemon's own format, every string bounded and printable, every list bounded. Errors name the
// field and quote at most a short, escaped prefix of a bad value.
#pragma once

#include <string>
#include <string_view>

#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

constexpr size_t kMaxNameBytes = 128;   // experiment and sweep names
constexpr size_t kMaxPathBytes = 4095;  // dataset directories (PATH_MAX less the NUL)
constexpr size_t kMaxRefBytes = 71;     // an uploaded file: "sha256:" and 64 hex digits
constexpr size_t kMaxInputBytes = 512;  // a model file's inputs: up to 8 specs
constexpr size_t kMaxWordBytes = 64;    // every other string: kind, model, start, axis values, ...
// A host name (253 bytes in DNS), or an IPv6 address in brackets, and a port: `master`.
constexpr size_t kMaxHostPortBytes = 253 + 2 + 1 + 5;
// Comma-separated lists bounded by their own rules (a stage's layer count per stage, device
// ordinals): balance, cuda_devices.
constexpr size_t kMaxListBytes = 64 * (kMaxHostPortBytes + 1);
constexpr int kMaxAxisValues = 256;  // values of one sweep axis (the grid has its own bound)

// 'value' with control and non-ASCII bytes as \xNN, cut after 40 characters with the full size.
std::string QuoteShort(std::string_view value);
// `value` safe to print on a terminal: valid UTF-8 without control characters (C0, DEL, C1) as
// it is, every other byte as \xNN. For whatever came from a server or another user.
std::string PrintableText(std::string_view value);
// PrintableText on every string of the message and of the messages in it (map keys included).
void MakePrintable(google::protobuf::Message* m);

// An experiment id ("x" + 10 hex digits) or a sweep id ("s" + 10 hex digits); `prefixes` says
// which are accepted here ("x", "s" or "xs").
Status CheckId(std::string_view id, std::string_view prefixes);

// Printable (no control bytes) and at most `max` bytes.
Status CheckText(const std::string& field, std::string_view value, size_t max);

// Every string field of a spec (its optimiser's too) within its bound and printable.
Status CheckSpecStrings(const v1::ExperimentSpec& spec);
// The same for a sweep: its base spec, name, axes (names, count of values, each value) and the
// legacy lists.
Status CheckSweepStrings(const v1::SweepSpec& sweep);

}  // namespace shoal
