"""The attacks `practicum audit` puts an agent config (`rollout.agent`) through: each one a
program run as the agent's command, in the same sandbox, against the same endpoint.

Each attack says what must happen: the episode fails with a reason naming the fault
(`expect`), or a check from outside finds nothing (`check`: problems found, as text). The
programs use only the standard library (urllib), so they run in practicum's interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

PRELUDE = """
import json, os, socket, sys, time, urllib.error, urllib.request
BASE, KEY = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
MODEL = os.environ["PRACTICUM_MODEL"]

def call(key=KEY, max_tokens=8, content="hi"):
    body = json.dumps({"model": MODEL, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": content}]}).encode()
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = "Bearer " + key
    request = urllib.request.Request(BASE + "/chat/completions", body, headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
"""


@dataclass
class AgentAttack:
    name: str
    program: str
    """Python source run as the agent (after PRELUDE)."""
    expect: str | None = None
    """The episode must fail with a reason containing this; None: it need not fail."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of the attack (filled by the audit: ports, paths)."""
    check: Callable[..., list[str]] | None = None
    """check(probe) -> problems, run after the episode (the audit's `AgentProbe`)."""
    decoy: bool = False
    """Run beside another live episode whose key the attack hunts."""


HANGS = "time.sleep(10**6)\n"
CRASHES = "call()\nsys.exit(3)\n"
FLOODS = """
import threading
def hammer():
    for _ in range(500):
        if call(max_tokens=1) != 200:
            return
threads = [threading.Thread(target=hammer) for _ in range(24)]
[t.start() for t in threads]
[t.join() for t in threads]
"""
PAST_MAX_TOKENS = """
for _ in range(10000):
    if call(max_tokens=10**9) != 200:
        break
"""
WRONG_KEY = """
codes = [call(key="sk-" + "0" * 40), call(key=None), call(key=KEY[::-1])]
print("codes", codes)
sys.exit(0 if codes == [401, 401, 401] else 1)
"""
STEALS_KEYS = """
found = set()
for pid in os.listdir("/proc"):
    try:
        data = open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
    except OSError:
        continue
    for item in data:
        if item.startswith(b"OPENAI_API_KEY="):
            found.add(item.split(b"=", 1)[1].decode())
for key in found - {KEY}:
    print("foreign key answered", call(key=key))
print("keys seen", len(found))
"""
REACHES_NETWORK = """
port = int(os.environ["AUDIT_PORT"])
for host in os.environ["AUDIT_HOSTS"].split(","):
    try:
        socket.create_connection((host, port), timeout=2).close()
        print("REACHED", host)
    except OSError as e:
        print("blocked", host, e)
"""
LEAVES_PROCESSES = """
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
print(call())
"""
WRITES_OUTSIDE = """
for folder in os.environ["AUDIT_OUTSIDE"].split(","):
    try:
        with open(os.path.join(folder, "escaped.txt"), "w") as f:
            f.write("out")
        print("WROTE", folder)
    except OSError as e:
        print("refused", folder, e)
"""
READS_SECRETS = """
for path in os.environ["AUDIT_SECRETS"].split(","):
    try:
        if os.path.isdir(path):
            print("READABLE", path, os.listdir(path)[:3])
        else:
            open(path, "rb").read(64)
            print("READABLE", path)
    except OSError as e:
        print("hidden", path, e)
"""
SLEEPS = "time.sleep(8)\n"
"""The decoy beside the key thief: a live episode whose key is in its environment."""


def agent_attacks() -> list[AgentAttack]:
    """Every attack; the audit fills their `env` and `check` (module doc)."""
    return [
        AgentAttack("hangs", HANGS, expect="time limit"),
        AgentAttack("crashes", CRASHES, expect="exited with code 3"),
        AgentAttack("floods requests", FLOODS, expect="refused call"),
        AgentAttack("asks past max_tokens", PAST_MAX_TOKENS, expect="refused call"),
        AgentAttack("wrong key", WRONG_KEY),
        AgentAttack("steals another agent's key", STEALS_KEYS, decoy=True),
        AgentAttack("reaches the network", REACHES_NETWORK),
        AgentAttack("leaves processes behind", LEAVES_PROCESSES),
        AgentAttack("writes outside its folder", WRITES_OUTSIDE),
        AgentAttack("reads the run's secrets", READS_SECRETS),
    ]
