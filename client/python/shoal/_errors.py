"""The one exception the package raises: the daemon's status code and message, or the client's."""
from __future__ import annotations

import grpc


class ShoalError(Exception):
    """`code` is the gRPC status code's name ("INVALID_ARGUMENT", "NOT_FOUND", ...), `message`
    the daemon's words (the CLI prints the same)."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def of(cls, e: grpc.RpcError) -> "ShoalError":
        return cls(e.code().name, e.details() or "")
