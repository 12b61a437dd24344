"""A scripted fake of the Gemini API (``generateContent``, ``streamGenerateContent`` SSE)
for driving the real ``gemini`` CLI offline.

The CLI honours ``GOOGLE_GEMINI_BASE_URL`` (http only on loopback) with
``security.auth.selectedType: gemini-api-key``. What Gemini CLI 0.61 sends, captured:
``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` for the main turn (it carries
``tools[].functionDeclarations``, ``systemInstruction``, and ``contents`` whose first user
entry is a ``<session_context>`` block), and plain ``:generateContent`` for side requests
(model routing, loop checks: JSON answers under a ``responseSchema``). The key comes in
``x-goog-api-key``. Script, as ``tests/support/fake_anthropic.py``:

* a main request whose newest user content is a prompt gets one ``functionCall`` of
  ``run_shell_command`` (``echo tool-ran``, or the command after ``RUN_BASH``);
* a main request whose newest user content holds a ``functionResponse`` gets the text
  ``Echo: <prompt>`` (gateway-bot's bracketed header lines left out);
* ``hold(substring)`` parks main requests for that prompt until ``release()``.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from typing import Any

from aiohttp import web

from tests.support.loopback_server import LoopbackServer

JSON = dict[str, Any]
_CONTEXT = "<session_context>"
_HEADER_RE = re.compile(r"^\[.*\]$")
_BASH_RE = re.compile(r"RUN_BASH (.+)")
_CREDENTIALS = ("x-goog-api-key", "authorization")


def _parts(content: JSON) -> list[JSON]:
    return [p for p in content.get("parts") or [] if isinstance(p, dict)]


def _user_contents(body: JSON) -> list[JSON]:
    return [c for c in body.get("contents", []) if c.get("role") == "user"]


def _prompt_of(content: JSON) -> str:
    texts = [str(p.get("text", "")) for p in _parts(content) if "text" in p]
    return "\n".join(t for t in texts if not t.lstrip().startswith(_CONTEXT)).strip()


def _words(prompt: str) -> str:
    kept = [line for line in prompt.splitlines() if not _HEADER_RE.match(line)]
    return "\n".join(kept).strip()


class FakeGemini(LoopbackServer):
    name = "fake-gemini"

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[JSON] = []
        """Main requests (streamGenerateContent), oldest first."""
        self.side_requests: list[JSON] = []
        self.credentials_seen: list[tuple[str, dict[str, str]]] = []
        self._lock = threading.Lock()
        self._hold: str | None = None
        self._released = threading.Event()
        self._released.set()

    @staticmethod
    def user_texts(request: JSON) -> list[str]:
        """Every prompt text of the user contents, oldest first (no session context, no
        function responses): what a resumed run sent of the history."""
        return [t for c in _user_contents(request) if (t := _prompt_of(c))]

    @staticmethod
    def model_texts(request: JSON) -> list[str]:
        """The model's earlier text answers the request carries."""
        return [
            str(p["text"])
            for c in request.get("contents", [])
            if c.get("role") == "model"
            for p in _parts(c)
            if p.get("text") and not p.get("thought")
        ]

    @staticmethod
    def tool_names(request: JSON) -> set[str]:
        """The function declarations the CLI offered the model."""
        return {
            str(declaration.get("name"))
            for tool in request.get("tools", [])
            for declaration in tool.get("functionDeclarations", [])
        }

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.side_requests.clear()
            self.credentials_seen.clear()
            self._hold = None
        self._released.set()

    def hold(self, substring: str) -> None:
        with self._lock:
            self._hold = substring
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def stop(self) -> None:
        self._released.set()
        super().stop()

    def routes(self, app: web.Application) -> None:
        app.router.add_post(r"/{version}/models/{call:[^/]+}", self._model_call)
        app.router.add_route("*", "/{tail:.*}", self._not_found)

    def _note_credentials(self, request: web.Request) -> None:
        seen = {k.lower(): v for k, v in request.headers.items() if k.lower() in _CREDENTIALS}
        with self._lock:
            self.credentials_seen.append((request.path, seen))

    async def _not_found(self, request: web.Request) -> web.Response:
        self._note_credentials(request)
        return web.json_response({"error": {"code": 404, "status": "NOT_FOUND"}}, status=404)

    async def _model_call(self, request: web.Request) -> web.StreamResponse:
        self._note_credentials(request)
        model, _, method = request.match_info["call"].partition(":")
        body: JSON = await request.json()
        if method == "countTokens":
            return web.json_response({"totalTokens": len(json.dumps(body)) // 4})
        if method != "streamGenerateContent":
            with self._lock:
                self.side_requests.append(body)
            return web.json_response(self._response(model, [{"text": _side_answer(body)}], body))
        with self._lock:
            self.requests.append(body)
            hold = self._hold
        users = _user_contents(body)
        prompt = next((p for c in reversed(users) if (p := _prompt_of(c))), "")
        if hold is not None and hold in prompt:
            while not self._released.is_set():  # polling keeps the loop free for others
                if request.transport is None or request.transport.is_closing():
                    return web.Response(status=499)
                await asyncio.sleep(0.02)
        if users and any("functionResponse" in p for p in _parts(users[-1])):
            parts: list[JSON] = [{"text": f"Echo: {_words(prompt)}"}]
        else:
            bash = _BASH_RE.search(prompt)
            command = bash.group(1) if bash else "echo tool-ran"
            call = {"name": "run_shell_command", "args": {"command": command}}
            parts = [{"functionCall": call}]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(
            f"data: {json.dumps(self._response(model, parts, body))}\r\n\r\n".encode()
        )
        await response.write_eof()
        return response

    @staticmethod
    def _response(model: str, parts: list[JSON], body: JSON) -> JSON:
        # Roughly 4 bytes a token, so the CLI's stats carry plausible counts.
        prompt_tokens = max(1, len(json.dumps(body)) // 4)
        output_tokens = 5 + len(json.dumps(parts)) // 4
        return {
            "candidates": [
                {
                    "content": {"role": "model", "parts": parts},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": prompt_tokens,
                "candidatesTokenCount": output_tokens,
                "totalTokenCount": prompt_tokens + output_tokens,
            },
            "modelVersion": model,
        }


def _side_answer(body: JSON) -> str:
    """A side request asking for JSON under a schema gets every required field filled."""
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if not isinstance(schema, dict):
        return "ok"
    answer: JSON = {}
    for key, spec in (schema.get("properties") or {}).items():
        kind = str((spec or {}).get("type", "string")).lower()
        if spec and spec.get("enum"):
            answer[key] = spec["enum"][0]
        elif kind in ("number", "integer"):
            answer[key] = 1
        elif kind == "boolean":
            answer[key] = False
        else:
            answer[key] = "ok"
    return json.dumps(answer)
