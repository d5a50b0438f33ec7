"""What the agent is asked and what it may reply: prompts, reply parsing, templates.

Script mode: a plan and one ```python block (`parsing`); template mode: the reply fills one
region of a fixed script (`template`, default script in `sklearn_template`); prompts from
scratch (`prompts`) or improving an earlier solution (`self_improve`).
"""
