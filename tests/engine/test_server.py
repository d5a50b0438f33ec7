"""The generation server: batching, versions, the weights gate, sampling during training,
adapter sub-batches, errors."""

import threading
import time
from concurrent.futures import CancelledError

import pytest

from practicum.engine.base import Interrupted, Sample, SamplerFailure, SamplingParams, WeightUpdate
from practicum.engine.server import GenerationServer, WeightsGate


class FakeSampler:
    """Records each generate call; sleeps a little so overlaps would show. Like LoRA with a
    merged copy: only adapter=False runs the trainable's module."""

    def __init__(self):
        self.version, self.calls, self.active = 0, [], 0

    def shares_trainable(self, adapter: bool) -> bool:
        return not adapter

    def generate(self, prompts, params, seeds=None, adapter=True):
        self.active += 1
        assert self.active == 1, "two generate calls at once"
        self.calls.append((len(prompts), self.version, adapter, seeds))
        time.sleep(0.02)
        self.active -= 1
        if any(p == [666] for p in prompts):
            raise ValueError("prompt too long (pretend)")
        return [Sample([len(p)], [-0.5], "x", "stop") for p in prompts]

    def load_weights(self, update: WeightUpdate) -> None:
        self.version = update.version


def test_queued_requests_become_one_call_and_report_their_version():
    sampler = FakeSampler()
    server = GenerationServer(sampler, batch_window=0.05)
    futures = [server.submit([1] * n, SamplingParams(), seed=n) for n in range(1, 5)]
    server.start()
    try:
        results = [f.result(timeout=5) for f in futures]
        assert sampler.calls == [(4, 0, True, [1, 2, 3, 4])]
        assert [s.token_ids for s, _ in results] == [[1], [2], [3], [4]]
        with server.updating():
            server.publish(WeightUpdate(1, "full", {}))  # no generate call can overlap this
            later = server.submit([7], SamplingParams())
            time.sleep(0.1)
            assert not later.done()
        assert later.result(timeout=5)[1] == 1
    finally:
        server.stop()
    with pytest.raises(CancelledError):
        server.generate([1], SamplingParams())


class PublishesAtTheGate(FakeSampler):
    """Its generate call starts a publish on another thread (as the learner does once a step
    ends), which waits at the gate. Reading `version` after generate waits for that publish to
    land: whatever reads it once the gate is released sees the new version."""

    def __init__(self, server_of):
        super().__init__()
        self.server_of, self.published = server_of, threading.Event()
        self._version, self.publisher = 0, None

    @property
    def version(self):
        if self.publisher is not None:
            self.published.wait(timeout=1.0)  # lands only if the gate was released
        return self._version

    @version.setter
    def version(self, value):
        self._version = value

    def generate(self, prompts, params, seeds=None, adapter=True):
        out = super().generate(prompts, params, seeds, adapter)
        server = self.server_of()

        def publish():
            with server.updating():
                server.publish(WeightUpdate(self._version + 1, "full", {}))
            self.published.set()

        self.publisher = threading.Thread(target=publish)
        self.publisher.start()
        while not server.gate._waiting_updates:  # the publish waits at the gate now
            time.sleep(0.001)
        return out


def test_a_sample_reports_the_version_that_produced_it_when_a_publish_follows_at_once():
    """The version is read while the call holds the gate: a publish that goes through the
    moment the call ends does not make its samples look one version fresher (staleness would
    be undercounted by one)."""
    server = None
    sampler = PublishesAtTheGate(lambda: server)
    server = GenerationServer(sampler).start()
    try:
        sample, version = server.generate([1], SamplingParams())
        sampler.publisher.join(timeout=5)
        assert sampler.published.is_set() and sampler._version == 1
        assert version == 0
    finally:
        server.stop()


def test_adapter_off_and_other_params_run_in_their_own_sub_batches():
    sampler = FakeSampler()
    server = GenerationServer(sampler, batch_window=0.05)
    rows = [
        ([1], SamplingParams(), 1),
        ([2], SamplingParams(temperature=0.0), None),
        ([3], SamplingParams(), 3),
    ]
    futures = [
        *server._put(rows, adapter=True),
        server.submit([4], SamplingParams(), adapter=False),
    ]
    server.start()
    try:
        [f.result(timeout=5) for f in futures]
    finally:
        server.stop()
    assert sorted((n, a) for n, _, a, _ in sampler.calls) == [(1, False), (1, True), (2, True)]


def test_one_bad_row_fails_alone():
    server = GenerationServer(FakeSampler()).start()
    try:
        out = server.generate_batch(
            [
                ([1], SamplingParams(), 0),
                ([666], SamplingParams(), 1),
                ([1, 2], SamplingParams(), 2),
            ]
        )
    finally:
        server.stop()
    assert [s.token_ids for s, _ in (out[0], out[2])] == [[1], [2]]
    assert isinstance(out[1][0], ValueError) and out[1][1] == -1


