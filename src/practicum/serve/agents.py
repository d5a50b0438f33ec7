"""Third-party agents driving `practicum serve`, each in its own venv (never a dependency of
practicum): the prompted-agent baselines of the seed papers under their own scaffolds.

    result = run_aide(url, "calc", "iris-species", workdir, steps=2)   # AIDE (aideml 0.2.2)
    result.report                                                      # practicum's grade

AIDE plans and writes a solution script per step (one chat call), runs it, then reviews the
run with a forced `submit_review` tool call; its last `submission.csv` is graded by practicum's
own grader on the competition's private answers (which AIDE never sees: only the public files
are copied into its data folder).

    run, verdict = run_mini_swe_agent_on_task(url, "calc", instance, workdir)  # mini-swe-agent

mini-swe-agent works a practicum SWE task in a fresh workspace (one commit of the base state);
its changes are diffed inside practicum's sandbox (the agent could have planted a `.git/config`
hook: host git never runs on its repository) and graded by practicum's FULL-rule grader.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from practicum.agent.forward import UnixToTcp
from practicum.errors import PracticumError

ROOT = Path(__file__).resolve().parents[3]
"""The repository (scripts/ holds the venv set-up scripts)."""


def agent_python(agent: str, venv: Path | None = None) -> Path:
    """The python of an agent's own venv, created by scripts/<agent>_venv.sh when missing."""
    script = ROOT / "scripts" / f"{agent}_venv.sh"
    if not script.is_file():
        raise PracticumError(f"no set-up script {script} (agents run from a source checkout)")
    args = ["bash", str(script)] + ([str(venv)] if venv else [])
    done = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise PracticumError(f"{script.name} failed: {done.stderr[-2000:]}")
    python = Path(done.stdout.strip().splitlines()[-1])
    return python if python.is_absolute() else ROOT / python


def _run_until(cmd: list[str], timeout: float, **kw) -> tuple[int, str, bool]:
    """(returncode, stdout + stderr, timed out). At the time limit the agent's whole process
    group is killed (returncode -9): what it wrote so far is still there to be graded."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out + err, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return -9, out + err + f"\n[practicum: stopped at the time limit of {timeout:.0f} s]", True
    except BaseException:  # interrupted: the agent's group must not outlive its caller
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


@dataclass
class AgentRun:
    returncode: int
    seconds: float
    workdir: Path
    submission: Path | None
    """The agent's last submission file, if it wrote one."""
    report: dict | None
    """practicum's `GradeReport` of it (None without a submission)."""
    journal: list[dict]
    """AIDE's nodes: plan, code, analysis (the review's summary), is_buggy, metric."""
    log_tail: str
    timed_out: bool = False


def interpreter_folders(program: str) -> list[Path]:
    """What the agent's interpreter and practicum's forwarder need to stay visible under the
    private /tmp (a checkout, and its venvs, may live there): every venv along `program`'s
    symlink chain (a venv made from another venv's python links to it) and this interpreter's
    own folders (`python_roots`: an agent's venv may reuse their packages by a .pth file)."""
    from practicum.envs.sandbox.plan import python_roots

    found = set(python_roots())
    hop = Path(program).absolute()
    for _ in range(40):  # a symlink loop ends the walk
        if (hop.parent.parent / "pyvenv.cfg").is_file():
            found.add(hop.parent.parent)
        if not hop.is_symlink():
            break
        hop = hop.parent / os.readlink(hop)
    return sorted(found)


