// Protobuf message -> nlohmann::json by reflection. Unlike the proto3 JSON mapping, 64-bit
// integers stay numbers and every field is printed, which is what `--json` users script against.
// An absent `optional` field (scalar or message) is null.
#pragma once

#include <google/protobuf/message.h>

#include <nlohmann/json.hpp>

namespace shoal {

nlohmann::json ToJson(const google::protobuf::Message& m);

}  // namespace shoal
