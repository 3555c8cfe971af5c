"""Rebuilding a gRPC method handler around new behaviour, keeping its kind and serializers.

The interceptors (errors, auth, timing) each wrap handlers; this is the one place that knows
grpc's four handler kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

Behaviour = Callable[[Any, Any], Any]


def inner_behaviour(handler: grpc.RpcMethodHandler) -> Behaviour:
    """The handler's own behaviour function, whatever its kind."""
    behaviour: Behaviour = (handler.unary_unary or handler.stream_unary or handler.unary_stream
                            or handler.stream_stream)
    return behaviour


def rebuild(handler: grpc.RpcMethodHandler, unary: Behaviour, stream: Behaviour) -> Any:
    """A handler of the same kind running `unary` (single response) or `stream` (responses)."""
    des, ser = handler.request_deserializer, handler.response_serializer
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary, des, ser)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary, des, ser)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(stream, des, ser)
    return grpc.stream_stream_rpc_method_handler(stream, des, ser)
