"""A scripted fake of the Anthropic Messages API for driving the real ``claude`` CLI offline.

Tests need the real Claude Code CLI (its session files, ``--resume``, stream-json output,
exit codes) without a network or a model. The CLI honours ``ANTHROPIC_BASE_URL``, so this
module serves ``POST /v1/messages`` on 127.0.0.1 with a deterministic script:

* a main request (it carries ``tools``) whose newest user message is a prompt gets one
  ``tool_use`` of ``Bash`` (``echo tool-ran``), so every turn exercises a real tool call;
* a main request whose newest user message holds a ``tool_result`` gets the final text
  ``Echo: <prompt>``: the prompt is the newest user text (``<system-reminder>`` blocks the
  CLI injects are skipped, as are gateway-bot's ``[...]`` header lines);
* a prompt containing ``WRITE_FILE name=<fname> text=<text>`` gets a ``Write`` tool call
  instead, so a test can check a file the agent wrote. ``Write`` wants an absolute path;
  the CLI states its cwd in the system prompt (``" - Primary working directory: /x"`` in
  its "# Environment" section, seen in 2.1.x), so the file goes to ``<cwd>/<fname>``. If a
  caller replaced the system prompt and that line is gone, the fake falls back to a ``Bash``
  ``printf`` into the relative name, which lands in the same place because Bash runs in cwd;
* a prompt containing ``RUN_BASH <command>`` (to the end of that line) gets a ``Bash``
  tool call running exactly that command, so a test can make the agent do what an
  attacker's agent would (start strays, fill the disk); ``RUN_BASH timeout=<ms> <command>``
  also declares the call's own time limit, as the model may;
* a prompt containing ``ASK_QUESTION <question>? <option>|<option>...`` gets an
  ``AskUserQuestion`` tool call with those options; a prompt containing ``SHOW_RESULT`` (or
  that question) gets a final text that also quotes the tool's result
  (``Echo: <prompt> [tool result: <text>]``), so a test sees what the agent was told (a
  refusal's reason, the chosen answer);
* requests without ``tools`` are the CLI's side requests (titles, topics, other models):
  they get ``ok`` at once (JSON with ``"ok"`` values when ``output_config.format`` asks
  for a schema, as the title request does) and go to ``side_requests``, not ``requests``;
  so does the CLI's auto-compaction request, which gets a summary listing the prompts.

``fail_next``, ``hold`` and ``stall`` apply to main requests only. Usage is about 4 body bytes per
input token (~19k tokens for the CLI's ~76 KB first request: about $0.1 at Opus prices),
so ``result.total_cost_usd`` is non-zero and plausible.

The server runs in its own thread with its own event loop so that sync tests and async
tests (whose loop must not be blocked by the server, nor own it) can share one fixture.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import shlex
import socket
import threading
from typing import Any

from aiohttp import web

JSON = dict[str, Any]
_REMINDER = "<system-reminder>"
_CWD_RE = re.compile(r"^ - Primary working directory: (.+)$", re.MULTILINE)
_HEADER_RE = re.compile(r"^\[.*\]$")
_WRITE_RE = re.compile(r"WRITE_FILE name=(\S+) text=(.*)", re.DOTALL)
_BASH_RE = re.compile(r"RUN_BASH (?:timeout=(\d+) )?(.+)")
_QUESTION_RE = re.compile(r"ASK_QUESTION (.+\?) (\S+)")
# Auto-compaction (after a 400 "prompt is too long") is a tools-carrying request whose
# newest user text orders a summary: it is the CLI's business, so it is a side request.
_COMPACT = "create a detailed summary of the conversation"
_CREDENTIALS = ("x-api-key", "authorization")


def _blocks(message: JSON) -> list[JSON]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _prompt_of(message: JSON) -> str:
    """The user's own words in one message: text blocks minus CLI-injected reminders."""
    texts = [b.get("text", "") for b in _blocks(message) if b.get("type") == "text"]
    return "\n".join(t for t in texts if not t.lstrip().startswith(_REMINDER)).strip()


def _has_tool_result(message: JSON) -> bool:
    return any(b.get("type") == "tool_result" for b in _blocks(message))


def _tool_result_text(message: JSON) -> str:
    parts = []
    for block in _blocks(message):
        if block.get("type") != "tool_result":
            continue
        content = block.get("content")
        if isinstance(content, list):
            content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        parts.append(" ".join(str(content).split()))
    return " ".join(parts)


def _user_messages(body: JSON) -> list[JSON]:
    # The CLI also puts ``role: "system"`` entries into ``messages``: ignore those.
    return [m for m in body.get("messages", []) if m.get("role") == "user"]


