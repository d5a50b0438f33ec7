"""Streamed versions (`weight_stream`) on real gloo groups: the post-sync check's fingerprints
travel after the weights and catch a tensor the receiver silently left stale; a receiver that
fails while staying alive takes the rest of the stream, so the sender is never left waiting
for the group's timeout; the ipc transport shares each bucket in place with receivers in other
processes on this machine (shared memory on CPU) and refuses one on another machine."""

import glob
import multiprocessing as mp
import os
import threading
import time
from dataclasses import asdict

import pytest
import torch

from practicum.engine.weight_check import StaleWeights, fingerprint
from practicum.engine.weight_group import FormationAborted, meta_of
from practicum.engine.weight_stream import (
    Membership,
    StreamedUpdate,
    WeightRendezvous,
    drained,
    publish,
    send_stream,
)
from tests.ranks import receive_streamed, weight_tensors


def stream(target, tensors, dtype, receive):
    """One version from a sender thread to `receive(group)` here; the sender's error first."""
    sender, receiver = Membership(), Membership()
    meta = meta_of(tensors, dtype)
    update = StreamedUpdate(1, lambda t: send_stream(t, meta, iter(tensors.items()), sender))
    try:
        out = {}
        publish(update, target, lambda: out.update(got=receive(receiver.of(target, 1))))
        return out["got"]
    finally:
        sender.close()
        receiver.close()


@pytest.mark.parametrize("verify", [True, False])
def test_fingerprints_follow_the_weights_when_asked(verify):
    """With `verify` the receiver ends the stream holding the sender's fingerprint of every
    tensor as it travelled (cast to bf16 on the way), equal to the fingerprint of what
    arrived; without it, none."""
    tensors = weight_tensors()
    rendezvous = WeightRendezvous(timeout_s=60)  # its store lives as long as it does
    target = rendezvous.target(2, "gloo", "bfloat16", 0.01, verify=verify)

    def receive(group):
        got = {k: v.clone() for k, v in group.receive_stream()}
        return got, group.sent_fingerprints

    got, sent = stream(target, tensors, torch.bfloat16, receive)
    if not verify:
        assert sent is None
        return
    assert sent == {k: fingerprint(v) for k, v in got.items()}
    assert sent["a.weight"] == fingerprint(tensors["a.weight"].to(torch.bfloat16))
    assert sent["a.weight"] != fingerprint(tensors["a.weight"])  # taken after the cast


def test_a_receiver_that_fails_mid_stream_does_not_leave_the_sender_waiting():
    """The receiver raises at its second tensor but takes the rest (`drained`): the publish
    fails with the receiver's error at once, not after the group's 120 s timeout; without the
    drain the sender would block on the next bucket."""
    tensors = weight_tensors()
    rendezvous = WeightRendezvous(timeout_s=120)
    target = rendezvous.target(2, "gloo", "float32", 0.001)

    def receive(group):
        arriving = group.receive_stream()
        with drained(arriving):
            for i, _ in enumerate(arriving):
                if i == 1:
                    raise ValueError("no place for this tensor")

    start = time.monotonic()
    with pytest.raises(ValueError, match="no place"):
        stream(target, tensors, torch.float32, receive)
    assert time.monotonic() - start < 60


def test_a_receiver_that_fails_before_joining_stops_the_sender_at_once():
    """A vLLM worker that cannot start never joins: the sender, waiting for the group to form,
    is told to stop (`abort`) and the publish fails with the receiver's error in seconds, not
    after the group's 120 s timeout; a second member still waiting is stopped with the reason."""
    tensors = weight_tensors()
    rendezvous = WeightRendezvous(timeout_s=120)
    target = rendezvous.target(3, "gloo", "float32", 0.001)
    waiting: dict = {}

    def other_receiver():
        try:
            Membership().of(target, 2)
        except FormationAborted as err:
            waiting["error"] = err

    def receive():
        threading.Thread(target=other_receiver).start()
        time.sleep(0.5)
        raise RuntimeError("the worker could not import its extension")

    sender = Membership()
    meta = meta_of(tensors, torch.float32)
    update = StreamedUpdate(1, lambda t: send_stream(t, meta, iter(tensors.items()), sender))
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="could not import"):
        publish(update, target, receive)
    assert time.monotonic() - start < 30
    deadline = time.monotonic() + 10
    while "error" not in waiting and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "could not import its extension" in str(waiting["error"])


def shared_files() -> list[str]:
    return glob.glob(f"/dev/shm/practicum-weights-{os.getpid()}-*")


