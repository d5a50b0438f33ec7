"""The offline tools: sandboxed code, BM25 search, lookup; errors are results, not crashes."""

import pytest

from practicum.envs.flow.corpus import build_world
from practicum.envs.flow.tools import Calculator, Lookup, PythonCoder, Search, find_relation
from practicum.envs.sandbox import Limits

LIMITS = Limits(wall_seconds=3, memory_mb=256, max_processes=8, output_bytes=2000)


@pytest.fixture(scope="module")
def world():
    return build_world(0)


def test_calculator_and_python_run_in_the_sandbox(tmp_path):
    calc, py = Calculator(tmp_path, LIMITS), PythonCoder(tmp_path, LIMITS)
    assert calc.run("(12 + 30) * 2").value == "84"
    assert calc.run("10 / 4").value == "2.5"
    assert calc.run("__import__('os')").error  # words are not arithmetic
    assert py.run("```python\nprint(sum(range(10)))\n```").value == "45"
    assert py.run("3 * 7").value == "21"  # a bare expression is printed
    err = py.run("raise ValueError('bad')")
    assert err.error and "ValueError: bad" in err.text
    slow = py.run("while True: pass")
    assert slow.error and "timed out" in slow.text


def test_python_cannot_reach_the_network_or_write_outside(tmp_path):
    py = PythonCoder(tmp_path, LIMITS)
    out = py.run(
        "import socket\ns = socket.socket()\ns.settimeout(1)\n"
        "s.connect(('1.1.1.1', 80))\nprint('connected')"
    )
    assert out.error
    assert py.run("open('/etc/flow_pwned', 'w').write('x')\nprint(1)").error


def test_search_finds_the_entity_document(world):
    s = Search(world)
    name = next(n for n, e in world.entities.items() if e.kind == "company")
    out = s.run(f"founder of {name}")
    assert not out.error and out.text.startswith(world.entities[name].document()[:40])
    assert s.run("").error


def test_lookup_reads_one_attribute(world):
    lk = Lookup(world)
    name, ent = next((n, e) for n, e in world.entities.items() if e.kind == "person")
    out = lk.run(f"{name} | birthplace")
    assert out.value == ent.facts["birthplace"]
    assert out.text == f"The birthplace of {name} is {ent.facts['birthplace']}."
    assert lk.run(f"Where was {name.lower()} born? birthplace").value == ent.facts["birthplace"]
    assert "has no founder" in lk.run(f"{name} | founder").text
    assert lk.run("Nobody Atall | founder").error
    assert lk.run(name).error  # no attribute named


def test_relation_nearest_before_the_entity():
    assert find_relation("the birthplace of the founder of Velor Works", "Velor Works") == "founder"
    assert find_relation("Velor Works founder") == "founder"
