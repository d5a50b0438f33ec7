"""GET /v1/models and /v1/models/{name}: the policy `<name>` and its frozen base `<name>-base`."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from practicum.serve.state import ServeState, state_of

router = APIRouter()


@router.get("/models")
async def models(state: ServeState = Depends(state_of)):
    return {"object": "list", "data": [state.model_card(n) for n in state.served.names]}


@router.get("/models/{name}")
async def model(name: str, state: ServeState = Depends(state_of)):
    state.adapter_for(name)
    return state.model_card(name)
