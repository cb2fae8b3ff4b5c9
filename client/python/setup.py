"""Builds the `shoal` package with its gRPC modules generated from Shoal's proto/ by protoc and
grpc_python_plugin (Debian: protobuf-compiler, protobuf-compiler-grpc), so the package never
carries a hand-kept copy of the protocol. SHOAL_PROTO_DIR names another proto folder."""
import os
import shutil
import subprocess

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.environ.get("SHOAL_PROTO_DIR", os.path.join(HERE, "..", "..", "proto"))
GEN = os.path.join("build", "gen")  # relative to HERE, as setuptools wants package_dir


def generate():
    """shoal/v1/shoal_pb2.py and shoal_pb2_grpc.py into build/gen, from proto/shoal/v1."""
    source = os.path.join(PROTO, "shoal", "v1", "shoal.proto")
    if not os.path.exists(source):
        raise SystemExit(f"shoal: no {source} (set SHOAL_PROTO_DIR to Shoal's proto folder)")
    protoc, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    if not protoc or not plugin:
        raise SystemExit("shoal: protoc and grpc_python_plugin are needed to build the package "
                         "(Debian: apt-get install protobuf-compiler protobuf-compiler-grpc)")
    out = os.path.join(HERE, GEN)
    os.makedirs(os.path.join(out, "shoal", "v1"), exist_ok=True)
    subprocess.run([protoc, f"--proto_path={PROTO}", f"--python_out={out}",
                    f"--grpc_python_out={out}", f"--plugin=protoc-gen-grpc_python={plugin}",
                    source], check=True)
    open(os.path.join(out, "shoal", "v1", "__init__.py"), "w").close()


generate()
setup(packages=["shoal", "shoal.v1"],
      package_dir={"shoal": "shoal", "shoal.v1": os.path.join(GEN, "shoal", "v1")},
      package_data={"shoal": ["py.typed"]})
