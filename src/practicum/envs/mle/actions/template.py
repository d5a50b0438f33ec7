"""Template mode (for small models): the reply fills ONE marked region of a fixed, working script.

`Template` is the script, `fill_template` the reply's code put into its region,
`salvage_region` the leniency for replies `fill_template` rejects. The default script is
`sklearn_template.default_template`. `parse_reply` turns a reply of either mode into the
script to run.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

from practicum.envs.mle.actions.parsing import (
    ActionParseError,
    extract_code,
    parse_script_action,
    syntax_problem,
)
from practicum.pyast import parse as ast_parse

START_MARKER = "# === YOUR CODE START ==="
END_MARKER = "# === YOUR CODE END ==="


@dataclass(frozen=True)
class Template:
    """A complete, working script with one region the policy fills."""

    script: str
    """Full script text; the region is the lines strictly between the two marker lines."""
    instruction: str
    """What the region must do, told to the model (e.g. "assign a scikit-learn estimator to
    `model`")."""
    required_names: tuple[str, ...] = ("model",)
    """Names the region must assign; a reply that does not is rejected before running."""
    available: tuple[str, ...] = ()
    """Names already imported when the region runs (listed in the prompt)."""
    example: str = "model = RandomForestClassifier(n_estimators=200, random_state=0)"
    """A good region body, shown in the prompt as the reply format."""
    max_lines: int = 12
    """Most non-blank lines the region may have."""
    start_marker: str = START_MARKER
    end_marker: str = END_MARKER

    def __post_init__(self) -> None:
        lines = [line.strip() for line in self.script.splitlines()]
        for marker in (self.start_marker, self.end_marker):
            if lines.count(marker) != 1:
                raise ValueError(f"template script must contain the line {marker!r} exactly once")
        if lines.index(self.start_marker) > lines.index(self.end_marker):
            raise ValueError("template script: the start marker must come before the end marker")


def fill_template(template: Template, reply: str) -> str:
    """The template's script with its region replaced by the reply's code (re-indented)."""
    for marker in (template.start_marker, template.end_marker, "YOUR CODE START", "YOUR CODE END"):
        if marker in reply:
            raise ActionParseError(
                "do not include the marker lines; send only the code of the region"
            )
    code = extract_code(reply)
    n_lines = sum(1 for line in code.splitlines() if line.strip())
    if n_lines > template.max_lines:
        raise ActionParseError(
            f"the code has {n_lines} lines; at most {template.max_lines} allowed"
        )
    assigned = _assigned_names(ast_parse(code))
    missing = [name for name in template.required_names if name not in assigned]
    if missing:
        raise ActionParseError("the code must assign " + ", ".join(f"`{n}`" for n in missing))
    lines = template.script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == template.start_marker)
    end = next(i for i, line in enumerate(lines) if line.strip() == template.end_marker)
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    region = textwrap.indent(code, indent).splitlines()
    script = "\n".join(lines[: start + 1] + region + lines[end:]) + "\n"
    problem = syntax_problem(script)
    if problem:
        raise ActionParseError(f"the filled script does not parse: {problem}")
    return script


def _assigned_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


_ASSIGN_LINE = re.compile(r"\b([A-Za-z_]\w*)\s*=\s*[^\n`]*")


def salvage_region(reply: str, required: tuple[str, ...] = ("model",)) -> str | None:
    """Leniency for small models in template mode: the first single line of the reply that
    assigns the required name (e.g. `model = Ridge()`) and parses on its own, wherever it
    stands (after prose, inside inline backticks, in an unclosed block); None when none does.

    Used only after `fill_template` rejected the reply as a whole.
    """
    if len(required) != 1:
        return None
    for match in _ASSIGN_LINE.finditer(reply):
        if match.group(1) != required[0]:
            continue
        line = match.group(0).rstrip()
        if syntax_problem(line) is None:
            return line
    return None


def parse_reply(
    reply: str, template: Template | None, salvage: bool = True
) -> tuple[str, str, str]:
    """(script to run, what the policy wrote, plan) of a reply; raises ActionParseError.

    template None: script mode (a plan and one ```python block); else the reply fills the
    template's region, with `salvage_region` as a last resort when `salvage`.
    """
    if template is None:
        action = parse_script_action(reply)
        return action.code, action.code, action.plan
    try:
        return fill_template(template, reply), extract_code(reply), ""
    except ActionParseError as err:
        line = salvage_region(reply, template.required_names) if salvage else None
        if line is None:
            raise
        try:
            return fill_template(template, line), line, ""
        except ActionParseError:
            raise err from None
