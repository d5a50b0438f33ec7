"""RL math as small pure functions: advantages, baselines, losses, weights, filters, shaping,
RFT, the curriculum's solve rates. Nothing here imports the machinery (engine, runtime)."""
