"""vLLM's worker extension on the receiving side of `weight_sync: broadcast`, without vLLM:
a worker whose weight loading fails still receives every bucket, so the publisher returns and
the failure is reported, instead of the publisher waiting out the group's timeout."""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

from practicum.engine.weight_group import buckets, meta_of
from practicum.engine.weight_stream import Membership, WeightRendezvous, send_stream
from tests.ranks import spawn, weight_tensors, worker_whose_reload_fails


def test_a_failed_reload_still_takes_every_bucket(tmp_path):
    tensors = weight_tensors()
    meta = meta_of(tensors)
    assert len(buckets(meta, 0.01)) > 3  # it fails in the first bucket, with more to come
    rendezvous = WeightRendezvous(timeout_s=120)
    target = rendezvous.target(2, "gloo", "float32", 0.01)
    sender = Membership()
    with ThreadPoolExecutor(1) as pool:
        worker = pool.submit(spawn, 1, worker_whose_reload_fails, asdict(target), tmp_path)
        send_stream(target, meta, iter(tensors.items()), sender)  # returns: all were taken
        worker.result()
    sender.close()
    assert (tmp_path / "taken.txt").read_text() == "a.weight a.bias"
    assert (tmp_path / "error.txt").read_text() == "no such parameter"
