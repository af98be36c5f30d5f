"""The official Anthropic Python client against rolter's /v1/messages, as a
user of an Anthropic-compatible engine (vLLM, SGLang) behind it would.

Usage: anthropic_client.py BASE_URL API_KEY MODEL
Exits non-zero (with the reason) when anything is off.
"""

import sys

import anthropic


def main() -> None:
    base_url, api_key, model = sys.argv[1:4]
    client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)

    plain = client.messages.create(
        model=model,
        max_tokens=5,
        system="Be brief.",
        messages=[{"role": "user", "content": "Say hello"}],
    )
    text = "".join(block.text for block in plain.content if block.type == "text")
    assert text == "tok0 tok1 tok2 tok3 tok4", plain
    assert plain.stop_reason == "max_tokens", plain
    assert plain.usage.output_tokens == 5, plain.usage

    pieces = []
    with client.messages.stream(
        model=model,
        max_tokens=6,
        messages=[{"role": "user", "content": "Count"}],
    ) as stream:
        for piece in stream.text_stream:
            pieces.append(piece)
        final = stream.get_final_message()
    streamed = "".join(pieces)
    assert len(pieces) == 6, pieces
    assert streamed == "tok0 tok1 tok2 tok3 tok4 tok5", streamed
    assert final.usage.output_tokens == 6, final.usage

    counted = client.messages.count_tokens(model=model, messages=[{"role": "user", "content": "Count"}])
    assert counted.input_tokens > 0, counted

    try:
        client.messages.create(model="no-such-model", max_tokens=1, messages=[{"role": "user", "content": "x"}])
    except anthropic.NotFoundError as error:
        assert error.body["type"] == "error", error.body
        assert error.body["error"]["type"] == "not_found_error", error.body
    else:
        raise AssertionError("unknown model was accepted")

    wrong = anthropic.Anthropic(base_url=base_url, api_key="sk-wrong", max_retries=0, timeout=30)
    try:
        wrong.messages.create(model=model, max_tokens=1, messages=[{"role": "user", "content": "x"}])
    except anthropic.AuthenticationError as error:
        assert error.body["error"]["type"] == "authentication_error", error.body
    else:
        raise AssertionError("a wrong key was accepted")

    print(f"ok: plain={text!r} streamed={streamed!r}")


if __name__ == "__main__":
    main()