def confined(
    cmd: list[str], workdir: Path, hidden: tuple[Path, ...], endpoint: Path | None = None
) -> list[str]:
    """`cmd` under bubblewrap: the host read-only, `workdir` the only writable folder, a private
    /tmp (the venv `cmd[0]` lives in stays visible, read-only: a checkout may live under /tmp),
    /dev/shm and /proc, `hidden` covered (folders by an empty tmpfs, files by /dev/null), and
    no network but its own loopback (the host's ports, Ray's and the weight group's included,
    are out of reach). With `endpoint` (a Unix socket, e.g. `UnixToTcp`'s), the command runs
    behind the loopback forwarder (`practicum.agent.forward`): `inner_url()` reaches it."""
    from practicum.agent.runner import FORWARDER, PORT

    args = [
        shutil.which("bwrap") or "bwrap",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--tmpfs",
        "/dev/shm",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-net",
        "--die-with-parent",
    ]
    for folder in interpreter_folders(cmd[0]):  # visible read-only, also under /tmp
        args += ["--ro-bind", str(folder), str(folder)]
    if endpoint is not None:
        args += ["--ro-bind", str(endpoint.parent), str(endpoint.parent)]
        cmd = [
            sys.executable,
            "-I",
            "-S",
            "-c",
            FORWARDER.read_text(),
            str(endpoint),
            str(PORT),
            "--",
            *cmd,
        ]
    args += ["--bind", str(workdir), str(workdir)]
    for path in hidden:
        if path.is_dir():
            args += ["--tmpfs", str(path), "--remount-ro", str(path)]
        elif path.exists():
            args += ["--ro-bind", "/dev/null", str(path)]
    return args + ["--chdir", str(workdir), "--", *cmd]


def inner_url() -> str:
    """The endpoint's base URL inside a `confined` command (its loopback forwarder)."""
    from practicum.agent.runner import PORT

    return f"http://127.0.0.1:{PORT}/v1"


def run_aide(
    base_url: str,
    model: str,
    competition: str,
    workdir: Path,
    steps: int = 1,
    data_root: Path | None = None,
    python: Path | None = None,
    exec_timeout: int = 120,
    timeout: float = 1800,
    sandbox: bool | None = None,
) -> AgentRun:
    """One AIDE run on a bundled competition against an OpenAI-compatible endpoint.

    AIDE runs the scripts it writes itself, so with `sandbox` (default: when bwrap is
    installed) the whole agent runs under bubblewrap (`confined`) with the competition's private
    answers, the prepared data root and the bundled source data hidden, as the MLE env hides
    them from its own runs."""
    from practicum.envs.mle.competitions import source_data
    from practicum.envs.mle.competitions.grading import grade_submission
    from practicum.envs.mle.competitions.loading import load_competition

    comp = load_competition(competition)
    paths = comp.prepare(data_root)
    workdir = Path(workdir)
    data = workdir / "data"
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(paths.public, data)
    (workdir / "task.md").write_text(comp.description)
    python = python or agent_python("aide")
    aide = Path(python).parent / "aide"
    env = {
        **os.environ,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "practicum",
        "PYTHONPATH": "",
    }
    direction = "lower is better" if comp.lower_is_better else "higher is better"
    cmd = [
        str(aide),
        f"data_dir={data}",
        f"desc_file={workdir / 'task.md'}",
        f"log_dir={workdir / 'logs'}",
        f"workspace_dir={workdir / 'workspaces'}",
        f"exp_name={competition}",
        f"agent.steps={steps}",
        f"agent.code.model={model}",
        f"agent.feedback.model={model}",
        f"report.model={model}",
        f"exec.timeout={exec_timeout}",
        "generate_report=False",
        f"eval={comp.metric} ({direction})",
    ]
    start = time.perf_counter()
    if sandbox or (sandbox is None and shutil.which("bwrap")):
        root = paths.public.parent.parent.parent  # <data root>/<id>/prepared/public
        url = urllib.parse.urlsplit(base_url)
        with UnixToTcp(url.hostname or "127.0.0.1", url.port or 80) as socket_path:
            cmd = confined(
                cmd,
                workdir.resolve(),
                (paths.private, root, *source_data.hidden_paths()),
                Path(socket_path),
            )
            env.update(HOME=str(workdir.resolve()), OPENAI_BASE_URL=inner_url())
            code, out, timed_out = _run_until(cmd, timeout, cwd=workdir, env=env)
    else:
        code, out, timed_out = _run_until(cmd, timeout, cwd=workdir, env=env)
    seconds = time.perf_counter() - start
    subs = sorted((workdir / "workspaces").glob("*/working/submission.csv"))
    submission = subs[-1] if subs else None
    report = grade_submission(comp, submission, data_root).to_dict() if submission else None
    return AgentRun(
        code,
        seconds,
        workdir,
        submission,
        report,
        _journal(workdir / "logs"),
        out[-3000:],
        timed_out,
    )


