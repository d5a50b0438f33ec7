"""Roles on model backends (a scripted client through the service interface), the rules roles,
and the optional judge."""

from practicum.engine.service import Completion
from practicum.envs.flow.memory import Memory, Step
from practicum.envs.flow.parsing import Plan
from practicum.envs.flow.roles import Roles, RoleSpecs, asked_relation, longest_expression
from practicum.envs.flow.tools import Calculator


class ScriptedService:
    """Stands in for ModelService: every role's client replies from a script, and the
    messages each call received are kept."""

    def __init__(self, replies: dict[str, str]):
        self.replies, self.calls = replies, []

    def client(self, spec):
        service = self

        class Client:
            def complete(self, messages, params=None):
                service.calls.append((spec, messages))
                system = messages[0]["content"]
                key = next(k for k in service.replies if k in system)
                return Completion(service.replies[key], [], "stop")

        return Client()


def test_model_roles_go_through_the_service_and_are_parsed():
    svc = ScriptedService(
        {
            "input of one tool call": "Sure.\nCommand: calculator: 6 * 7",
            "check whether": "It is done. Conclusion: STOP",
            "final answer": "The result.\nAnswer: 42",
        }
    )
    roles = Roles(
        svc,
        RoleSpecs(
            analyst="rules", executor="base", verifier="local:x", generator="openai:http://h|m"
        ),
        [],
    )
    plan = Plan("none", "multiply 6 by 7", "calculator")
    cmd, raw = roles.command("What is 6*7?", plan, Calculator.meta)
    assert cmd == "6 * 7" and "Command:" in raw
    mem = Memory("What is 6*7?", steps=[Step("calculator", "x", "6 * 7", "42", value="42")])
    assert roles.verdict(mem, "")[0] == "STOP"
    assert roles.answer(mem)[0] == "42"
    assert [spec for spec, _ in svc.calls] == ["base", "local:x", "openai:http://h|m"]
    assert "Result: 42" in svc.calls[1][1][-1]["content"]  # memory rendered for the verifier
    assert roles.analyse("q", []) == ""  # rules analyst: no analysis, no call
    assert len(svc.calls) == 3


def test_rules_roles():
    roles = Roles(None, RoleSpecs("rules", "rules", "rules", "rules"), ["Velor Works", "Kamir Sa"])
    assert (
        roles.rules_command(Plan("", "Find the founder of Velor Works.", "lookup"))
        == "Velor Works | founder"
    )
    assert roles.rules_command(Plan("", "Compute -61 + -43 please", "calculator")) == "-61 + -43"
    assert roles.rules_command(Plan("", "Compute 2 ^ 3", "python_coder")) == "print(2 ** 3)"
    assert longest_expression("no numbers here") == ""
    assert asked_relation("What is the birthplace of the founder of Velor Works?") == "birthplace"
    assert asked_relation("Calculate 2 + 3.") is None
    mem = Memory("What is the birthplace of the founder of Velor Works?")
    mem.add(Step("lookup", "", "", "The founder of Velor Works is Kamir Sa.", value="Kamir Sa"))
    assert roles.rules_verdict(mem) == "CONTINUE"  # an inner hop, not the asked relation
    mem.add(Step("lookup", "", "", "The birthplace of Kamir Sa is Mirven.", value="Mirven"))
    assert roles.rules_verdict(mem) == "STOP"
    mem.add(Step("search", "", "", "Error: no document matches", error=True))
    assert roles.rules_verdict(mem) == "CONTINUE"
    assert roles.answer(mem)[0] == "Mirven"  # the last successful value


def test_judge_is_asked_only_when_the_exact_check_fails():
    from practicum.envs.base import Task
    from practicum.envs.flow.corpus import build_world
    from practicum.envs.flow.env import FlowEnv
    from practicum.envs.sandbox import Limits

    svc = ScriptedService({"judge": "YES"})
    world = build_world(0)
    roles = Roles(svc, RoleSpecs("rules", "rules", "rules", "rules", judge="base"), world.titles)
    env = FlowEnv(roles, world, ["calculator"], Limits(wall_seconds=20), (1, 1))  # a loaded CPU
    task = Task(
        "t",
        {"family": "arithmetic", "split": "train", "question": "Calculate 2 + 3.", "answer": "5"},
    )
    env.reset(task)
    r = env.step("Context: none\nSub-Goal: Compute 2 + 3.\nTool Name: calculator")
    assert r.reward == 1.0 and r.info["flow"]["correct"] and not svc.calls
    env.reset(task)
    r = env.step("Context: none\nSub-Goal: Compute 2 + 4.\nTool Name: calculator")
    assert r.reward == 1.0 and not r.info["flow"]["correct"] and r.info["flow"]["judged"]
    assert len(svc.calls) == 1 and "Ground truth: 5" in svc.calls[0][1][-1]["content"]
    env.close()
