"""The tool-call grammar of SWE turns (llguidance Lark syntax, set on `Start`/`StepResult`).

A reply is exactly one tool call of `tools.py`'s protocol, with every free-text part bounded:
paths and pytest node ids, search strings and shell commands by characters (one line each),
the edit's old and new blocks by tokens. Without the caps a small model's sampled path or
search string can run on until the turn's token budget is gone, and the call never closes.
The engine that honours `grammar` masks the sampler with it (issue 23); without one, the same
replies are parsed by `tools.parse_action` as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from practicum.envs.swe.tools import TOOL_CLASSES
from practicum.tools import call_grammar


@dataclass(frozen=True)
class GrammarCaps:
    path_chars: int = 80
    """A path, or a pytest node id's file and test parts, each at most this long."""
    search_chars: int = 60
    command_chars: int = 200
    edit_tokens: int = 80
    """Tokens of each of an edit's <old> and <new> blocks."""
    path_tokens: int = 24
    """Tokens of a path (with search and command below: character caps bound the text, token
    caps the turn: tags, a path and two edit blocks stay under 200 tokens)."""
    search_tokens: int = 24
    command_tokens: int = 64


def tool_grammar(caps: GrammarCaps = GrammarCaps()) -> str:
    """One tool call: <bash>, <view> (path or node id, optional line range), <search>, <edit>
    (path, old block, new block) or <submit></submit>: each tool's own rule (`tools.py`), then
    the capped parts they share."""
    p, s, c, e = caps.path_chars, caps.search_chars, caps.command_chars, caps.edit_tokens
    return call_grammar(
        TOOL_CLASSES,
        *[
            f"path[max_tokens={caps.path_tokens}]: PATH",
            f"search_text[max_tokens={caps.search_tokens}]: SEARCH",
            f"command[max_tokens={caps.command_tokens}]: COMMAND",
            # a block ends at its closing tag, which the stop string consumes into the reply
            f'old[stop="\\n</old>", max_tokens={e}]: /(.|\\n)+/',
            f'new[stop="\\n</new>", max_tokens={e}]: /(.|\\n)*/',
            f"PATH: /[A-Za-z0-9_.\\/\\-]{{1,{p}}}(::[A-Za-z0-9_.\\[\\]\\-]{{1,{p}}})?/",
            "RANGE: / [0-9]{1,5}(-[0-9]{1,5})?/",
            f"SEARCH: /[^\\n<]{{1,{s}}}/",
            f"COMMAND: /[^\\n<]{{1,{c}}}/",
        ],
    )
