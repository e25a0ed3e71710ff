"""Generated protobuf and gRPC modules (see proto/generate.py)."""
