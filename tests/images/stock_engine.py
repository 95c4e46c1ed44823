"""A stand-in for a stock inference server: knows nothing of asyncdeploy, stdlib only.

Like vLLM with its default ``--shutdown-timeout 0`` it exits at once on SIGTERM (in-flight
requests are cut), and its ``/health`` answers 503 until the "model" has loaded
(``--load-seconds``). Endpoints (HTTP/1.1, keep-alive):

- ``GET /health``                  200 once loaded
- ``GET /short``                   a small JSON answer after ``--short-ms``
- ``POST /v1/completions``         ``{"max_tokens": N, "stream": bool}``: JSON, or SSE tokens
                                   (``Transfer-Encoding: chunked``) every ``--token-ms``,
                                   ending with ``data: [DONE]``
- ``GET /stream?tokens=N&ms=M``    the same SSE stream
- ``POST /echo``                   the body's length and sha256 (Content-Length or chunked)
- ``GET /metrics``                 the engine's own metrics (``engine_requests_total``)

Run as ``<python> stock_engine.py --port 8001``; in the test image the interpreter sits at an
odd path with no shell, wget, curl or python3 beside it, so no check can run inside.
"""

import argparse
import asyncio
import hashlib
import json
import os
import signal
import time
import urllib.parse

STARTED = time.monotonic()
REQUESTS = 0
CONNECTIONS = 0  # connections that carried a request other than /health


async def read_body(reader, headers):
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = bytearray()
        while True:
            size = int((await reader.readline()).split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b""):
                    pass
                return bytes(body)
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    length = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(length) if length else b""


def response(status, body, content_type="application/json"):
    reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}.get(status, "X")
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


async def stream_tokens(writer, tokens, interval):
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    for i in range(tokens):
        await asyncio.sleep(interval)
        event = b"data: " + json.dumps({"index": i, "text": f"tok{i}", "t": time.time()}).encode()
        event += b"\n\n"
        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        await writer.drain()
    done = b"data: [DONE]\n\n"
    writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
    await writer.drain()


async def handle(reader, writer, args):
    global REQUESTS, CONNECTIONS
    counted = False
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            method, target, _ = line.decode("latin-1").split(" ", 2)
            headers = {}
            while (h := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = h.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await read_body(reader, headers)
            path, _, query = target.partition("?")
            params = urllib.parse.parse_qs(query)
            REQUESTS += 1
            if path != "/health" and not counted:
                CONNECTIONS, counted = CONNECTIONS + 1, True
            if method == "HEAD":  # the head of a GET, no body
                writer.write(response(200, b"").split(b"\r\n\r\n")[0] + b"\r\n\r\n")
                await writer.drain()
                continue
            loaded = time.monotonic() - STARTED >= args.load_seconds
            if path == "/health":
                writer.write(response(200 if loaded else 503, b"{}"))
            elif path == "/short":
                await asyncio.sleep(args.short_ms / 1000)
                writer.write(response(200, b'{"ok":true}'))
            elif path == "/stream":
                tokens = int(params.get("tokens", ["20"])[0])
                ms = float(params.get("ms", [str(args.token_ms)])[0])
                await stream_tokens(writer, tokens, ms / 1000)
            elif path == "/v1/completions" and method == "POST":
                request = json.loads(body or b"{}")
                tokens = int(request.get("max_tokens", 16))
                if request.get("stream"):
                    await stream_tokens(writer, tokens, args.token_ms / 1000)
                else:
                    await asyncio.sleep(tokens * args.token_ms / 1000)
                    text = " ".join(f"tok{i}" for i in range(tokens))
                    writer.write(response(200, json.dumps({"choices": [{"text": text}]}).encode()))
            elif path == "/echo":
                digest = hashlib.sha256(body).hexdigest()
                writer.write(
                    response(200, json.dumps({"length": len(body), "sha256": digest}).encode())
                )
            elif path == "/metrics":
                text = f"engine_requests_total {REQUESTS}\nengine_connections_total {CONNECTIONS}\n"
                text = text.encode()
                writer.write(response(200, text, "text/plain; version=0.0.4"))
            else:
                writer.write(response(404, b'{"error":"not found"}'))
            await writer.drain()
            if headers.get("connection", "").lower() == "close":
                return
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        return
    finally:
        writer.close()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--load-seconds", type=float, default=1.0)
    parser.add_argument("--short-ms", type=float, default=5.0)
    parser.add_argument("--token-ms", type=float, default=50.0)
    args = parser.parse_args()
    loop = asyncio.get_running_loop()
    # vLLM's default: in-flight requests are aborted, the process exits at once.
    loop.add_signal_handler(signal.SIGTERM, os._exit, 0)
    server = await asyncio.start_server(lambda r, w: handle(r, w, args), args.host, args.port)
    print(f"stock engine on {args.host}:{args.port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