def test_a_request_withdrawn_before_sampling_is_skipped_and_the_server_serves_on():
    """A caller that stops waiting (an async actor at shutdown) cancels its future: the
    server drops it from the batch instead of failing on a cancelled future; a request
    already sampling can no longer be withdrawn, and a bad row's retry still works."""
    sampler = FakeSampler()
    server = GenerationServer(sampler, batch_window=0.05).start()
    try:
        with server.updating():  # the requests queue behind an update, as during training
            kept, gone = (server.submit([1] * n, SamplingParams(), seed=n) for n in (1, 2))
            time.sleep(0.2)  # the server thread holds both, waiting for the gate
            assert gone.cancel() and not kept.done()
        assert kept.result(timeout=5)[0].token_ids == [1] and gone.cancelled()
        assert sampler.calls == [(1, 0, True, [1])]
        out = server.generate_batch([([666], SamplingParams(), 0), ([1, 2], SamplingParams(), 1)])
        assert isinstance(out[0][0], ValueError) and out[1][0].token_ids == [2]
        assert not kept.cancel()  # done: too late to withdraw
    finally:
        server.stop()


def test_a_failed_sampler_fails_its_whole_call_without_retrying_rows():
    """SamplerFailure (e.g. a remote engine that timed out) is the sampler's, not a row's:
    rerunning each row alone would wait out the failure once per row."""

    class Failing(FakeSampler):
        def generate(self, prompts, params, seeds=None, adapter=True):
            self.calls.append(len(prompts))
            raise SamplerFailure("engine generate timed out after 1 s")

    sampler = Failing()
    server = GenerationServer(sampler).start()
    try:
        out = server.generate_batch(
            [
                ([1], SamplingParams(), 0),
                ([1, 2], SamplingParams(), 1),
                ([1, 2, 3], SamplingParams(), 2),
            ]
        )
    finally:
        server.stop()
    assert sampler.calls == [3]
    assert [(str(e), v) for e, v in out] == [("engine generate timed out after 1 s", -1)] * 3


def test_a_waiting_update_goes_before_more_sampling():
    gate, order = WeightsGate(), []

    def sampler():
        for _ in range(20):
            with gate.sampling():
                time.sleep(0.005)
        order.append("sampler done")

    t = threading.Thread(target=sampler)
    t.start()
    time.sleep(0.02)
    with gate.updating():
        order.append("update")
    t.join()
    assert order == ["update", "sampler done"]


def test_while_training_only_requests_that_run_the_trained_module_wait():
    """Inside `training()` a request on the sampler's own weights is served at once; one that
    would run the trainable's module (adapter off here) waits for the step to end and then
    samples the weights published after it."""
    sampler = FakeSampler()
    server = GenerationServer(sampler, batch_window=0.01).start()
    try:
        with server.training():
            shared = server.submit([1], SamplingParams(), adapter=False)
            free = server.submit([2], SamplingParams())
            assert free.result(timeout=5)[0].token_ids == [1]
            time.sleep(0.1)
            assert not shared.done()
            again = server.submit([3], SamplingParams())  # deferred rows do not block others
            assert again.result(timeout=5)[1] == 0
            assert not shared.done()
        with server.updating():
            server.publish(WeightUpdate(1, "lora", {}))
        assert shared.result(timeout=5)[1] == 1
    finally:
        server.stop()
    assert [(n, v, a) for n, v, a, _ in sampler.calls] == [
        (1, 0, True),
        (1, 0, True),
        (1, 1, False),
    ]


def test_a_request_deferred_by_training_is_cancelled_when_the_server_stops():
    server = GenerationServer(FakeSampler()).start()
    with server.training():
        shared = server.submit([1], SamplingParams(), adapter=False)
        time.sleep(0.1)
        server.stop()
    assert shared.cancelled()


def test_training_waits_for_a_running_call_on_its_module_but_not_for_others():
    gate, order = WeightsGate(), []
    sampling, release = threading.Event(), threading.Event()

    def sample(shares: bool) -> None:
        with gate.sampling(shares) as allowed:
            assert allowed
            sampling.set()
            release.wait(5)
            order.append(f"sampled shares={shares}")

    for shares in (False, True):
        sampling.clear()
        release.clear()
        t = threading.Thread(target=sample, args=(shares,))
        t.start()
        assert sampling.wait(5)
        threading.Timer(0.1, release.set).start()
        with gate.training():
            order.append("training")
            with gate.sampling(True) as allowed:
                assert not allowed  # the caller defers it
            with gate.sampling(False) as allowed:
                assert allowed
        t.join()
    assert order == ["training", "sampled shares=False", "sampled shares=True", "training"]


def test_hf_sampler_shares_the_trainable_exactly_when_it_runs_the_trainables_module(tiny_model_dir):
    from practicum.engine.hf import PolicyConfig, load_hf_engine

    seen = []
    for lora, merged in [(True, True), (True, False), (False, False)]:
        trainable, sampler = load_hf_engine(
            PolicyConfig(
                model=str(tiny_model_dir), dtype="float32", lora=lora, merged_sampling=merged
            )
        )
        trained = {id(p) for p in trainable.lm.parameters()}
        for adapter in (True, False):
            lm, _ = sampler._model(adapter)
            runs_it = lm is trainable.lm
            assert runs_it or not trained & {id(p) for p in lm.parameters()}
            assert sampler.shares_trainable(adapter) == runs_it, (lora, merged, adapter)
            seen.append(runs_it)
    assert seen == [False, True, True, True, True, False]


