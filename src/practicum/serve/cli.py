"""`practicum serve RUN|CHECKPOINT|POLICY|MODEL`: the OpenAI-compatible endpoint."""

from __future__ import annotations

import argparse


def add_serve_command(sub) -> None:
    s = sub.add_parser(
        "serve", help="serve a trained policy and its base over an OpenAI-compatible API",
        description="Serve a run's latest checkpoint (or a checkpoint folder, a saved policy "
        "folder, or a plain model) as `<name>` (the policy) and `<name>-base` (adapter off) "
        "on /v1/models, /v1/chat/completions and /v1/completions.")
    s.add_argument("target", help="run folder, checkpoint folder, policy folder or model")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on")
    s.add_argument("--port", type=int, default=8000, help="port to listen on")
    s.add_argument("--name", help="model id of the policy (default: the run's name)")
    s.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="weights dtype (auto: bf16 where the CPU computes it natively)")
    s.add_argument("--max-batch", type=int, default=32,
                   help="most requests sampled in one batch")
    s.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from practicum.serve.app import build_app
    from practicum.serve.loading import load_served

    served = load_served(args.target, args.name, args.dtype, max_batch=args.max_batch)
    names = ", ".join(served.names)
    print(f"practicum serve: {names} on http://{args.host}:{args.port}/v1", flush=True)
    try:
        uvicorn.run(build_app(served), host=args.host, port=args.port, log_level="warning")
    finally:
        served.close()
    return 0
