"""Hand-built episodes for the batch and learner tests: token ids in, `Episode`s out."""

from practicum.episode import Episode, Turn


def turn(sampled, logprobs=None, obs=(), context=None, dt=0.0, logprob=-1.0) -> Turn:
    """A turn sampling `sampled` (behaviour log-prob `logprob` each unless `logprobs` is given),
    then observing `obs`; `context` starts a new segment; `dt` seconds in the environment."""
    lps = [logprob] * len(sampled) if logprobs is None else logprobs
    return Turn(
        list(sampled),
        list(lps),
        0,
        observation_ids=list(obs),
        context_ids=None if context is None else list(context),
        env_duration=dt,
    )


def episode(reward, turns, prompt=(1,), group="g", task="t", overlong=False) -> Episode:
    return Episode(task, group, list(prompt), turns, reward=reward, overlong=overlong)
