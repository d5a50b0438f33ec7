"""The loopback forwarder an outside agent reaches its endpoint through, inside the sandbox.

The sandbox has no network but its own loopback; the endpoint is a Unix socket bound into it
read-only. This program (run by the sandbox's interpreter as `python -I -S -c SOURCE`, so it
imports nothing but the standard library and needs no file of its own inside) listens on
127.0.0.1:PORT, forwards every connection to the socket, starts the agent's command as its
child and exits with the agent's status:

    python -I -S -c "$(cat forward.py)" SOCKET PORT -- AGENT ARGV...

Nothing here may import practicum: it runs where practicum's sources are not visible.
"""

import asyncio
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _serve(socket_path: str, reader, writer) -> None:
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(socket_path)
    except OSError:
        writer.close()
        return
    try:
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    finally:
        for w in (writer, up_writer):
            w.close()


async def _main(socket_path: str, port: int, argv: list[str]) -> int:
    server = await asyncio.start_server(lambda r, w: _serve(socket_path, r, w),
                                        "127.0.0.1", port)
    async with server:
        agent = await asyncio.create_subprocess_exec(*argv)
        code = await agent.wait()
    return code if code >= 0 else 128 - code


def main(args: list[str]) -> int:
    if len(args) < 4 or args[2] != "--":
        print("usage: forward SOCKET PORT -- ARGV...", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_main(args[0], int(args[1]), args[3:]))
    except OSError as e:  # the agent's command could not start
        print(f"practicum: cannot start the agent: {e}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
