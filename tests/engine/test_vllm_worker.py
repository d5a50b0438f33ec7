"""vLLM's worker extension on the receiving side of `weight_sync: broadcast`, without vLLM:
a worker whose weight loading fails still receives every bucket, so the publisher returns and
the failure is reported, instead of the publisher waiting out the group's timeout."""

from concurrent.futures import ThreadPoolExecutor

from practicum.engine.weight_group import WeightGroup, buckets, meta_of
from tests.ranks import spawn, weight_tensors, worker_whose_reload_fails


def test_a_failed_reload_still_takes_every_bucket(tmp_path):
    tensors = weight_tensors()
    meta = meta_of(tensors)
    assert len(buckets(meta, 0.01)) > 3  # it fails in the first bucket, with more to come
    pending = WeightGroup.open_server(2, "gloo", timeout_s=120)
    with ThreadPoolExecutor(1) as pool:
        worker = pool.submit(spawn, 1, worker_whose_reload_fails, pending.port, tmp_path)
        group = pending.connect()
        group.send(list(tensors.values()), meta, bucket_mb=0.01)  # returns: all were taken
        worker.result()
    group.close()
    assert (tmp_path / "taken.txt").read_text() == "a.weight a.bias"
    assert (tmp_path / "error.txt").read_text() == "no such parameter"
