"""The weight group (`weight_sync: broadcast`) on real gloo groups between processes: what rank
0 sends arrives bit for bit at every receiver, in buckets of one dtype; it lives beside a
default process group without touching it; a member that never joins fails the publish
instead of hanging it."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from practicum.engine.weight_group import WeightGroup, buckets, meta_of
from tests.ranks import (
    receive_weights,
    spawn,
    weight_tensors,
    weights_beside_a_default_group,
)


def test_buckets_hold_one_dtype_up_to_the_size_and_a_big_tensor_alone():
    mib = 2**18  # float32 elements in 1 MiB
    meta = [
        ("a", (mib // 2,), "float32"),
        ("b", (mib // 4,), "float32"),  # 0.5 + 0.25 MiB
        ("c", (mib // 2,), "float32"),  # would make 1.25 MiB: a new bucket
        ("d", (3 * mib,), "float32"),  # 3 MiB, larger than a bucket: alone
        ("e", (4,), "bfloat16"),
        ("f", (2, 2), "bfloat16"),  # another dtype
        ("g", (), "float32"),
    ]  # back to float32: a new bucket
    assert buckets(meta, bucket_mb=1) == [[0, 1], [2], [3], [4, 5], [6]]
    assert buckets(meta, bucket_mb=100) == [[0, 1, 2, 3], [4, 5], [6]]


@pytest.mark.parametrize("bucket_mb", [0.01, 256])
def test_rank_0_broadcasts_to_two_receivers_in_other_processes(tmp_path, bucket_mb):
    """As the vLLM sampler does with two tensor-parallel workers: rank 0 here (its store on a
    free port), ranks 1 and 2 in processes of their own; small buckets (several collectives,
    one dtype each) and one bucket per run of a dtype give the same tensors."""
    tensors = weight_tensors()
    meta = meta_of(tensors)
    assert len(buckets(meta, 0.01)) > 3 and len(buckets(meta, 256)) == 4
    pending = WeightGroup.open_server(3, "gloo", timeout_s=120)
    with ThreadPoolExecutor(1) as pool:
        receivers = pool.submit(spawn, 2, receive_weights, pending.port, 3, bucket_mb, tmp_path)
        group = pending.connect()
        group.send(list(tensors.values()), meta, bucket_mb=bucket_mb)
        receivers.result()
    group.close()
    for rank in (1, 2):
        got = torch.load(tmp_path / f"received-{rank}.pt")
        assert list(got) == list(tensors)
        for name, t in tensors.items():
            assert got[name].dtype == t.dtype and torch.equal(got[name], t), (rank, name)


def test_the_group_leaves_a_default_process_group_alone(tmp_path):
    spawn(2, weights_beside_a_default_group, tmp_path)
    got, sent = torch.load(tmp_path / "received.pt"), weight_tensors()
    assert all(torch.equal(got[k], v) for k, v in sent.items()) and list(got) == list(sent)


def test_a_member_that_never_joins_fails_the_group_instead_of_hanging_it():
    pending = WeightGroup.open_server(2, "gloo", timeout_s=2)
    with pytest.raises(Exception, match="(?i)timeout|timed out"):
        pending.connect()


def test_the_group_is_reached_at_its_host_and_binds_its_sockets_there():
    """`host` is where the receivers dial the store and where the gloo group's sockets listen
    (not the address the host name resolves to); a receiver in a thread of its own here."""
    import psutil

    def listening():  # this process's listening sockets (other tests' may be among them)
        return {
            c.laddr
            for c in psutil.Process().net_connections("tcp")
            if c.status == psutil.CONN_LISTEN
        }

    tensors = weight_tensors()
    meta = meta_of(tensors)
    before = listening()
    pending = WeightGroup.open_server(2, "gloo", host="127.0.0.2", timeout_s=60)
    with ThreadPoolExecutor(1) as pool:
        joined = pool.submit(WeightGroup.join, "127.0.0.2", pending.port, 1, 2, "gloo", 60)
        sender = pending.connect()
        receiver = joined.result()
    opened = {addr.ip for addr in listening() - before}
    with ThreadPoolExecutor(1) as pool:
        got = pool.submit(lambda: {k: v.clone() for k, v in receiver.receive(meta)})
        sender.send(list(tensors.values()), meta)
        got = got.result()
    sender.close()
    receiver.close()
    assert "127.0.0.2" in opened and "127.0.0.1" not in opened
    assert all(torch.equal(got[k], v) for k, v in tensors.items())


def test_a_stream_carries_its_metadata_and_bucket_size_and_keeps_its_group():
    """`send_stream` tells the receivers what comes (they know nothing beforehand), takes the
    tensors from an iterator as they come, and a second version over the same target reuses
    the formed group; a new target (another formation) forms a new one on the same store."""
    from practicum.engine.weight_stream import Membership, WeightRendezvous, send_stream

    tensors = weight_tensors()
    meta = meta_of(tensors, torch.bfloat16)  # floating ones cast to bf16 on the way
    rendezvous = WeightRendezvous(timeout_s=60)
    sender, receiver = Membership(), Membership()

    def one_version(target):
        with ThreadPoolExecutor(1) as pool:
            got = pool.submit(
                lambda: {k: v.clone() for k, v in receiver.of(target, 1).receive_stream()}
            )
            send_stream(target, meta, iter(tensors.items()), sender)
            return got.result()

    first = rendezvous.target(2, "gloo", "bfloat16", 0.01)
    got = one_version(first)
    group = sender.group
    assert one_version(first).keys() == got.keys() and sender.group is group
    assert list(got) == list(tensors)
    for name, t in tensors.items():
        want = t.to(torch.bfloat16) if t.is_floating_point() else t
        assert got[name].dtype == want.dtype and torch.equal(got[name], want), name
    second = rendezvous.target(2, "gloo", "bfloat16", 256)
    assert second.prefix != first.prefix
    assert all(torch.equal(a, b) for a, b in zip(one_version(second).values(), got.values()))
    assert sender.group is not group
    sender.close()
    receiver.close()
