"""learner/phases.py: what two looks at the phase board say about the other ranks (the
processes themselves: tests/runtime/test_learner_group.py, a stalled and a killed rank)."""

from practicum.learner.phases import Post, culprits, heartbeat_interval


def post(rank: int, beat: int, count: int, phase: str, error: str | None = None) -> Post:
    return Post(rank, beat, count, phase, "node-a", 100 + rank, error)


def test_a_rank_whose_heartbeat_stopped_died_where_it_last_posted():
    first = {
        0: post(0, 5, 40, "train_step 2: forward, layer 0"),
        1: post(1, 5, 37, "train_step 2: backward, layer 1"),
    }
    second = {
        0: post(0, 9, 40, "train_step 2: forward, layer 0"),
        1: post(1, 5, 37, "train_step 2: backward, layer 1"),
    }  # no beat since
    assert culprits(first, second, me=0, world=2, window=2.0) == (
        "learner rank 1 died in train_step 2: backward, layer 1 (pid 101 on node-a; no "
        "heartbeat for 2.0 s)"
    )


def test_a_living_rank_behind_the_others_stalled_and_ranks_in_step_are_no_culprits():
    first = {r: post(r, 3, 50, "train_step 3: forward, layer 0") for r in (0, 1, 3)}
    first[2] = post(2, 3, 47, "train_step 3: forward, layer 1")
    second = {r: post(r, 6, p.count, p.phase) for r, p in first.items()}
    assert culprits(first, second, me=1, world=4, window=2.0) == (
        "learner rank 2 stalled in train_step 3: forward, layer 1 (pid 102 on node-a: alive, "
        "3 phase(s) behind the others)"
    )
    every_rank_in_step = {r: post(r, 6, 50, "x") for r in range(4)}
    assert culprits(first, every_rank_in_step, me=1, world=4, window=2.0) is None


def test_a_rank_that_posted_its_error_failed_and_one_that_never_posted_did_not_start():
    first = {0: post(0, 1, 9, "a"), 1: post(1, 1, 4, "train_step 1: forward, layer 0")}
    second = {
        0: post(0, 2, 9, "a"),
        1: post(1, 2, 4, "train_step 1: forward, layer 0", "OutOfMemoryError: CUDA"),
    }
    assert culprits(first, second, me=0, world=3, window=1.0) == (
        "learner rank 1 failed in train_step 1: forward, layer 0: OutOfMemoryError: CUDA; "
        "learner rank 2 never posted (it did not start)"
    )


def test_the_heartbeat_is_a_hundredth_of_the_timeout_within_bounds():
    assert heartbeat_interval(600) == 1.0
    assert heartbeat_interval(60) == 0.6
    assert heartbeat_interval(5) == 0.2


def test_a_rank_that_already_gave_up_waiting_is_no_culprit_even_once_it_is_gone():
    """Rank 0 gave up first (its verdict posted), then left (no more heartbeats); rank 1
    finished the phases rank 3 never reached; rank 2 reads: rank 3 stalled, nobody else."""
    first = {
        0: Post(0, 7, 30, "train_step 3: forward, layer 0", "h", 1, None, "rank 3 ..."),
        1: post(1, 7, 30, "train_step 3: forward, layer 0"),
        2: post(2, 7, 30, "train_step 3: forward, layer 0"),
        3: post(3, 7, 27, "train_step 3: forward, layer 1"),
    }
    second = {**{r: post(r, 9, p.count, p.phase) for r, p in first.items() if r}, 0: first[0]}
    assert culprits(first, second, me=2, world=4, window=2.0).startswith(
        "learner rank 3 stalled in train_step 3: forward, layer 1 "
    )

    # rank 3 itself, once it goes on and its next collective fails: the others' verdict
    gone = {r: p for r, p in second.items() if r != 3}
    gone.update(
        {r: Post(r, 9, 31, "x", "h", 1, None, "learner rank 3 stalled in ...") for r in (1, 2)}
    )
    assert culprits(gone, gone, me=3, world=4, window=2.0) == (
        "learner rank(s) [0, 1, 2] gave up waiting for the others (rank 0: rank 3 ...)"
    )
