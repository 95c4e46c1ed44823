"""A server that closes its connection after every streamed answer while its headers say
Keep-Alive: what llama.cpp's ``llama-server`` does (``../shared/engines/llama-server/README.md``;
recorded here: the FIN follows the last chunk by 0.02-0.15 ms, the answer's head carries
``Keep-Alive: timeout=5, max=100`` and no ``Connection: close``). Stdlib only.

- ``GET /health``                    200
- ``POST /v1/chat/completions``      ``{"stream": true, "max_tokens": N}``: N SSE chunks then
                                     ``data: [DONE]``, and the connection closed
                                     (``--close-delay-ms`` after the last chunk); without
                                     ``stream`` a JSON answer on a kept connection
- ``GET /requests``                  how many chat requests it received (each counted once)
- ``GET /connections``               how many connections it accepted, the gate's own
                                     health checks aside (``Host`` the engine's address: one a
                                     check interval, more of them as a loaded machine slows a
                                     test)
"""

import argparse
import asyncio
import json

REQUESTS = 0
CONNECTIONS = 0


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
            # the gate's own check names the engine's address; a client's names the gate's
            check = target == "/health" and headers.get("host") == f"127.0.0.1:{args.port}"
            if not counted and not check:
                CONNECTIONS += 1
                counted = True
            length = int(headers.get("content-length", "0") or 0)
            body = await reader.readexactly(length) if length else b""
            keep = b"Keep-Alive: timeout=5, max=100\r\n"
            if target == "/v1/chat/completions" and method == "POST":
                REQUESTS += 1
                request = json.loads(body or b"{}")
                tokens = int(request.get("max_tokens", 4))
                if not request.get("stream"):
                    answer = json.dumps({"choices": [{"message": {"content": "x" * tokens}}]})
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n%s\r\n%s" % (len(answer), keep, answer.encode())
                    )
                    await writer.drain()
                    continue
                writer.write(
                    b"HTTP/1.1 200 OK\r\nServer: llama.cpp\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n%s\r\n" % keep
                )
                for i in range(tokens):
                    await asyncio.sleep(args.token_ms / 1000)
                    event = b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % i
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                done = b"data: [DONE]\n\n"
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
                await writer.drain()
                if args.close_delay_ms:
                    await asyncio.sleep(args.close_delay_ms / 1000)
                return  # the close llama-server makes after every streamed answer
            if target == "/requests":
                answer = str(REQUESTS).encode()
            elif target == "/connections":
                answer = str(CONNECTIONS).encode()
            else:
                answer = b'{"status":"ok"}'
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(answer), keep, answer)
            )
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        return
    finally:
        writer.close()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--token-ms", type=float, default=1.0)
    parser.add_argument("--close-delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    server = await asyncio.start_server(lambda r, w: handle(r, w, args), args.host, args.port)
    print(f"closing engine on {args.host}:{args.port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
