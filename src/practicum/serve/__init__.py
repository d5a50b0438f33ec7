"""`practicum serve`: the trained policy and its base behind an OpenAI-compatible endpoint."""
