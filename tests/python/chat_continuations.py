"""Plain `openai` SDK chat requests continuing a conversation turn by turn,
as a chat UI sends them: the whole history each time, text only, no token
ids. Prints the engine that served each turn (rolter's `x-rolter-target`
header), one per line.

Usage: chat_continuations.py BASE_URL MODEL CONVERSATION_JSON COUNT
"""

import json
import sys

from openai import OpenAI


def main() -> None:
    base_url, model, conversation, count = sys.argv[1:5]
    with open(conversation, encoding="utf-8") as f:
        messages = json.load(f)
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=30)
    for turn in range(int(count)):
        messages = messages + [
            {"role": "assistant", "content": f"Here is answer number {turn}."},
            {"role": "user", "content": f"Thanks. Follow-up question {turn}?"},
        ]
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=messages, max_tokens=2
        )
        completion = raw.parse()
        assert completion.choices[0].message.content, completion
        print(raw.headers.get("x-rolter-target", "-"), flush=True)


if __name__ == "__main__":
    main()