class SleepySampler(FakeSampler):
    """Like vLLM beside the learner with sleep mode: asleep through each train step (every
    call then waits: it shares the learner's GPU), and unable to sample or load while asleep."""

    def __init__(self, drops_weights: bool = False):
        super().__init__()
        self.asleep, self.events = False, []
        self.drops_weights = drops_weights
        """Like vLLM with full weights: they are dropped for the step, the publish wakes it."""
        self.awaits_weights = False

    def shares_trainable(self, adapter: bool) -> bool:
        return True

    def sleep(self):
        self.asleep = True
        self.awaits_weights = self.drops_weights
        self.events.append("sleep")

    def wake_up(self):
        assert not self.awaits_weights, "woken without its weights"
        self.asleep = False
        self.events.append("wake")

    def generate(self, prompts, params, seeds=None, adapter=True):
        assert not self.asleep, "sampled while asleep"
        self.events.append("generate")
        return super().generate(prompts, params, seeds, adapter)

    def load_weights(self, update):
        if self.awaits_weights:  # wakes around the reload
            self.asleep = self.awaits_weights = False
            self.events.append("wake")
        assert not self.asleep, "loaded weights while asleep"
        self.events.append(f"load v{update.version}")
        super().load_weights(update)


def test_a_sleeping_sampler_sleeps_through_the_train_step_and_wakes_before_the_publish():
    """The loop's sequence (train inside `training()`, then publish inside `updating()`): the
    sampler sleeps for the step, a request made during the step waits for the wake,
    the publish finds it awake, and a sampler without sleep/wake_up is left alone."""
    from practicum.engine.base import SleepingSampler

    sampler = SleepySampler()
    assert isinstance(sampler, SleepingSampler) and not isinstance(FakeSampler(), SleepingSampler)
    server = GenerationServer(sampler, batch_window=0.01).start()
    try:
        server.generate([1], SamplingParams())
        with server.training():
            assert sampler.asleep
            during = server.submit([2, 2], SamplingParams())
            time.sleep(0.1)
            assert not during.done()
        with server.updating():
            server.publish(WeightUpdate(1, "full", {}))
        assert during.result(timeout=5)[0].token_ids == [2]
        assert sampler.events[:4] == ["generate", "sleep", "wake", "load v1"] or sampler.events[
            :4
        ] == ["generate", "sleep", "wake", "generate"]
        assert sampler.events.count("sleep") == sampler.events.count("wake") == 1
        assert "load v1" in sampler.events
    finally:
        server.stop()


def test_a_sampler_that_drops_its_weights_sleeps_until_the_publish():
    """vLLM with full weights (sleep level 2): the step's end does not wake it; a request made
    during the step, or after it, waits for the publish, which wakes it."""
    sampler = SleepySampler(drops_weights=True)
    server = GenerationServer(sampler, batch_window=0.01).start()
    try:
        with server.training():
            during = server.submit([2, 2], SamplingParams())
        assert server.awaits_weights
        after = server.submit([3], SamplingParams())
        time.sleep(0.1)
        assert sampler.asleep and not during.done() and not after.done()
        with server.updating():
            server.publish(WeightUpdate(1, "full", {}))
        assert [
            (s.token_ids, v) for s, v in (during.result(timeout=5), after.result(timeout=5))
        ] == [([2], 1), ([1], 1)]
        assert sampler.events[:3] == ["sleep", "wake", "load v1"]
        assert not server.awaits_weights
    finally:
        server.stop()


def test_stopping_the_server_interrupts_a_running_hf_generate_and_leaves_the_sampler_usable(
    tiny_model_dir,
):
    """Ctrl-C / SIGTERM mid-batch: shutdown does not wait for a long generate to finish."""
    from practicum.engine.hf import PolicyConfig, load_hf_engine

    _, sampler = load_hf_engine(PolicyConfig(model=str(tiny_model_dir), dtype="float32"))
    server = GenerationServer(sampler).start()
    long = SamplingParams(temperature=1.0, max_new_tokens=1000)  # the tiny model's context
    future = server.submit([1, 2, 3], long, seed=0)
    deadline = time.time() + 30
    while not future.running() and time.time() < deadline:
        time.sleep(0.01)
    server.stop()  # 1000 tokens take far longer than this poll's 10 ms
    with pytest.raises(Interrupted):
        future.result(timeout=5)
    assert not sampler.interrupt.is_set()  # cleared: the sampler serves on
    out = sampler.generate([[1, 2, 3]], SamplingParams(temperature=0.0, max_new_tokens=4))
    assert len(out[0].token_ids) == 4 or out[0].finish_reason == "stop"
    sampler.interrupt.set()  # and an interrupt set before a call stops it at once
    with pytest.raises(Interrupted):
        sampler.generate([[1, 2, 3]], SamplingParams(temperature=0.0, max_new_tokens=4))
