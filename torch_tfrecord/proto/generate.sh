#!/usr/bin/env bash
# Regenerates example_pb2.py / feature_pb2.py (+ .pyi) with a pinned protoc (grpcio-tools 1.71.0
# bundles protoc 29.0, whose generated code needs protobuf >= 5.29 at run time: pyproject's floor).
#   python -m venv /tmp/protocvenv && /tmp/protocvenv/bin/pip install grpcio-tools==1.71.0
#   PROTOC_PYTHON=/tmp/protocvenv/bin/python torch_tfrecord/proto/generate.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
"${PROTOC_PYTHON:-python}" -m grpc_tools.protoc --proto_path=. --python_out=. --pyi_out=. \
  torch_tfrecord/proto/feature.proto torch_tfrecord/proto/example.proto
