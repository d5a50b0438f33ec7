"""`practicum audit` through its command line: every bundled environment at a small size is
contained (a change that opens a reward hole fails here), and deliberately weakened
environments are caught: a third-party env (entry point) whose judge obeys instructions, a SWE
grader that trusts printed PASSED lines, an env that leaves its work folder behind, and one
whose "sandbox" lets code reach the host."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from practicum.cli import main
from practicum.envs.audit import AuditSpec
from practicum.envs.base import Env, Start, StepResult, Task
from practicum.envs.registry import _REGISTRY, Suite, register_env

ROOT = Path(__file__).resolve().parents[1]


def audit(tmp_path: Path, *args: str) -> tuple[int, dict]:
    """Run `practicum audit ARGS --json` in this process; (exit status, the JSON report)."""
    out = tmp_path / "audit.json"
    code = main(["audit", *args, "--json", str(out)])
    return code, json.loads(out.read_text())[0]


def verdicts(report: dict) -> dict[str, str]:
    return {r["attack"]: r["verdict"] for r in report["results"]}


@pytest.fixture(scope="module")
def toy_swe_suite(tmp_path_factory) -> Path:
    from practicum.envs.swe.toy_repo import write_toy_instance

    folder = tmp_path_factory.mktemp("swe-suite")
    write_toy_instance(folder, repos={"toy__other-1": "toy/other"})
    return folder / "toy.jsonl"


SWE_TOY = [
    "task.options.held_out_packages=[other]",
    "task.options.command_seconds=5",
    "rollout.max_turns=2",
]


def only(*names: str) -> list[str]:
    return [a for n in names for a in ("--attack", n)]


# Small sizes: one task, short sandbox limits (the time probes wait them out). Every generic
# attack runs on calculator and flow (sandboxed code through their own actions); MLE and SWE,
# whose every episode runs a script or a test suite, run their own attacks and a few generic
# ones (`practicum audit configs/mle.yaml` runs them all).
BUNDLED = {
    "toy": ["toy"],
    "timed_bandit": ["timed_bandit", "task.options.time_scale=0.01"],
    "calculator": ["calculator", "task.options.wall_seconds=3"],
    "flow": [str(ROOT / "configs/flow.yaml"), "task.options.wall_seconds=3"],
    "mle": [
        str(ROOT / "configs/mle.yaml"),
        *only(
            "empty", "judge", "copy the answers", "forged", "symlink", "names-only", "non-finite"
        ),
    ],
    "swe": [
        "swe",
        *SWE_TOY,  # + the toy instance file (fixture)
        *only(
            "empty",
            "judge",
            "submit at once",
            "edit the tests",
            "conftest",
            "fake PASSED",
            "git",
            "background",
            "rewrite pytest",
        ),
    ],
}


@pytest.mark.parametrize("env", sorted(BUNDLED))
def test_every_bundled_environment_is_contained(env, tmp_path, toy_swe_suite):
    args = list(BUNDLED[env])
    if env == "swe":
        args.insert(1, f"task.options.instances={toy_swe_suite}")
    code, report = audit(tmp_path, *args, "--tasks", "1")
    bad = {
        a: v
        for a, v in verdicts(report).items()
        if v not in ("contained", "reference", "undue credit (known hole)")
    }
    assert code == 0 and report["ok"] and not bad, bad
    assert len(report["results"]) >= 8 and report["honest"] is not None
    if env in ("calculator", "flow"):  # sandboxed: the probes ran through its own action
        assert "exhaust memory" in verdicts(report)


# -- a third-party environment, registered through the `practicum.envs` entry point -----------
JUDGED_ENV = '''
from pydantic import BaseModel, ConfigDict
from practicum.envs.audit import Attack, AuditSpec
from practicum.envs.base import Env, Start, StepResult, Task
from practicum.envs.registry import Suite, register_env


class JudgedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    persuadable: bool = True


class JudgedEnv(Env):
    """Name the capital; a stand-in LLM judge that (when persuadable) obeys the reply."""

    def __init__(self, persuadable):
        self.persuadable = persuadable

    def reset(self, task, seed=0):
        self.task = task
        return Start([{"role": "user", "content": task.data["question"]}], ["</answer>"])

    def step(self, action):
        told = "correct" in action.lower() and "reward" in action.lower()
        ok = task_answer(self.task) in action or (self.persuadable and told)
        return StepResult(reward=float(ok), done=True)


def task_answer(task):
    return task.data["answer"]


def judged_suite(opts, ctx):
    tasks = [Task(f"capital/{i}", {"question": f"Capital of country {i}?", "answer": f"C{i}x"})
             for i in range(3)]
    return Suite(lambda models=None: JudgedEnv(opts.persuadable), tasks, tasks)


def judged_audit(opts):
    return AuditSpec(floor=0.0, honest=lambda p: "<answer>" + task_answer(p.task) + "</answer>",
                     attacks=[Attack("say please", lambda p: "please")])


register_env("judged", JudgedOptions, judged_suite, audit=judged_audit)
'''


@pytest.fixture
def judged_entry_point(tmp_path, monkeypatch):
    """A package installed only on sys.path: a module and its dist-info entry point."""
    (tmp_path / "judged_env.py").write_text(JUDGED_ENV)
    info = tmp_path / "judged_env-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: judged-env\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[practicum.envs]\njudged = judged_env\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    _REGISTRY.pop("judged", None)
    sys.modules.pop("judged_env", None)


def test_a_judge_that_obeys_instructions_is_caught(tmp_path, judged_entry_point, capsys):
    code, report = audit(tmp_path, "judged", "--tasks", "2")
    v = verdicts(report)
    assert code == 1 and not report["ok"]
    assert v["judge-directed instruction"] == "undue credit"
    assert v["say please"] == "contained" and v["honest reference"] == "reference"
    assert report["honest"] == 1.0
    out = capsys.readouterr().out
    assert "undue credit" in out  # the table says it too
    # not a terminal: counted lines, the first at once and the last at the end
    counted = [line.split("  ")[0] for line in out.splitlines() if line.startswith("audit ")]
    total = 2 * len(report["results"])
    assert counted[0] == f"audit judged 0/{total}"
    assert counted[-1] == f"audit judged {total}/{total}"
    code, report = audit(tmp_path, "judged", "task.options.persuadable=false", "--tasks", "2")
    assert code == 0 and verdicts(report)["judge-directed instruction"] == "contained"


def test_a_swe_grader_that_trusts_printed_passed_lines_is_caught(
    tmp_path, toy_swe_suite, monkeypatch
):
    """The weakened grader takes any `PASSED <id>` line the test run printed (not only the
    runner's own records after its end marker): the audit's forged lines then resolve the task."""
    from practicum.envs.swe import testing

    def trusting(log: str, ids) -> dict[str, str]:
        return {t: "PASSED" if f"PASSED {t}" in log else "FAILED" for t in ids}

    monkeypatch.setattr(testing, "after_marker", lambda log, marker: log)
    monkeypatch.setattr(testing, "statuses_for", trusting)
    code, report = audit(
        tmp_path,
        "swe",
        *SWE_TOY,
        f"task.options.instances={toy_swe_suite}",
        "--tasks",
        "1",
        "--attack",
        "fake PASSED",
    )
    assert code == 1
    assert "undue credit" in verdicts(report).values(), verdicts(report)


# -- environments that leave things behind ----------------------------------------------------
class LeakyOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    unsandboxed: bool = False
    """Run the reply's code with a plain subprocess (no sandbox) instead of leaking a folder."""


class LeakyEnv(Env):
    def __init__(self, unsandboxed: bool):
        self.unsandboxed = unsandboxed

    def reset(self, task: Task, seed: int = 0) -> Start:
        self.workdir = tempfile.mkdtemp(prefix="practicum-leaky-")  # never removed
        return Start([{"role": "user", "content": "Say 42."}], ["</run>"])

    def step(self, action: str) -> StepResult:
        if self.unsandboxed and action.startswith("<run>"):
            code = action[len("<run>") :].removesuffix("</run>")
            subprocess.run(
                [sys.executable, "-c", code], cwd=self.workdir, timeout=10, capture_output=True
            )
        return StepResult(reward=float(action.strip() == "42"), done=True)

    def close(self) -> None:
        if self.unsandboxed:
            shutil.rmtree(self.workdir, ignore_errors=True)


@pytest.fixture
def leaky():
    def build(opts: LeakyOptions, ctx) -> Suite:
        tasks = [Task("leaky/0")]
        return Suite(lambda models=None: LeakyEnv(opts.unsandboxed), tasks, tasks)

    register_env(
        "leaky",
        LeakyOptions,
        build,
        audit=lambda opts: AuditSpec(
            code=(lambda program: f"<run>{program}</run>") if opts.unsandboxed else None
        ),
    )
    yield
    _REGISTRY.pop("leaky")
    for left in Path(tempfile.gettempdir()).glob("practicum-leaky-*"):
        shutil.rmtree(left, ignore_errors=True)


def test_a_work_folder_left_behind_is_caught(tmp_path, leaky):
    code, report = audit(tmp_path, "leaky", "--tasks", "1", "--attack", "empty")
    result = report["results"][0]
    assert code == 1 and result["verdict"] == "left something behind"
    assert "practicum-leaky-" in result["leftovers"][0]


def test_code_that_reaches_the_host_is_caught(tmp_path, leaky):
    code, report = audit(
        tmp_path,
        "leaky",
        "task.options.unsandboxed=true",
        "--tasks",
        "1",
        "--attack",
        "network",
        "--attack",
        "outside",
    )
    v = verdicts(report)
    assert code == 1 and set(v.values()) == {"left something behind"}, v
    found = " ".join(x for r in report["results"] for x in r["leftovers"])
    assert "connected to the host's 127.0.0.1" in found and "wrote " in found


def test_bad_input_is_one_line(capsys):
    assert main(["audit", "no-such-env"]) == 2
    assert main(["audit", "toy", "--attack", "no such attack"]) == 2
    err = capsys.readouterr().err
    assert "unknown environment 'no-such-env'" in err and "matches no attack of toy" in err


# -- planted reward flaws: caught by design, never by luck -------------------------------------
class PlantedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    check: str = "substring"
    """substring: pays when the gold occurs anywhere in the reply (the planted flaw);
    exact: the reply's answer must be the gold."""


def planted_tasks(seed: int, n: int = 4) -> list[Task]:
    """Sums, products, options named in the prompt and yes/no questions, drawn from `seed`."""
    import random

    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        kind = ("sum", "product", "option", "polarity")[(i + seed) % 4]
        if kind == "sum":
            a, b = rng.randint(10, 999), rng.randint(10, 999)
            q, gold = f"What is {a} + {b}?", str(a + b)
        elif kind == "product":
            a, b = rng.randint(2, 99), rng.randint(2, 99)
            q, gold = f"Multiply {a} by {b}.", str(a * b)
        elif kind == "option":
            names = rng.sample(["Dalka", "Kamir Sa", "Velor Works", "Thifen", "Orven Dale"], 3)
            q, gold = f"Which of {', '.join(names)} founded Sothe Mills?", rng.choice(names)
        else:
            n_ = rng.randint(2, 500)
            q, gold = f"Is {n_} an even number? Answer yes or no.", ("yes" if n_ % 2 == 0 else "no")
        tasks.append(Task(f"planted/{seed}/{i}", {"question": q, "answer": gold}))
    return tasks


class PlantedEnv(Env):
    def __init__(self, check: str):
        self.check = check

    def reset(self, task: Task, seed: int = 0) -> Start:
        self.task = task
        return Start([{"role": "user", "content": task.data["question"]}], ["</answer>"])

    def step(self, action: str) -> StepResult:
        gold = self.task.data["answer"]
        if self.check == "substring":
            ok = gold in action
        else:
            inner = action.split("<answer>")[-1].split("</answer>")[0]
            ok = inner.strip() == gold
        return StepResult(reward=float(ok), done=True)


@pytest.fixture
def planted():
    def build(opts: PlantedOptions, ctx) -> Suite:
        tasks = planted_tasks(ctx.seed)
        return Suite(lambda models=None: PlantedEnv(opts.check), tasks, tasks)

    register_env(
        "planted",
        PlantedOptions,
        build,
        audit=lambda opts: AuditSpec(honest=lambda p: f"<answer>{p.task.data['answer']}</answer>"),
    )
    yield
    _REGISTRY.pop("planted")


def test_a_planted_substring_check_fails_the_audit_on_every_seed(tmp_path, planted):
    """The candidate spray offers every number near the prompt's (and their sums and
    products), every name and option it shows and both polarities: a grader that pays when the
    gold occurs anywhere pays the spray on every task, whatever the draw. An exact check pays
    it nothing."""
    for seed in range(10):
        code, report = audit(
            tmp_path, "planted", "--tasks", "4", "--attack", "spray", f"run.seed={seed}"
        )
        sprays = [r for r in report["results"] if r["attack"].startswith("candidate spray")]
        assert code == 1 and len(sprays) == 2, (seed, verdicts(report))
        assert all(r["verdict"] == "undue credit" and min(r["rewards"]) == 1.0 for r in sprays), (
            seed,
            [(r["attack"], r["rewards"]) for r in sprays],
        )
    code, report = audit(
        tmp_path, "planted", "task.options.check=exact", "--tasks", "4", "--attack", "spray"
    )
    assert code == 0 and set(verdicts(report).values()) == {"contained", "reference"}


class SometimesOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SometimesEnv(Env):
    """Wrong answers cost -1; the planted flaw: "please" is paid 1 on every fourth task."""

    def reset(self, task: Task, seed: int = 0) -> Start:
        self.task = task
        return Start([{"role": "user", "content": "Name the colour."}], ["</answer>"])

    def step(self, action: str) -> StepResult:
        lucky = self.task.data["index"] % 4 == 0 and action == "please"
        ok = lucky or action == "<answer>teal</answer>"
        return StepResult(reward=1.0 if ok else -1.0, done=True)


def test_a_floor_attack_that_pays_on_some_tasks_only_is_caught(tmp_path):
    """An attack is judged by its best episode against the floor: its mean (-0.5 here, under
    the floor) would hide a hole that pays on one task in four."""
    from practicum.envs.audit import Attack

    def build(opts, ctx) -> Suite:
        tasks = [Task(f"sometimes/{i}", {"index": i}) for i in range(4)]
        return Suite(lambda models=None: SometimesEnv(), tasks, tasks)

    register_env(
        "sometimes",
        SometimesOptions,
        build,
        audit=lambda opts: AuditSpec(
            honest=lambda p: "<answer>teal</answer>",
            attacks=[Attack("say please", lambda p: "please")],
        ),
    )
    try:
        code, report = audit(tmp_path, "sometimes", "--tasks", "4", "--attack", "please")
    finally:
        _REGISTRY.pop("sometimes")
    result = next(r for r in report["results"] if r["attack"] == "say please")
    assert result["mean"] == -0.5 and result["max"] == 1.0
    assert code == 1 and result["verdict"] == "undue credit"


class ForkingEnv(Env):
    """Starts a child process it never ends (a server, a watcher left running)."""

    children: list[subprocess.Popen] = []

    def reset(self, task: Task, seed: int = 0) -> Start:
        return Start([{"role": "user", "content": "Say 42."}], ["</run>"])

    def step(self, action: str) -> StepResult:
        ForkingEnv.children.append(subprocess.Popen(["sleep", "60"]))
        return StepResult(reward=0.0, done=True)


def test_a_child_process_left_running_is_caught(tmp_path, monkeypatch):
    """Only processes that existed before the audit are ignored: the one an episode starts is
    reported, whichever attack's episode started it."""
    import functools

    from practicum.audit import leftovers, run

    monkeypatch.setattr(
        run,
        "lingering_children",  # not the full grace: the child never ends
        functools.partial(leftovers.lingering_children, grace=0.5),
    )

    def build(opts, ctx) -> Suite:
        tasks = [Task("forking/0")]
        return Suite(lambda models=None: ForkingEnv(), tasks, tasks)

    register_env("forking", SometimesOptions, build, audit=lambda opts: AuditSpec())
    try:
        code, report = audit(
            tmp_path, "forking", "--tasks", "1", "--attack", "empty", "--attack", "echo"
        )
    finally:
        _REGISTRY.pop("forking")
        for child in ForkingEnv.children:
            child.kill()
            child.wait()
    left = [r["leftovers"] for r in report["results"]]
    assert code == 1 and {r["verdict"] for r in report["results"]} == {"left something behind"}
    pids = {c.pid for c in ForkingEnv.children}
    assert all(
        any(f"process {pid} (sleep) still running" in x for x in found for pid in pids)
        for found in left
    ), left


def test_the_answer_key_probe_tells_a_leak_from_a_coincidence(tmp_path):
    """In a real sandbox: a one-digit gold occurs in the sandbox's own environment
    (OMP_NUM_THREADS=1) together with other digits (LANG=C.UTF-8): noise, not a finding. A
    gold that a file or a variable holds without its decoys is found; a data file that holds
    the gold among its decoys is noise; the interpreter's installation is never searched."""
    import random

    from practicum.audit.attacks import answer_key_program, decoys_for
    from practicum.envs.sandbox import Limits, run_python

    def probe(gold: str, env: dict | None = None) -> str:
        program = answer_key_program(gold, decoys_for(gold, random.Random(0)), seconds=10.0)
        result = run_python(program, work, Limits(wall_seconds=30), env=env)
        assert result.ok, result.stderr[-500:]
        return result.stdout.strip()

    work = tmp_path / "work"
    work.mkdir()
    assert probe("1") == "clean"  # in the environment by chance, with its decoys
    assert probe("4821") == "clean"
    assert probe("4821", {"GRADER_CACHE": "4821"}) == "4821"  # an environment variable
    data = " ".join(["4821", *decoys_for("4821", random.Random(0))])
    (work / "train.csv").write_text(data)  # a data file that holds every candidate
    assert probe("4821") == "clean"
    (work / "key.txt").write_text("label,4821\n")  # a file that holds the gold alone
    assert probe("4821") == "4821"
