"""A minimal agent practicum can train, unmodified (copy it as your template).

It uses only what practicum gives it: OPENAI_BASE_URL and OPENAI_API_KEY (the plain `openai`
client reads both), PRACTICUM_MODEL (the policy's model id) and the task in the file
PRACTICUM_TASK_FILE names. It talks with the model for AGENT_TURNS turns and writes its final
answer to answer.txt in its working folder. Any program that does the same (any language, any
framework) trains the same way: see "Train your own agent" in the README.
"""

import os

from openai import OpenAI

client = OpenAI()  # base URL and key from the environment
model = os.environ.get("PRACTICUM_MODEL", "policy")
turns = int(os.environ.get("AGENT_TURNS", "1"))
max_tokens = int(os.environ.get("AGENT_MAX_TOKENS", "64"))
with open(os.environ["PRACTICUM_TASK_FILE"]) as f:
    task = f.read()

messages = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": task},
]
for turn in range(turns):
    reply = client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens)
    answer = reply.choices[0].message.content or ""
    messages.append({"role": "assistant", "content": answer})
    if turn + 1 < turns:
        messages.append({"role": "user", "content": "Check your answer, then give it again."})

with open("answer.txt", "w") as f:
    f.write(answer)