def _journal(logs: Path) -> list[dict]:
    files = sorted(logs.glob("*/journal.json"))
    if not files:
        return []
    nodes = json.loads(files[-1].read_text()).get("nodes", [])
    keep = ("step", "plan", "code", "analysis", "is_buggy", "metric", "exc_type")
    return [{k: n.get(k) for k in keep} for n in nodes]


@dataclass
class MiniRun:
    returncode: int
    seconds: float
    exit_status: str | None
    """mini-swe-agent's verdict: Submitted, LimitsExceeded, FormatError, ..."""
    patch: str | None
    """The repository's changes since its base commit, diffed inside the sandbox (what a SWE
    grader applies and tests); None when they could not be computed."""
    messages: int
    """Messages in the trajectory (system, task, model turns, observations)."""
    trajectory: Path
    log_tail: str
    timed_out: bool = False


def run_mini_swe_agent(
    base_url: str,
    model: str,
    workspace,
    task: str,
    workdir: Path,
    step_limit: int = 10,
    python: Path | None = None,
    timeout: float = 1800,
    max_tokens: int | None = None,
) -> MiniRun:
    """mini-swe-agent (bash-only scaffold, litellm client) on a `practicum.envs.swe.workspace`
    repository, its commands run by its bubblewrap environment (host read-only, the repository
    writable), against an OpenAI-compatible endpoint. `max_tokens` caps each reply (None: the
    server's default); at `timeout` seconds the agent is stopped and its diff graded as is."""
    repo = workspace.repo
    python = python or agent_python("mini")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    traj = workdir / "trajectory.json"
    env = {
        **os.environ,
        "MSWEA_CONFIGURED": "true",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": "",
        "MSWEA_GLOBAL_CONFIG_DIR": str(workdir / "mswea-config"),
    }
    cmd = [
        str(Path(python).parent / "mini"),
        "-m",
        f"openai/{model}",
        "-c",
        "mini.yaml",
        "-c",
        f"model.model_kwargs.api_base={base_url}",
        "-c",
        "model.model_kwargs.api_key=practicum",
        "-c",
        "model.model_kwargs._skip_mcp_handler=true",
        "-c",
        f"agent.step_limit={step_limit}",
        "-c",
        f"environment.cwd={Path(repo).resolve()}",
        "--environment-class",
        "bubblewrap",
        "-t",
        task,
        "-y",
        "--exit-immediately",
        "-o",
        str(traj),
    ]
    if max_tokens is not None:
        cmd[cmd.index("--environment-class") : 0] = [
            "-c",
            f"model.model_kwargs.max_tokens={max_tokens}",
        ]
    start = time.perf_counter()
    code, out, timed_out = _run_until(cmd, timeout, cwd=workdir, env=env, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    data = json.loads(traj.read_text()) if traj.is_file() else {}
    patch, _ = workspace.diff()  # inside the sandbox, never host git on the agent's repo
    status = (data.get("info") or {}).get("exit_status") or ("TimeLimit" if timed_out else None)
    return MiniRun(
        code, seconds, status, patch, len(data.get("messages", [])), traj, out[-3000:], timed_out
    )


def run_mini_swe_agent_on_task(
    base_url: str,
    model: str,
    instance,
    workdir: Path,
    step_limit: int = 10,
    python: Path | None = None,
    timeout: float = 1800,
    max_tokens: int | None = None,
):
    """(MiniRun, Verdict): mini-swe-agent on a practicum SWE task (`SweInstance`), its patch
    graded by `practicum.envs.swe.grading.grade` (the paper's identical-scaffold comparison:
    run it once per served model, base and trained)."""
    from practicum.envs.swe.grading import grade
    from practicum.envs.swe.workspace import Workspace

    workspace = Workspace.create(instance)
    try:
        _own(workspace.repo)  # the sandbox left it to its uid; mini's bubblewrap runs as us
        run = run_mini_swe_agent(
            base_url,
            model,
            workspace,
            instance.problem_statement,
            workdir,
            step_limit,
            python,
            timeout,
            max_tokens,
        )
    finally:
        workspace.close()
    return run, grade(instance, run.patch or "")


def _own(root: Path) -> None:
    """Give the tree back to this process's uid (lchown: never through a symlink)."""
    uid, gid = os.getuid(), os.getgid()
    os.lchown(root, uid, gid)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), uid, gid)
