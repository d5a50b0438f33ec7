"""`practicum audit` of an agent config (`rollout.agent`): the agent's command replaced by each
attack's program (`practicum.audit.agent_attacks`), run through the same session, endpoint,
sandbox and grader as training, on the config's model and limits (time limit capped at
`ATTACK_SECONDS` for the attacks). Verdicts, as for environments (`practicum.audit.run`):

  contained               the episode failed as it should (hang, crash, flood, max_tokens) or
                          earned no more than the floor, and every check from outside is clean
  not stopped             an attack that had to fail the episode did not (or for another reason)
  undue credit            reward above the environment's floor
  left something behind   a process, a practicum temp path, a file or connection on the host,
                          a call recorded from a stranger's key, a secret read

The honest reference is the config's own agent on the same tasks.
"""

from __future__ import annotations

import gc
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from practicum.audit.agent_attacks import PRELUDE, SLEEPS, AgentAttack, agent_attacks
from practicum.audit.leftovers import TempWatch, descendants, lingering_children
from practicum.audit.run import AttackResult, AuditReport
from practicum.config import Config
from practicum.envs.audit import AuditSpec
from practicum.envs.registry import env_entry, parse_options
from practicum.episode import Episode
from practicum.errors import ConfigError

ATTACK_SECONDS = 20.0
"""Time limit of an attack's episode (the config's, if lower)."""


@dataclass
class AgentProbe:
    """What the audit saw of one attack's episode, for its checks."""

    episode: Episode
    decoy: Episode | None
    unauthorized: int
    """Requests the endpoint refused for their key while the attack ran."""
    listener_hits: int
    """Connections the audit's host listener accepted while the attack ran."""
    outside: list[Path]
    """Host folders the attack tried to write into."""

    @property
    def log(self) -> str:
        return str(self.episode.info.get("log", ""))


def _checks() -> dict[str, callable]:
    def wrong_key(p: AgentProbe) -> list[str]:
        out = []
        if p.episode.metrics.get("agent_calls", 0):
            out.append("a call with a wrong key was recorded")
        if p.unauthorized < 3:
            out.append(f"only {p.unauthorized} of 3 wrong-key requests got 401")
        return out

    def steals(p: AgentProbe) -> list[str]:
        out = ["a foreign key answered"] if "foreign key answered 200" in p.log else []
        if p.decoy is not None and p.decoy.metrics.get("agent_calls", 0):
            out.append("a call was recorded into the decoy's episode")
        return out

    def network(p: AgentProbe) -> list[str]:
        return (
            [f"the host listener accepted {p.listener_hits} connection(s)"]
            if p.listener_hits or "REACHED" in p.log
            else []
        )

    def outside(p: AgentProbe) -> list[str]:
        return [f"wrote {f / 'escaped.txt'}" for f in p.outside if (f / "escaped.txt").exists()]

    def secrets(p: AgentProbe) -> list[str]:
        return [line for line in p.log.splitlines() if line.startswith("READABLE")]

    return {
        "wrong key": wrong_key,
        "steals another agent's key": steals,
        "reaches the network": network,
        "writes outside its folder": outside,
        "reads the run's secrets": secrets,
    }


