"""The roles' prompts (chat messages). Memory is rendered verbatim into planner and verifier
prompts (AgentFlow, arXiv 2510.05592); tool cards (name, description, input, limitations) are
shown to the planner and the executor."""

from __future__ import annotations

from practicum.envs.base import Message
from practicum.envs.flow.memory import Memory
from practicum.envs.flow.parsing import Plan
from practicum.envs.flow.tools import ToolMeta

PLANNER_SYSTEM = (
    "You plan the next step of solving a query with tools. Tools:\n{cards}\n"
    "Reply with exactly three lines:\n"
    "Context: <facts from memory this step needs>\n"
    "Sub-Goal: <one concrete thing to find or compute, with names and numbers>\n"
    "Tool Name: <one of {names}>"
)
PLANNER_EXAMPLES = [  # worked turns, as real chat turns (a 135M model copies formats from them)
    {
        "role": "user",
        "content": "Query: What is the region of the headquarters of Dal Labs?\n"
        "Actions so far: none.\nStep 1. Plan the next step.",
    },
    {
        "role": "assistant",
        "content": "Context: none\nSub-Goal: Find the headquarters of Dal Labs.\nTool Name: lookup",
    },
    {
        "role": "user",
        "content": "Query: What is the birthplace of the founder of Velor Works?\n"
        "Action Step 1:\n  Tool: lookup\n  Sub-Goal: Find the founder of Velor Works.\n"
        "  Command: Velor Works | founder\n  Result: The founder of Velor Works is Kamir Sa.\n"
        "Step 2. Plan the next step.",
    },
    {
        "role": "assistant",
        "content": "Context: The founder of Velor Works is Kamir Sa.\n"
        "Sub-Goal: Find the birthplace of Kamir Sa.\nTool Name: lookup",
    },
    {
        "role": "user",
        "content": "Query: Calculate 17 * 3 - 4.\nActions so far: none.\n"
        "Step 1. Plan the next step.",
    },
    {
        "role": "assistant",
        "content": "Context: none\nSub-Goal: Compute 17 * 3 - 4.\nTool Name: calculator",
    },
]


DOCUMENT_QUERY = "Query: Who founded the town where the Brisk Mill stands?\n"
DOCUMENT_EXAMPLES = [  # the worked turns over a user's documents (a lookup reads a title);
    *PLANNER_EXAMPLES[4:],  # the search turns last: a 135M planner copies the nearest one
    {
        "role": "user",
        "content": DOCUMENT_QUERY + "Actions so far: none.\nStep 1. Plan the next step.",
    },
    {
        "role": "assistant",
        "content": "Context: none\nSub-Goal: Look up Brisk Mill.\nTool Name: lookup",
    },
    {
        "role": "user",
        "content": DOCUMENT_QUERY + "Action Step 1:\n  Tool: lookup\n"
        "  Sub-Goal: Look up Brisk Mill.\n  Command: Brisk Mill\n  Result: Brisk Mill: The Brisk "
        "Mill is a water mill in the town of Dova, built in 1790.\nStep 2. Plan the next step.",
    },
    {
        "role": "assistant",
        "content": "Context: The Brisk Mill is a water mill in the town of "
        "Dova, built in 1790.\nSub-Goal: Look up Dova.\nTool Name: lookup",
    },
]


def planner_messages(
    memory: Memory,
    analysis: str,
    step: int,
    max_steps: int,
    tools: list[ToolMeta],
    documents: bool = False,
) -> list[Message]:
    """The planner's prompt; `documents`: the worked turns read a user's documents by title."""
    system = PLANNER_SYSTEM.format(
        cards="\n".join(t.card() for t in tools), names=", ".join(t.name for t in tools)
    )
    user = (
        f"{memory.render()}\nQuery analysis: {analysis or '(none)'}\n"
        f"Step {step} (at most {max_steps}). Plan the next step."
    )
    examples = DOCUMENT_EXAMPLES if documents else PLANNER_EXAMPLES
    return [{"role": "system", "content": system}, *examples, {"role": "user", "content": user}]


ANALYST_SYSTEM = (
    "You analyse a query before it is solved: say in two sentences what is asked "
    "and which tools ({names}) could help."
)


def analyst_messages(query: str, tools: list[ToolMeta]) -> list[Message]:
    return [
        {
            "role": "system",
            "content": ANALYST_SYSTEM.format(names=", ".join(t.name for t in tools)),
        },
        {"role": "user", "content": f"Query: {query}"},
    ]


EXECUTOR_SYSTEM = "You write the input of one tool call. Reply with one line: Command: <tool input>"
EXECUTOR_EXAMPLE = [
    {
        "role": "user",
        "content": "Sub-Goal: Find the founder of Velor Works.\n"
        "Tool: - lookup: returns one attribute of one named entity. Input: 'ENTITY | ATTRIBUTE'.",
    },
    {"role": "assistant", "content": "Command: Velor Works | founder"},
    {
        "role": "user",
        "content": "Sub-Goal: Compute 12 times 7 plus 5.\n"
        "Tool: - calculator: evaluates one arithmetic expression. Input: an expression.",
    },
    {"role": "assistant", "content": "Command: 12 * 7 + 5"},
]


def executor_messages(query: str, plan: Plan, tool: ToolMeta) -> list[Message]:
    user = (
        f"Query: {query}\nContext: {plan.context}\nSub-Goal: {plan.sub_goal}\nTool: {tool.card()}"
    )
    return [
        {"role": "system", "content": EXECUTOR_SYSTEM},
        *EXECUTOR_EXAMPLE,
        {"role": "user", "content": user},
    ]


VERIFIER_SYSTEM = (
    "You check whether the actions so far answer the query. Think in one "
    "sentence, then end with 'Conclusion: STOP' if the memory holds the answer, "
    "or 'Conclusion: CONTINUE' if more steps are needed."
)


def verifier_messages(memory: Memory, analysis: str) -> list[Message]:
    return [
        {"role": "system", "content": VERIFIER_SYSTEM},
        {"role": "user", "content": f"{memory.render()}\nQuery analysis: {analysis or '(none)'}"},
    ]


GENERATOR_SYSTEM = (
    "You write the final answer to the query from the memory of actions. "
    "Reply with one line: Answer: <the answer only, a name, number or "
    "expression>"
)


def generator_messages(memory: Memory) -> list[Message]:
    return [
        {"role": "system", "content": GENERATOR_SYSTEM},
        {"role": "user", "content": memory.render()},
    ]


JUDGE_SYSTEM = (
    "You judge whether an answer is equivalent to the ground truth. Reply with one word: YES or NO."
)


def judge_messages(query: str, answer: str, gold: str) -> list[Message]:
    return [
        {"role": "system", "content": JUDGE_SYSTEM},
        {"role": "user", "content": f"Question: {query}\nGround truth: {gold}\nAnswer: {answer}"},
    ]


PLANNER_STOPS = ["\n\n", "\nQuery:", "\nAction Step", "\nResult:"]
"""The planner's reply ends after its three fields; these catch a model running on. Not
`Command:`: a planner imitating the memory's step format writes one before its tool name, and
stopping there cut every such plan short of `Tool Name:` (malformed)."""
