"""A TCP proxy that adds a fixed one-way delay to every byte, in both directions.

Stands in for network latency on loopback where `tc netem` is unavailable
(this machine's kernel has no sch_netem). Each chunk read from one side is
written to the other `delay` seconds after it arrived, in order, so a round
trip gains 2 * delay and throughput is not otherwise limited.

  python3 latency_proxy.py --listen 127.0.0.1:0 --target 127.0.0.1:7100 \
      --delay-ms 5 --ready-file proxy.ready     # writes the bound port
"""

import argparse
import asyncio
import os
import time


async def pipe(reader, writer, delay):
    queue = asyncio.Queue()

    async def read():
        while True:
            data = await reader.read(1 << 16)
            await queue.put((time.monotonic() + delay, data))
            if not data:
                return

    async def write():
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    try:
        await asyncio.gather(read(), write())
    except (ConnectionError, asyncio.CancelledError):
        writer.close()


async def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--target", required=True)
    ap.add_argument("--delay-ms", type=float, required=True)
    ap.add_argument("--ready-file")
    args = ap.parse_args()
    delay = args.delay_ms / 1000
    thost, tport = args.target.rsplit(":", 1)

    async def handle(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(thost, int(tport))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, server_writer, delay),
                             pipe(server_reader, client_writer, delay))

    host, port = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(handle, host, int(port))
    bound = server.sockets[0].getsockname()[1]
    if args.ready_file:
        with open(args.ready_file + ".tmp", "w") as f:
            f.write(f"{bound} 0\n")
        os.rename(args.ready_file + ".tmp", args.ready_file)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
