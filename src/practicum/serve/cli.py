"""`practicum serve RUN|CHECKPOINT|POLICY|MODEL`: the OpenAI-compatible endpoint.

The address is bound before the model loads, so a port in use or out of range fails at once in
one line, and "serving on" is printed only once the socket is ours. SIGTERM or Ctrl-C stops the
engine at its next decode step: running requests end with 503 and the process exits within
seconds, however long their replies were to be.
"""

from __future__ import annotations

import argparse
import os
import socket

from practicum.errors import PracticumError

SHUTDOWN_GRACE = 3
"""Seconds uvicorn waits for open connections after a stop signal."""


def add_serve_command(sub) -> None:
    s = sub.add_parser(
        "serve",
        help="serve a trained policy and its base over an OpenAI-compatible API",
        description="Serve a run's latest checkpoint (or a checkpoint folder, a saved policy "
        "folder, or a plain model) as `<name>` (the policy) and `<name>-base` (adapter off) "
        "on /v1/models, /v1/chat/completions and /v1/completions.",
    )
    s.add_argument("target", help="run folder, checkpoint folder, policy folder or model")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on")
    s.add_argument("--port", type=int, default=8000, help="port to listen on (0-65535)")
    s.add_argument("--name", help="model id of the policy (default: the run's name)")
    s.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="weights dtype (auto: bf16 where the CPU computes it natively)",
    )
    s.add_argument(
        "--max-batch",
        type=int,
        default=32,
        help="most requests decoded at once (more wait for a free row)",
    )
    s.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="most tokens of one reply, whatever a request asks (a run's "
        "rollout.max_seq_len caps it too; default: that, or the context left)",
    )
    s.add_argument(
        "--api-key",
        default=os.environ.get("PRACTICUM_API_KEY"),
        help="answer /v1 only with `Authorization: Bearer <key>` (default: "
        "$PRACTICUM_API_KEY; unset: no key)",
    )
    s.set_defaults(func=cmd_serve)


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (port 0: a free one), or a one-line PracticumError."""
    if not 0 <= port <= 65535:
        raise PracticumError(f"serve: --port {port} is out of range (0 to 65535)")
    if not host:
        raise PracticumError("serve: --host is empty")
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise PracticumError(f"serve: cannot listen on {host}:{port}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise PracticumError(f"serve: cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from practicum.serve.app import build_app
    from practicum.serve.loading import load_served

    if args.max_batch < 1:
        raise PracticumError(f"serve: --max-batch must be at least 1, got {args.max_batch}")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise PracticumError(f"serve: --max-tokens must be at least 1, got {args.max_tokens}")
    sock = bind(args.host, args.port)
    try:
        served = load_served(
            args.target, args.name, args.dtype, max_batch=args.max_batch, max_tokens=args.max_tokens
        )
    except BaseException:
        sock.close()
        raise

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            served.server.stop(wait=False)  # running requests end at the next decode step
            super().handle_exit(sig, frame)

    port = sock.getsockname()[1]
    server = Server(
        uvicorn.Config(
            build_app(served, args.api_key),
            log_level="warning",
            timeout_graceful_shutdown=SHUTDOWN_GRACE,
        )
    )
    print(f"practicum serve: {', '.join(served.names)} on http://{args.host}:{port}/v1", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        served.close()
        sock.close()
    return 0
