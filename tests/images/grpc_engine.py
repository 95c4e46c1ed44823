"""A stand-in for a stock gRPC inference server (Triton's or KServe v2's gRPC port): grpcio,
no protobuf (bytes in, bytes out), nothing of asyncdeploy. ``Slow`` answers after
``--slow-ms``; ``Tokens`` streams ``--tokens`` messages ``--token-ms`` apart. SIGTERM ends it at
once, as an engine without a graceful stop does (vLLM's default): calls still open are cut. (A
handler, not Python's default: as PID 1 of its container the default would ignore SIGTERM.)
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Iterator
from concurrent import futures

import grpc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--slow-ms", type=int, default=2000)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--token-ms", type=int, default=100)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

    def slow(request: bytes, context: object) -> bytes:
        time.sleep(args.slow_ms / 1000)
        return b"done:" + request

    def tokens(request: bytes, context: object) -> Iterator[bytes]:
        for i in range(args.tokens):
            time.sleep(args.token_ms / 1000)
            yield b"%d" % i

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    handlers = {
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
        "Tokens": grpc.unary_stream_rpc_method_handler(tokens),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("asyncdeploy.test.Engine", handlers),)
    )
    server.add_insecure_port(f"0.0.0.0:{args.port}")
    server.start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
