"""Script-mode replies: a plan and exactly one ```python block; fences and their edge cases."""

import pytest

from practicum.envs.mle.actions.parsing import ActionParseError, code_blocks, parse_script_action

FENCE = "```"


def test_plan_then_one_python_block():
    reply = f"I fit a forest.\n{FENCE}python\nimport pandas as pd\nprint(1)\n{FENCE}\nDone."
    action = parse_script_action(reply)
    assert action.plan == "I fit a forest."
    assert action.code == "import pandas as pd\nprint(1)\n"


def test_untagged_block_accepted_when_it_parses():
    action = parse_script_action(f"plan\n{FENCE}\nx = 1\n{FENCE}")
    assert action.code == "x = 1\n" and action.plan == "plan"


def test_other_languages_are_ignored():
    reply = f"Install:\n{FENCE}bash\npip install x\n{FENCE}\nThen:\n{FENCE}python\nx = 2\n{FENCE}"
    assert parse_script_action(reply).code == "x = 2\n"


def test_untagged_output_example_next_to_python_block_is_ignored():
    reply = f"{FENCE}python\nprint(3)\n{FENCE}\nIt prints:\n{FENCE}\n3\n{FENCE}"
    assert parse_script_action(reply).code == "print(3)\n"


def test_no_block():
    with pytest.raises(ActionParseError, match="^no ```python code block found$"):
        parse_script_action("I would train a random forest.")


def test_two_blocks():
    reply = f"{FENCE}python\na = 1\n{FENCE}\nand\n{FENCE}python\nb = 2\n{FENCE}"
    with pytest.raises(ActionParseError, match="^2 code blocks found; send exactly one$"):
        parse_script_action(reply)


def test_syntax_error_names_the_line():
    reply = f"{FENCE}python\nimport os\nx = 1\ny = (\n{FENCE}"
    with pytest.raises(ActionParseError, match=r"^code does not parse: SyntaxError line 3: "):
        parse_script_action(reply)


def test_cut_off_block():
    with pytest.raises(ActionParseError, match="not closed"):
        parse_script_action(f"plan\n{FENCE}python\nimport pandas as pd\nx = 1\n")


def test_empty_block():
    with pytest.raises(ActionParseError, match="empty"):
        parse_script_action(f"plan\n{FENCE}python\n\n{FENCE}")


def test_crlf_indented_and_glued_fences():
    reply = f"plan\r\n  {FENCE}python\r\n  x = 1\r\n  print(x){FENCE}\r\n"
    assert parse_script_action(reply).code == "x = 1\nprint(x)\n"


def test_four_backtick_fence_may_contain_three():
    blocks = code_blocks(f"````python\ns = '''\n{FENCE}\n'''\n````")
    assert len(blocks) == 1 and blocks[0].closed and FENCE in blocks[0].code
