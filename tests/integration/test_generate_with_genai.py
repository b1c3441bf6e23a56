"""Generation through ADK's real `Gemini` model and the real google-genai client, against a local
HTTP stub of the Gemini `generateContent` endpoint (no network, no key of any value)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from google.adk.models.google_llm import Gemini
from google.genai import Client as GenaiClient

from adk_memory import Client

SCOPE = {"user_id": "u1"}


class _Stub:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        schema = json.dumps(body.get("generationConfig", {}))
        if '"actions"' not in schema:
            text = json.dumps(
                {
                    "memories": [
                        {"fact": "I drink green tea every morning.", "topics": ["USER_PREFERENCES"]}
                    ]
                }
            )
        else:
            text = json.dumps(
                {
                    "actions": [
                        {
                            "fact_index": 0,
                            "action": "CREATE",
                            "fact": "I drink green tea every morning.",
                        }
                    ]
                }
            )
        return {
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}
            ],
            "usageMetadata": {
                "promptTokenCount": 120,
                "candidatesTokenCount": 20,
                "totalTokenCount": 140,
            },
        }


@pytest.fixture
def stub() -> Iterator[tuple[str, _Stub]]:
    state = _Stub()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append((self.path, body))
            payload = json.dumps(state.answer(body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


def test_generate_sends_the_response_schema_and_applies_the_parsed_answer(
    stub: tuple[str, _Stub], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (
        "GOOGLE_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_CLOUD_PROJECT",
    ):
        monkeypatch.delenv(name, raising=False)
    url, state = stub
    genai = GenaiClient(api_key="test-key", http_options={"base_url": url})
    model = Gemini(model="gemini-2.5-flash", client=genai)
    with Client("memory://", embedding_model="hash-64", generation_model=model) as client:
        bank = client.memory_banks.create().name
        operation = client.memory_banks.memories.generate(
            name=bank,
            scope=SCOPE,
            direct_contents_source={
                "events": [
                    {
                        "content": {
                            "role": "user",
                            "parts": [{"text": "I drink green tea every morning."}],
                        }
                    }
                ]
            },
        )
        assert [(g.action.value, g.memory.fact) for g in operation.response.generated_memories] == [
            ("CREATED", "I drink green tea every morning.")
        ]
        assert operation.metadata["llmCalls"] == 2 and operation.metadata["promptTokens"] == 240
        [hit] = list(client.memory_banks.memories.retrieve(name=bank, scope=SCOPE))
        assert hit.memory.fact == "I drink green tea every morning."
    assert [path for path, _ in state.requests] == [
        "/v1beta/models/gemini-2.5-flash:generateContent"
    ] * 2
    extraction, consolidation = (body for _, body in state.requests)
    config = extraction["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    schema = json.dumps(config.get("responseSchema") or config.get("responseJsonSchema"))
    assert "memories" in schema and "forget" in schema
    assert "I drink green tea every morning." in json.dumps(extraction["contents"])
    assert "USER_PREFERENCES" in json.dumps(extraction["systemInstruction"])
    assert "actions" in json.dumps(consolidation["generationConfig"])