def _last_prompt(body: JSON) -> str:
    # Text beside a tool_result counts too: that is where the CLI puts its compaction order.
    for message in reversed(_user_messages(body)):
        if prompt := _prompt_of(message):
            return prompt
    return ""


def _words(prompt: str) -> str:
    """The user's words: the prompt without gateway-bot's bracketed header lines, so a test
    can match ``Echo: <what the user typed>`` on one line."""
    kept = [line for line in prompt.splitlines() if not _HEADER_RE.match(line)]
    return "\n".join(kept).strip()


def _system_text(body: JSON) -> str:
    system = body.get("system", "")
    if isinstance(system, str):
        return system
    return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))


class FakeAnthropic:
    """The fake server. ``start()``/``stop()`` it, point the CLI at ``base_url``."""

    def __init__(self) -> None:
        self.requests: list[JSON] = []
        self.side_requests: list[JSON] = []
        self.credentials_seen: list[tuple[str, dict[str, str]]] = []
        """(path, credential headers) of every request, any path: what reached the API."""
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._hold: str | None = None
        self._released = threading.Event()
        self._held = threading.Event()
        self._fail: tuple[int, str] | None = None
        self._stall: str | None = None
        self._port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # ----- control surface used by tests -------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @staticmethod
    def user_texts(request: JSON) -> list[str]:
        """Every prompt text of ``role: user`` messages, oldest first (no tool results,
        no ``<system-reminder>`` blocks the CLI adds), to check what a resumed run sent."""
        out: list[str] = []
        for message in _user_messages(request):
            for block in _blocks(message):
                text = str(block.get("text", ""))
                if block.get("type") == "text" and not text.lstrip().startswith(_REMINDER):
                    out.append(text)
        return out

    def asked_about(self, text: str) -> list[JSON]:
        """The requests whose body mentions ``text``. The server serves a whole worker's
        tests: a test asserting that Claude Code was NOT asked looks for its own words, not
        for no request at all (an earlier test's straggling CLI may still call it; CI saw one)."""
        return [body for body in list(self.requests) if text in json.dumps(body)]

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.side_requests.clear()
            self.credentials_seen.clear()
            self._hold, self._fail, self._stall = None, None, None
        self._released.set()
        self._held.clear()

    def hold(self, substring: str) -> None:
        """Park main requests whose current prompt contains ``substring`` until
        ``release()``: lets a test kill the daemon while the agent is mid-task."""
        with self._lock:
            self._hold = substring
        self._held.clear()
        self._released.clear()

    def stall(self, substring: str) -> None:
        """For prompts containing ``substring``: after the agent's first tool call, begin
        streaming the answer, then send nothing more (the connection stays open) until
        ``release()``. The model API stopping mid-turn, for stuck detection."""
        with self._lock:
            self._stall = substring
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def wait_for_held(self, timeout: float) -> bool:
        return self._held.wait(timeout)

    def fail_next(self, status: int, message: str) -> None:
        """Answer the next main request with an Anthropic-shaped HTTP error."""
        with self._lock:
            self._fail = (status, message)

    # ----- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._serve(sock))
            except BaseException as exc:  # surfaced to start()'s caller below
                errors.append(exc)
                self._loop.close()
                started.set()
                return
            started.set()
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name="fake-anthropic", daemon=True)
        self._thread.start()
        if not started.wait(10) or errors:
            self._loop = self._thread = None
            raise errors[0] if errors else TimeoutError("fake Anthropic API did not start")

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self._released.set()  # parked handlers finish instead of pinning shutdown
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = self._thread = self._runner = None

    def __enter__(self) -> FakeAnthropic:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, sock: socket.socket) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    # ----- request handling --------------------------------------------------------------
    def _note_credentials(self, request: web.Request) -> None:
        seen = {k.lower(): v for k, v in request.headers.items() if k.lower() in _CREDENTIALS}
        with self._lock:
            self.credentials_seen.append((request.path, seen))

    async def _not_found(self, request: web.Request) -> web.Response:
        self._note_credentials(request)
        return web.Response(status=404)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        self._note_credentials(request)
        body: JSON = await request.json()
        size = request.content_length or 4000
        prompt = _last_prompt(body)
        if not body.get("tools") or _COMPACT in prompt:
            with self._lock:
                self.side_requests.append(body)
            text = "ok"
            schema = (body.get("output_config") or {}).get("format", {}).get("schema")
            if isinstance(schema, dict):  # the title request asks for {"title": ...} JSON
                text = json.dumps({key: "ok" for key in schema.get("required", [])})
            elif body.get("tools"):  # keep the user's prompts in the summary that replaces them
                prompts = "\n".join(self.user_texts(body)[:-1])
                text = f"<analysis>fake</analysis>\n<summary>User prompts:\n{prompts}</summary>"
            return await self._reply(request, body, [{"type": "text", "text": text}], size)
        with self._lock:
            self.requests.append(body)
            fail, self._fail = self._fail, None
            hold, stall = self._hold, self._stall
        users = _user_messages(body)
        if stall is not None and stall in prompt and users and _has_tool_result(users[-1]):
            return await self._stall_stream(request, body)
        if hold is not None and hold in prompt and not self._released.is_set():
            self._held.set()
            while not self._released.is_set():  # polling keeps the loop free for others
                if request.transport is None or request.transport.is_closing():
                    break
                await asyncio.sleep(0.02)
        if fail is not None:
            error = {"type": "error", "error": {"type": _error_type(fail[0]), "message": fail[1]}}
            return web.json_response(error, status=fail[0])
        try:
            return await self._reply(request, body, self._script(body, prompt), size)
        except ConnectionResetError:  # the CLI was killed while its request was held
            return web.Response(status=499)

    async def _stall_stream(self, request: web.Request, body: JSON) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        message = {
            "id": f"msg_fake_{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-fake"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
        for event, data in (
            ("message_start", {"type": "message_start", "message": message}),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "Let me"},
                },
            ),
        ):
            await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        while not self._released.is_set():
            if request.transport is None or request.transport.is_closing():
                break
            await asyncio.sleep(0.05)
        return response

    def _script(self, body: JSON, prompt: str) -> list[JSON]:
        users = _user_messages(body)
        if users and _has_tool_result(users[-1]):
            text = f"Echo: {_words(prompt)}"
            if "SHOW_RESULT" in prompt or _QUESTION_RE.search(prompt):
                text += f" [tool result: {_tool_result_text(users[-1])}]"
            return [{"type": "text", "text": text}]
        tool_id = f"toolu_fake_{next(self._ids):06d}"
        if question := _QUESTION_RE.search(prompt):
            options = [{"label": o, "description": f"Use {o}"} for o in question[2].split("|")]
            asked = {"question": question[1], "header": "Choice", "options": options}
            tool_input = {"questions": [{**asked, "multiSelect": False}]}
            return [
                {"type": "tool_use", "id": tool_id, "name": "AskUserQuestion", "input": tool_input}
            ]
        match = _WRITE_RE.search(prompt)
        cwd = _CWD_RE.search(_system_text(body))
        if match and cwd:
            path = f"{cwd.group(1).strip().rstrip('/')}/{match.group(1)}"
            if match.group(1).startswith("/"):
                path = match.group(1)
            tool_input: JSON = {"file_path": path, "content": match.group(2)}
            return [{"type": "tool_use", "id": tool_id, "name": "Write", "input": tool_input}]
        command, timeout_ms = "echo tool-ran", None
        if bash := _BASH_RE.search(prompt):
            timeout_ms, command = bash.group(1), bash.group(2)
        elif match:  # no cwd in the system prompt: Bash runs in cwd, so a relative path works
            command = f"printf %s {shlex.quote(match.group(2))} > {shlex.quote(match.group(1))}"
        tool_input = {"command": command, "description": "Say hello"}
        if timeout_ms is not None:
            tool_input["timeout"] = int(timeout_ms)
        return [{"type": "tool_use", "id": tool_id, "name": "Bash", "input": tool_input}]

    async def _reply(
        self, request: web.Request, body: JSON, content: list[JSON], size: int
    ) -> web.StreamResponse:
        stop_reason = "tool_use" if content[-1]["type"] == "tool_use" else "end_turn"
        # Roughly 4 bytes a token, so the CLI's result carries a plausible cost.
        usage = {
            "input_tokens": max(1, size // 4),
            "output_tokens": 5 + len(json.dumps(content)) // 4,
        }
        message = {
            "id": f"msg_fake_{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-fake"),
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return web.json_response(message)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(event: str, data: JSON) -> None:
            await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())

        start_usage = dict(usage, output_tokens=1)
        start = dict(message, content=[], stop_reason=None, usage=start_usage)
        await send("message_start", {"type": "message_start", "message": start})
        for index, block in enumerate(content):
            if block["type"] == "text":
                empty: JSON = {"type": "text", "text": ""}
                delta: JSON = {"type": "text_delta", "text": block["text"]}
            else:
                empty = dict(block, input={})
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            await send(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": empty},
            )
            await send(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
            await send("content_block_stop", {"type": "content_block_stop", "index": index})
        await send(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
        await send("message_stop", {"type": "message_stop"})
        await response.write_eof()
        return response


def _error_type(status: int) -> str:
    return {
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error" if status >= 500 else "invalid_request_error")
