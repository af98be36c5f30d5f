"""The official OpenAI Python client against rolter, as a new user would use it.

Usage: openai_client.py BASE_URL API_KEY MODEL
Exits non-zero (with the reason) when anything is off.
"""

import sys

from openai import OpenAI


def main() -> None:
    base_url, api_key, model = sys.argv[1:4]
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)

    models = [m.id for m in client.models.list()]
    assert model in models, f"{model} not in {models}"

    plain = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say hello"}],
        max_tokens=5,
    )
    text = plain.choices[0].message.content
    assert text, f"empty completion: {plain}"
    assert plain.usage.completion_tokens == 5, plain.usage

    pieces = []
    chunks = 0
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Count"}],
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = None
    for chunk in stream:
        chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
    streamed = "".join(pieces)
    assert chunks >= 7, f"only {chunks} chunks"
    assert len(streamed.split()) == 6, streamed
    assert usage is not None and usage.completion_tokens == 6, usage

    try:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    except Exception as error:  # the SDK raises NotFoundError with our OpenAI-style body
        assert getattr(error, "status_code", None) == 404, error
    else:
        raise AssertionError("unknown model was accepted")

    print(f"ok: plain={text!r} streamed={streamed!r} chunks={chunks}")


if __name__ == "__main__":
    main()