def send_to_processes(target, tensors, dtype, receivers: int, tmp_path, elsewhere=()):
    """Stream `tensors` from here to `receivers` processes (weight ranks 1..); what each got."""
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(
            target=receive_streamed, args=(asdict(target), rank, tmp_path, rank in elsewhere)
        )
        for rank in range(1, receivers + 1)
    ]
    for p in procs:
        p.start()
    sender = Membership()
    try:
        send_stream(target, meta_of(tensors, dtype), iter(tensors.items()), sender)
        error = None
    except RuntimeError as err:
        error = err
    finally:
        sender.close()
        for p in procs:
            p.join(60)
    return error, procs


def test_ipc_shares_each_bucket_with_receivers_in_other_processes(tmp_path):
    """Two receivers in processes of their own map the sender's bucket (shared memory) and
    take every tensor bit for bit, cast to bf16 on the way, with the fingerprints; the buffer's
    file is gone as soon as both have mapped it."""
    tensors = weight_tensors()
    rendezvous = WeightRendezvous(timeout_s=60)
    target = rendezvous.target(3, "gloo", "bfloat16", 0.01, verify=True, transport="ipc")
    error, procs = send_to_processes(target, tensors, torch.bfloat16, 2, tmp_path)
    assert error is None and [p.exitcode for p in procs] == [0, 0]
    assert not shared_files()
    for rank in (1, 2):
        got = torch.load(tmp_path / f"got-{rank}.pt")
        assert list(got["tensors"]) == list(tensors)
        for name, t in tensors.items():
            want = t.to(torch.bfloat16) if t.is_floating_point() else t
            assert torch.equal(got["tensors"][name], want), name
        assert got["sent"] == {k: fingerprint(v) for k, v in got["tensors"].items()}


def test_ipc_refuses_a_receiver_on_another_machine_without_waiting(tmp_path):
    """A receiver that is not on the sender's machine cannot map its memory: it says so, the
    sender and the other receiver stop at once (not at the group's 120 s timeout)."""
    rendezvous = WeightRendezvous(timeout_s=120)
    target = rendezvous.target(3, "gloo", "float32", 0.01, transport="ipc")
    start = time.monotonic()
    error, procs = send_to_processes(
        target, weight_tensors(), torch.float32, 2, tmp_path, elsewhere=(2,)
    )
    assert time.monotonic() - start < 60
    assert "could not open the shared buffer" in str(error)
    assert "another machine" in (tmp_path / "error-2.txt").read_text()
    assert "another receiver could not open" in (tmp_path / "error-1.txt").read_text()
    assert not shared_files()


@pytest.mark.parametrize("transport", ["collective", "ipc"])
def test_the_hf_copy_catches_a_tensor_left_stale(tiny_model_dir, monkeypatch, transport):
    """An HF copy with `verify` receives a trained version in which one tensor is silently
    not copied (a loader that skips it, as a renamed or tied tensor would be): the check names
    it. The same stream without the skip passes, and without `verify` the stale tensor goes
    unnoticed (so it is the check that catches it)."""
    import practicum.engine.hf as hf
    from practicum.engine.hf import HFEngineCopy
    from practicum.engine.hf_model import PolicyConfig
    from practicum.engine.weight_stream import receive_into

    policy = PolicyConfig(model=str(tiny_model_dir), dtype="float32", lora=False)
    trained = HFEngineCopy(policy).holder.model.state_dict()
    trained = {
        k: v + 0.01 * torch.randn_like(v) if v.is_floating_point() else v
        for k, v in trained.items()
        if k != "lm_head.weight" or v.data_ptr() != trained["model.embed_tokens.weight"].data_ptr()
    }
    skipped = "model.layers.0.mlp.up_proj.weight"
    assert skipped in trained

    def skipping(state, arriving):
        got = receive_into(state, ((k, v) for k, v in arriving if k != skipped))
        return got | {skipped}

    def publish_to(copy):
        meta = meta_of(trained, torch.float32)
        member = Membership()
        try:
            copy.load_weights(
                StreamedUpdate(1, lambda t: send_stream(t, meta, iter(trained.items()), member))
            )
        finally:
            member.close()

    checked = HFEngineCopy(policy, bucket_mb=0.05, verify=True, transport=transport)
    publish_to(checked)  # every tensor arrives: no complaint
    assert torch.equal(checked.holder.model.state_dict()[skipped], trained[skipped])
    monkeypatch.setattr(hf, "receive_into", skipping)
    fresh = HFEngineCopy(policy, bucket_mb=0.05, verify=True, transport=transport)
    with pytest.raises(StaleWeights, match=skipped.replace(".", r"\.")):
        publish_to(fresh)
    unchecked = HFEngineCopy(policy, bucket_mb=0.05, transport=transport)
    publish_to(unchecked)  # no check: the stale tensor stays
    assert not torch.equal(unchecked.holder.model.state_dict()[skipped], trained[skipped])
    for copy in (checked, fresh, unchecked):
        copy.close()
