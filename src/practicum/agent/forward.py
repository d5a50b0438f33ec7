"""The loopback forwarder an outside agent reaches its endpoint through, inside the sandbox.

The sandbox has no network but its own loopback; the endpoint is a Unix socket bound into it
read-only. This program (run by the sandbox's interpreter as `python -I -S -c SOURCE`, so it
imports nothing but the standard library and needs no file of its own inside) listens on
127.0.0.1:PORT, forwards every connection to the socket, starts the agent's command as its
child and exits with the agent's status:

    python -I -S -c "$(cat forward.py)" SOCKET PORT -- AGENT ARGV...

On the host, `UnixToTcp` is the other direction, for an endpoint that listens on TCP (`practicum
serve`): a Unix socket whose connections reach host:port, to bind into a sandbox.

Nothing here may import practicum: it runs where practicum's sources are not visible.
"""

import asyncio
import os
import sys
import tempfile
import threading


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _serve(upstream, reader, writer) -> None:
    try:
        up_reader, up_writer = await upstream()
    except OSError:
        writer.close()
        return
    try:
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    finally:
        for w in (writer, up_writer):
            w.close()


async def _main(socket_path: str, port: int, argv: list[str]) -> int:
    upstream = lambda: asyncio.open_unix_connection(socket_path)  # noqa: E731
    server = await asyncio.start_server(lambda r, w: _serve(upstream, r, w), "127.0.0.1", port)
    async with server:
        agent = await asyncio.create_subprocess_exec(*argv)
        code = await agent.wait()
    rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in rest:  # connections the agent left open go with it, quietly
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
    return code if code >= 0 else 128 - code


class UnixToTcp:
    """A Unix socket (mode 0666, in a folder of its own) forwarding to host:port, served on a
    thread until `close`:  with UnixToTcp("127.0.0.1", 8000) as path: ..."""

    def __init__(self, host: str, port: int):
        self.folder = tempfile.mkdtemp(prefix="practicum-bridge-")
        os.chmod(self.folder, 0o755)
        self.path = os.path.join(self.folder, "endpoint.sock")
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def start():
            upstream = lambda: asyncio.open_connection(host, port)  # noqa: E731
            self.server = await asyncio.start_unix_server(
                lambda r, w: _serve(upstream, r, w), self.path
            )
            os.chmod(self.path, 0o666)
            ready.set()

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(start(), self.loop).result(timeout=30)
        ready.wait()

    def __enter__(self) -> str:
        return self.path

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        async def stop():
            self.server.close()
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()
        for name in (self.path, self.folder):
            try:
                os.rmdir(name) if name == self.folder else os.unlink(name)
            except OSError:
                pass


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
