import pytest

from practicum.envs.swe.synthesis.mutators import MUTATORS, candidates, functions, mutate

SRC = '''def clamp(x, lo, hi):
    """Clamp x."""
    if x < lo:
        return lo
    if x > hi and hi is not None:
        return hi
    total = x + 1
    for _ in range(2):
        total -= 1
    if total == x:
        y = 0
    else:
        y = 1
    return total + y


def simple(a):
    return a + 1
'''


def fn(name="clamp"):
    return next(f for f in functions(SRC) if f.name == name)


def test_functions_and_complexity():
    got = {f.name: f.complexity for f in functions(SRC)}
    # clamp: 1 + if, if, and, two comparisons(<, >) + is-not comparison + for + if + == = 10
    assert got == {"clamp": 10, "simple": 1}


def test_candidates_skip_simple_functions():
    cands = candidates(SRC, min_complexity=3)
    assert {f.name for f, _, _ in cands} == {"clamp"}
    kinds = {m for _, m, _ in cands}
    assert kinds == set(MUTATORS)


@pytest.mark.parametrize(
    "kind,site,old,new",
    [
        ("op_flip", 0, "if x < lo:", "if x >= lo:"),
        ("op_flip", 1, "if x > hi and", "if x <= hi and"),  # sites in post-order
        ("op_flip", 2, "hi is not None", "hi is None"),
        ("op_flip", 3, "and hi is", "or hi is"),
        ("op_swap", 0, "if x < lo:", "if lo < x:"),
        ("change_const", 0, "total = x + 1", "total = x + 0"),
        ("change_const", 1, "range(2)", "range(1)"),
        ("remove_assign", 0, "    total = x + 1\n", ""),
        ("remove_loop", 0, "    for _ in range(2):\n        total -= 1\n", ""),
        (
            "invert_if",
            0,
            "        y = 0\n    else:\n        y = 1",
            "        y = 1\n    else:\n        y = 0",
        ),
    ],
)
def test_one_site_rewritten(kind, site, old, new):
    out = mutate(SRC, fn(), kind, site)
    assert out == SRC.replace(old, new, 1)


def test_remove_cond_and_shuffle_and_no_change():
    out = mutate(SRC, fn(), "remove_cond", 0)
    assert "if x < lo" not in out and "if x > hi" in out
    shuffled = mutate(SRC, fn(), "shuffle", 0)
    assert shuffled != SRC and sorted(shuffled.splitlines()) == sorted(SRC.splitlines())
    assert mutate(SRC, fn(), "op_flip", 99) is None
    assert "return a + 1" in mutate(SRC, fn(), "op_flip", 0)  # other functions untouched
