#!/usr/bin/python3
"""Discovers shoald's API through gRPC server reflection, the way grpcurl does, then calls
NodeInfo with message classes built only from what reflection returned (no generated shoal
module). Prints one JSON object: the services, Shoal's methods with their streaming, an unknown
symbol's error code, and NodeInfo's answer.

    reflection_client.py BUILD_DIR unix:/path/to/shoal.sock
"""
import json
import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

sys.path.insert(0, sys.argv[1] + "/python/reflection")
import reflection_pb2  # noqa: E402
import reflection_pb2_grpc  # noqa: E402


def ask(stub, requests):
    return list(stub.ServerReflectionInfo(iter(requests), timeout=10))


def main():
    channel = grpc.insecure_channel(sys.argv[2])
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    listed, described, unknown = ask(stub, [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="shoal.v1.Shoal"),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="shoal.v1.NoSuch"),
    ])
    pool = descriptor_pool.DescriptorPool()
    methods = {}
    for raw in described.file_descriptor_response.file_descriptor_proto:
        file = descriptor_pb2.FileDescriptorProto.FromString(raw)
        pool.Add(file)  # imports come first
        for s in file.service:
            if file.package + "." + s.name == "shoal.v1.Shoal":
                methods = {m.name: {"client_streaming": m.client_streaming,
                                    "server_streaming": m.server_streaming} for m in s.method}
    service = pool.FindServiceByName("shoal.v1.Shoal")
    method = service.FindMethodByName("NodeInfo")
    factory = message_factory.MessageFactory(pool)
    request = factory.GetPrototype(method.input_type)()
    response_class = factory.GetPrototype(method.output_type)
    call = channel.unary_unary("/shoal.v1.Shoal/NodeInfo",
                               request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=response_class.FromString)
    node = call(request, timeout=10)
    print(json.dumps({
        "services": [s.name for s in listed.list_services_response.service],
        "methods": methods,
        "unknown_error_code": unknown.error_response.error_code,
        "node_info": json_format.MessageToDict(node),
    }))


if __name__ == "__main__":
    main()
