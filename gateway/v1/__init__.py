"""Generated Python stubs of the public gRPC API `gateway.v1` (protos/gateway/v1/).

Do not edit the `*_pb2*` modules by hand: change the protos and run `python scripts/gen_protos.py`.
"""
