"""GET /health: liveness, the policy version served, and the usage so far (no API key)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from practicum.serve.state import ServeState, state_of

router = APIRouter()


@router.get("/health")
async def health(state: ServeState = Depends(state_of)):
    served = state.served
    return {"status": "ok", "policy_version": served.server.version, "usage": served.usage}
