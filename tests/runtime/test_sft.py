"""`practicum sft`: episodes of training tasks acted by the environment's demonstrator or by an
OpenAI-compatible teacher, run and graded by the real environment, the solved ones fitted
token-exactly; red team: a teacher earns nothing it did not fix; `kind: sft` in a pipeline."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import yaml

from practicum.config import load_config
from practicum.engine.chat import ChatFormat
from practicum.engine.models import load_builtin_tokenizer
from practicum.envs.swe.toy_repo import write_toy_instance
from practicum.errors import ConfigError
from practicum.runtime.sft import cut_at_stop, run_sft
from practicum.stages import run_stages
from practicum.store import EpisodeStore

FIX = "<edit>calc/ops.py\n<old>\n    return a - b\n</old>\n<new>\n    return a + b\n</new>\n</edit>"


def overrides(tmp_path, model_dir, *more):
    write_toy_instance(tmp_path / "suite", repos={"toy__other-1": "toy/other"})
    return [
        f"run.out_dir={tmp_path / 'runs'}",
        "run.name=s",
        f"model.model={model_dir}",
        "model.dtype=float32",
        "task.name=swe",
        f"task.options.instances={tmp_path / 'suite' / 'toy.jsonl'}",
        "task.options.held_out_packages=[other]",
        "task.options.few_shot=false",
        "sampling.max_new_tokens=48",
        "rollout.max_turns=4",
        "rollout.max_seq_len=1024",
        "rollout.env_workers=1",
        "sft.epochs=4",
        "sft.lr=3e-3",
        "sft.batch_size=4",
        *more,
    ]


def test_demonstrations_run_in_the_env_and_the_resolved_ones_are_fitted(
    tmp_path, tiny_model_dir, capsys
):
    cfg = load_config(None, overrides(tmp_path, tiny_model_dir))
    summary = run_sft(cfg, progress=True)
    out = tmp_path / "runs" / "s" / "sft"
    printed = capsys.readouterr().out  # not a terminal: counted lines, also in progress.log
    logged = (out / "progress.log").read_text()
    for line in [
        "evaluating (before sft) 0/1",
        "sft demonstrations 0/1",
        "sft demonstrations 1/1  solved 1",
        "evaluating (after sft) 1/1",
    ]:
        assert line in printed and line in logged, line
    [episode] = EpisodeStore(out / "episodes.jsonl")
    assert episode.task_id == "toy__calc-1"  # training tasks only
    actions = [t.action_text for t in episode.turns]
    assert actions[0] == "<search>def add</search>" and actions[-1] == "<submit></submit>"
    assert actions[2] == FIX and episode.solved and episode.reward == 1.0
    chat = ChatFormat(load_builtin_tokenizer())  # each reply is the policy's own turn
    end = chat.encode(chat.reply_suffix)[:1]
    assert all(t.sampled_ids == chat.encode_text(t.action_text) + end for t in episode.turns)
    assert summary["kept"] == summary["sampled"] == 1 and summary["train_resolved_rate"] == 1
    assert summary["sft_loss_last"] < summary["sft_loss_first"]
    assert (out / "policy" / "adapter_config.json").is_file()
    assert summary["eval_before"]["tasks"] == summary["eval_after"]["tasks"] == 1
    assert run_sft(cfg, progress=False) == json.loads((out / "summary.json").read_text())


class Teacher:
    """A scripted OpenAI-compatible server: its n-th reply of a conversation (n = assistant
    messages so far) is script[n], with chatter after the tool call."""

    def __init__(self, script):
        self.requests = []
        teacher = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                teacher.requests.append(body)
                n = sum(m["role"] == "assistant" for m in body["messages"])
                text = script[min(n, len(script) - 1)] + "\nThat should do it."
                data = json.dumps(
                    {"choices": [{"message": {"content": text}, "finish_reason": "stop"}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.http = HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return f"openai:http://127.0.0.1:{self.http.server_port}/v1|teacher"

    def __exit__(self, *exc):
        self.http.shutdown()
        self.http.server_close()
        self.thread.join()


@pytest.mark.parametrize(
    "script, kept",
    [
        (["<view>calc/ops.py</view>", FIX, "<submit></submit>"], 1),
        # claims done, fixed nothing
        (["<submit></submit>"], 0),
        # edits the test instead
        (
            [
                "<edit>tests/test_ops.py\n<old>\n    assert add(2, 3) == 5\n</old>\n"
                "<new>\n    assert True\n</new>\n</edit>",
                "<submit></submit>",
            ],
            0,
        ),
    ],
)
def test_a_teachers_trajectories_are_kept_only_when_the_tests_pass(
    tmp_path, tiny_model_dir, script, kept
):
    with Teacher(script) as spec:
        cfg = load_config(
            None,
            overrides(
                tmp_path,
                tiny_model_dir,
                "sft.source=teacher",
                f"sft.teacher={spec}",
                "sft.samples_per_task=2",
            ),
        )
        summary = run_sft(cfg, progress=False)
    assert summary["sampled"] == 2 and summary["kept"] == 2 * kept
    episodes = list(EpisodeStore(tmp_path / "runs" / "s" / "sft" / "episodes.jsonl"))
    # the teacher's reply is cut after its tool call, as the policy's sampler would cut it
    assert all(t.action_text == s for e in episodes for t, s in zip(e.turns, script))
    assert [bool(e.solved) for e in episodes] == [bool(kept)] * 2


def test_cut_at_stop_and_config_errors():
    assert (
        cut_at_stop("<view>a</view> and <bash>x</bash>", ["</bash>", "</view>"]) == "<view>a</view>"
    )
    assert cut_at_stop("no tool", ["</bash>"]) == "no tool"
    with pytest.raises(ConfigError, match="sft.source=teacher needs sft.teacher"):
        load_config(None, ["sft.source=teacher"])
    with pytest.raises(ConfigError, match="sft.teacher"):
        load_config(None, ["sft.teacher=gpt4"])


def test_an_env_without_demonstrations_says_so(tmp_path, tiny_model_dir):
    cfg = load_config(
        None,
        [
            f"run.out_dir={tmp_path}",
            f"model.model={tiny_model_dir}",
            "task.name=toy",
            "task.options.eval_size=1",
        ],
    )
    with pytest.raises(ConfigError, match="has no demonstrator; use sft.source=teacher"):
        run_sft(cfg, progress=False)


def test_a_pipeline_starts_rft_from_the_sft_policy(tmp_path, tiny_model_dir):
    stages = [{"name": "sft", "kind": "sft"}, {"name": "rft", "kind": "rft"}]
    cfg = load_config(
        None,
        overrides(
            tmp_path,
            tiny_model_dir,
            "rft.samples_per_task=2",
            f"stages={json.dumps(stages)}",
            "run.name=pipe",
        ),
    )
    report = run_stages(cfg, progress=False)
    sft, rft = report["stages"]
    assert (sft["kind"], rft["kind"]) == ("sft", "rft") and sft["kept"] == 1
    init = yaml.safe_load((tmp_path / "runs/pipe/1-rft/rft/config.yaml").read_text())
    assert init["model"]["init"] == sft["policy"]
    assert "| 0-sft | sft |" in (tmp_path / "runs/pipe/report.md").read_text()


def test_the_cli_command_reports_a_bad_config_on_one_line(capsys):
    from practicum.cli import main

    assert main(["sft", "sft.source=teacher"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("practicum: ") and "sft.teacher" in err and "\n" not in err
