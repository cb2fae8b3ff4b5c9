#!/usr/bin/python3
"""A Python client of shoald, from the same proto (build/python, made by the build with Debian's
grpc_python_plugin). An example of talking to the daemon from Python: submit an experiment, follow
its Watch stream to the end, and print the result.

  PYTHONPATH=build/python client/python/shoal_client.py --socket PATH submit --workers 2 --batches 5
  client/python/shoal_client.py --socket PATH get ID
  client/python/shoal_client.py --target host:port --tls-ca ca.pem --token-file t get ID
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "build", "python"))

import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from shoal.v1 import shoal_pb2, shoal_pb2_grpc  # noqa: E402


def connect(args):
    """A stub and the call metadata (the bearer token over TCP)."""
    if not args.target:
        return shoal_pb2_grpc.ShoalStub(grpc.insecure_channel("unix:" + args.socket)), ()
    with open(args.token_file) as f:
        metadata = (("authorization", "Bearer " + f.read().strip()),)
    if args.insecure:
        return shoal_pb2_grpc.ShoalStub(grpc.insecure_channel(args.target)), metadata
    with open(args.tls_ca, "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    return shoal_pb2_grpc.ShoalStub(grpc.secure_channel(args.target, creds)), metadata


def submit(stub, md, args):
    spec = shoal_pb2.ExperimentSpec(workers=args.workers, batches=args.batches,
                                    dataset=args.dataset, eval_samples=0)
    exp_id = stub.Submit(shoal_pb2.SubmitRequest(spec=spec), metadata=md).id
    events = {"samples": 0, "states": [], "events": 0}
    for ev in stub.Watch(shoal_pb2.WatchRequest(id=exp_id), metadata=md):
        kind = ev.WhichOneof("what")
        if kind == "sample":
            events["samples"] += 1
        elif kind == "state":
            events["states"].append(shoal_pb2.ExperimentState.Name(ev.state))
        else:
            events["events"] += 1
    e = stub.Get(shoal_pb2.GetRequest(id=exp_id), metadata=md)
    return {"id": exp_id, "watch": events, "experiment": json_format.MessageToDict(e)}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", default=os.environ.get("SHOAL_SOCKET", ""))
    ap.add_argument("--target", default="")
    ap.add_argument("--tls-ca", default="")
    ap.add_argument("--token-file", default="")
    ap.add_argument("--insecure", action="store_true")
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("submit")
    s.add_argument("--workers", type=int, default=1)
    s.add_argument("--batches", type=int, default=5)
    s.add_argument("--dataset", default="synthetic")
    g = sub.add_parser("get")
    g.add_argument("id")
    args = ap.parse_args()
    stub, md = connect(args)
    try:
        if args.command == "submit":
            out = submit(stub, md, args)
        else:
            out = json_format.MessageToDict(stub.Get(shoal_pb2.GetRequest(id=args.id), metadata=md))
    except grpc.RpcError as e:
        print(f"shoal_client.py: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
