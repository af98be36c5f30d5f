"""The official OpenAI Python client's Responses API against rolter's
/v1/responses, plain and streaming.

Usage: responses_client.py BASE_URL API_KEY MODEL
Exits non-zero (with the reason) when anything is off.
"""

import sys

import openai
from openai import OpenAI


def main() -> None:
    base_url, api_key, model = sys.argv[1:4]
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)

    plain = client.responses.create(
        model=model,
        instructions="Be brief.",
        input="Say hello",
        max_output_tokens=5,
    )
    assert plain.output_text == "tok0 tok1 tok2 tok3 tok4", plain
    assert plain.usage.output_tokens == 5, plain.usage

    # The stored response, and a continuation of it, reach the engine holding it.
    got = client.responses.retrieve(plain.id)
    assert got.id == plain.id and got.output_text == plain.output_text, got
    follow = client.responses.create(
        model=model, input="And then?", previous_response_id=plain.id, max_output_tokens=2
    )
    assert follow.output_text == "tok0 tok1", follow
    client.responses.delete(follow.id)
    try:
        client.responses.retrieve(follow.id)
    except openai.NotFoundError as error:
        assert error.body["code"] == "response_not_found", error.body
    else:
        raise AssertionError("a deleted response was still found")

    deltas = []
    done = None
    stream = client.responses.create(
        model=model,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Count"}]}],
        stream=True,
    )
    for event in stream:
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type in ("response.completed", "response.incomplete"):
            done = event.response
    streamed = "".join(deltas)
    assert done is not None, "no response.completed event"
    assert streamed == done.output_text, (streamed, done.output_text)
    assert len(deltas) >= 2, deltas

    try:
        client.responses.create(model="no-such-model", input="x")
    except openai.NotFoundError as error:
        assert error.status_code == 404
        assert error.body["type"] == "invalid_request_error", error.body
    else:
        raise AssertionError("unknown model was accepted")

    print(f"ok: plain={plain.output_text!r} streamed={streamed!r}")


if __name__ == "__main__":
    main()
