"""The official OpenAI Python client's audio transcriptions and
translations against rolter's /v1/audio endpoints (multipart/form-data).

Usage: audio_client.py BASE_URL API_KEY MODEL
Exits non-zero (with the reason) when anything is off.
"""

import hashlib
import sys

import openai
from openai import OpenAI


def main() -> None:
    base_url, api_key, model = sys.argv[1:4]
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)

    # A second of 16 kHz 16-bit "audio" whose every byte value occurs, CRLFs
    # and dashes included, so a reader that trips on them shows.
    audio = bytes(range(256)) * 125
    digest = hashlib.sha256(audio).hexdigest()[:16]

    heard = client.audio.transcriptions.create(
        model=model, file=("clip.wav", audio, "audio/wav"), language="de"
    )
    expected = f"heard {len(audio)} bytes of audio {digest} in de"
    assert heard.text == expected, (heard.text, expected)

    translated = client.audio.translations.create(model=model, file=("clip.wav", audio, "audio/wav"))
    assert translated.text.startswith(f"heard {len(audio)} bytes of audio {digest}"), translated

    # The gateway's own refusal of an unknown model, in OpenAI's shape.
    try:
        client.audio.transcriptions.create(model="nope", file=("clip.wav", audio, "audio/wav"))
    except openai.NotFoundError as error:
        assert error.body["code"] == "model_not_found", error.body
    else:
        raise AssertionError("an unknown model was transcribed")
    print("ok: transcription and translation")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as failure:
        print(f"failed: {failure}")
        sys.exit(1)
