"""A scripted fake of the OpenAI Responses API (``POST /v1/responses``, SSE) for driving the
real ``codex`` CLI offline.

What Codex CLI 0.169 sends, captured: ``POST <base_url>/responses`` with ``stream: true``,
``store: false`` (so every request carries the whole history in ``input``, nothing is
looked up by id), ``Authorization: Bearer <key>``, tools as ``function`` entries
(``exec_command`` with ``{"cmd": ...}`` when code mode is off) and ``input`` items:
``message`` (roles developer/user/assistant, ``input_text`` / ``output_text`` parts; the
first user message is an ``<environment_context>`` block), ``function_call``,
``function_call_output``, ``reasoning``. Script, as ``tests/support/fake_anthropic.py``:

* a request whose newest input item is a user prompt gets one ``function_call`` of
  ``exec_command`` (``echo tool-ran``, or the command after ``RUN_BASH``);
* a request whose newest item is a ``function_call_output`` gets the assistant message
  ``Echo: <prompt>`` (gateway-bot's bracketed header lines left out).

Events: ``response.created``, ``response.output_item.added`` / ``.done`` per item,
``response.completed`` with ``usage``.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from typing import Any

from aiohttp import web

from tests.support.loopback_server import LoopbackServer

JSON = dict[str, Any]
_CONTEXT = "<environment_context>"
_HEADER_RE = re.compile(r"^\[.*\]$")
_BASH_RE = re.compile(r"RUN_BASH (.+)")


def _text_of(item: JSON) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))


def _words(prompt: str) -> str:
    kept = [line for line in prompt.splitlines() if not _HEADER_RE.match(line)]
    return "\n".join(kept).strip()


class FakeOpenAI(LoopbackServer):
    name = "fake-openai"

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[JSON] = []
        self.credentials_seen: list[tuple[str, str | None]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    @staticmethod
    def user_texts(request: JSON) -> list[str]:
        """The user's prompts in ``input``, oldest first (no environment context)."""
        return [
            text
            for item in request.get("input", [])
            if item.get("type") == "message" and item.get("role") == "user"
            if (text := _text_of(item).strip()) and not text.startswith(_CONTEXT)
        ]

    @staticmethod
    def assistant_texts(request: JSON) -> list[str]:
        return [
            _text_of(item)
            for item in request.get("input", [])
            if item.get("type") == "message" and item.get("role") == "assistant"
        ]

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.credentials_seen.clear()

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_route("*", "/{tail:.*}", self._not_found)

    async def _not_found(self, request: web.Request) -> web.Response:
        with self._lock:
            self.credentials_seen.append((request.path, request.headers.get("authorization")))
        return web.json_response({"error": {"message": "not found"}}, status=404)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body: JSON = await request.json()
        with self._lock:
            self.requests.append(body)
            self.credentials_seen.append((request.path, request.headers.get("authorization")))
        items = [i for i in body.get("input", []) if isinstance(i, dict)]
        prompts = self.user_texts(body)
        prompt = prompts[-1] if prompts else ""
        if items and items[-1].get("type") == "function_call_output":
            output: JSON = {
                "type": "message",
                "id": f"msg_fake_{next(self._ids):06d}",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": f"Echo: {_words(prompt)}", "annotations": []}
                ],
            }
        else:
            bash = _BASH_RE.search(prompt)
            command = bash.group(1) if bash else "echo tool-ran"
            output = {
                "type": "function_call",
                "id": f"fc_fake_{next(self._ids):06d}",
                "call_id": f"call_fake_{next(self._ids):06d}",
                "name": "exec_command",
                "arguments": json.dumps({"cmd": command}),
                "status": "completed",
            }
        response_id = f"resp_fake_{next(self._ids):06d}"
        size = len(json.dumps(body))
        usage = {
            "input_tokens": max(1, size // 4),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5 + len(json.dumps(output)) // 4,
            "output_tokens_details": {"reasoning_tokens": 0},
        }
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        base = {"id": response_id, "object": "response", "model": body.get("model", "fake")}
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)

        async def send(data: JSON) -> None:
            await stream.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())

        await send(
            {
                "type": "response.created",
                "response": {**base, "status": "in_progress", "output": []},
            }
        )
        await send({"type": "response.output_item.added", "output_index": 0, "item": output})
        await send({"type": "response.output_item.done", "output_index": 0, "item": output})
        await send(
            {
                "type": "response.completed",
                "response": {**base, "status": "completed", "output": [output], "usage": usage},
            }
        )
        await stream.write_eof()
        return stream