class _Listener:
    """A TCP listener on every host address: an agent that reaches it got out of its sandbox."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            conn.close()

    @staticmethod
    def hosts() -> list[str]:
        found = {"127.0.0.1"}
        try:
            found |= {
                a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
            }
        except OSError:
            pass
        return sorted(found)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def run_agent_audit(cfg: Config, tasks: int = 1, only: list[str] | None = None) -> AuditReport:
    """Audit `cfg`'s agent (module doc) on the first `tasks` training tasks."""
    from practicum.agent.runner import AgentEpisode
    from practicum.runtime.session import open_session

    if cfg.rollout.agent is None:
        raise ConfigError("config error at rollout.agent: the audit of an agent needs one")
    TempWatch.install()
    start = time.monotonic()
    entry = env_entry(cfg.task.name)
    spec = (
        entry.audit(parse_options(cfg.task.name, cfg.task.options))
        if entry.audit is not None
        else AuditSpec()
    )
    attacks = agent_attacks()
    if only:
        unmatched = [o for o in only if not any(o in a.name for a in attacks)]
        if unmatched:
            raise ConfigError(
                f"--attack {unmatched[0]!r} matches no agent attack (attacks: "
                f"{', '.join(a.name for a in attacks)})"
            )
        attacks = [a for a in attacks if any(o in a.name for o in only)]
    work = Path(tempfile.mkdtemp(prefix="practicum-audit-agent-"))
    outside = work / "outside"
    outside.mkdir()
    outside.chmod(0o777)  # permissions are not what must stop it
    programs = work / "programs"
    programs.mkdir()
    for folder in (work, programs):
        folder.chmod(0o755)  # the sandbox's uid reads the attack programs
    before_children = {pid for pid, _ in descendants()}
    run_cfg = cfg.model_copy(deep=True)
    run_cfg.run.out_dir, run_cfg.run.name, run_cfg.run.resume = str(work), "audit", False
    s = open_session(run_cfg)
    listener = _Listener()
    checks = _checks()
    picked = s.suite.train_tasks[:tasks]
    agent = cfg.rollout.agent
    results: list[AttackResult] = []

    def episode(agent_cfg, task, slot: int) -> Episode:
        builder = AgentEpisode(
            s.suite.make_env(s.models),
            task,
            f"audit/{task.task_id}",
            slot,
            s.agents,
            agent_cfg,
            slot,
            cfg.rollout.failure_reward,
            s.sampling().temperature,
        )
        return builder.run()

    try:
        secrets = [s.run_dir, s.run_dir / "episodes.jsonl", *_hidden(s, picked)]
        ref = AttackResult("honest reference", "reference")
        for i, task in enumerate(picked):
            e = episode(agent, task, i)
            ref.rewards.append(e.reward)
            if e.failure:
                ref.crashes.append(f"{task.task_id}: {e.failure}"[:300])
        results.append(ref)
        for k, attack in enumerate(attacks):
            program = programs / f"attack{k}.py"  # its folder may be shown: nothing else there
            program.write_text(PRELUDE + attack.program)
            program.chmod(0o644)
            env = {
                **agent.env,
                "AUDIT_PORT": str(listener.port),
                "AUDIT_HOSTS": ",".join(_Listener.hosts()),
                "AUDIT_OUTSIDE": f"{outside},{tempfile.gettempdir()}",
                "AUDIT_SECRETS": ",".join(map(str, secrets)),
            }
            attack_cfg = agent.model_copy(
                update={
                    "command": ["python", str(program)],
                    "task_input": "file",
                    "env": env,
                    "time_limit_s": min(agent.time_limit_s, ATTACK_SECONDS),
                    "mounts": [],
                }
            )
            results.append(
                _run_attack(
                    attack,
                    attack_cfg,
                    picked,
                    episode,
                    s,
                    listener,
                    outside,
                    checks.get(attack.name),
                    spec.floor,
                    work,
                    before_children,
                )
            )
    finally:
        listener.close()
        s.close()
        shutil.rmtree(work, ignore_errors=True)
    return AuditReport(
        f"{cfg.task.name} agent",
        [t.task_id for t in picked],
        spec.floor,
        ref.mean,
        results,
        time.monotonic() - start,
    )


def _hidden(s, tasks) -> list[Path]:
    """The paths the environment hides from an agent on these tasks (answers, task sources)."""
    found: list[Path] = []
    for task in tasks:
        with s.suite.make_env(s.models) as env:
            found += env.agent_task(task, 0).hidden
    return list(dict.fromkeys(found))


def _run_attack(
    attack: AgentAttack,
    attack_cfg,
    tasks,
    episode,
    s,
    listener: _Listener,
    outside: Path,
    check,
    floor: float,
    work: Path,
    before_children: set[int],
) -> AttackResult:
    result = AttackResult(attack.name, "floor", bound=floor)
    temp_before = set(TempWatch.remaining())
    t0 = time.monotonic()
    for i, task in enumerate(tasks):
        hits, unauthorized = listener.hits, s.agents.unauthorized
        decoy, holder = None, {}
        if attack.decoy:
            program = work / "programs" / "decoy.py"
            program.write_text(PRELUDE + SLEEPS)
            decoy_cfg = attack_cfg.model_copy(update={"command": ["python", str(program)]})
            decoy = threading.Thread(
                target=lambda h=holder, c=decoy_cfg, t=task, seed=1000 + i: h.update(
                    e=episode(c, t, seed)
                )
            )
            decoy.start()
            time.sleep(2.0)  # the decoy's agent is up, its key in its environment
        e = episode(attack_cfg, task, 100 + i)
        if decoy is not None:
            decoy.join()
        result.rewards.append(e.reward)
        if attack.expect is not None and (not e.failure or attack.expect not in e.failure):
            result.unmet.append(
                f"{task.task_id}: expected a failure with {attack.expect!r}, got {e.failure!r}"
            )
        probe = AgentProbe(
            e,
            holder.get("e"),
            s.agents.unauthorized - unauthorized,
            listener.hits - hits,
            [outside, Path(tempfile.gettempdir())],
        )
        if check is not None:
            result.leftovers += check(probe)
    result.seconds = time.monotonic() - t0
    left = [p for p in TempWatch.remaining() if p not in temp_before]
    if left:
        gc.collect()
        left = [p for p in TempWatch.remaining() if p not in temp_before]
    result.leftovers += [f"left {p}" for p in left if not Path(p).is_relative_to(work)]
    result.leftovers += [
        f"process {pid} ({name}) still running"
        for pid, name in lingering_children(ignore=before_children)
    ]
    return result
