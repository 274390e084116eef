"""HTTP layer of the scripted OpenAI-compatible model server (Starlette + uvicorn).

Routes:

* ``GET  /v1/models`` (and ``/models``), ``GET /v1/models/{id}``
* ``POST /v1/chat/completions`` (and ``/chat/completions``): SSE when ``stream`` is true,
  one JSON document otherwise. The reply comes from :func:`scripted_model.scenarios.plan_reply`.
* ``GET /_health``, ``GET /_log``, ``DELETE /_log``: test helpers.
* Anything else (the local-server probes Hermes makes on a custom ``base_url``:
  ``GET /api/v1/models``, ``GET /api/tags``, ``GET /v1/props``, ``GET /props``, ``GET /version``,
  ``POST /api/show`` ...) gets an immediate JSON 404, and is logged too.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from scripted_model.scenarios import Reply, message_text, plan_reply

MODEL_IDS = ("scripted-model", "other-model")
CONTEXT_LENGTH = 131072
MAX_LOG_ENTRIES = 5000
# How often an orphan check (--exit-with-parent) looks at its parent pid.
PARENT_POLL_S = 0.5


@dataclass(frozen=True)
class ServerSettings:
    first_token_delay: float = 0.0
    chunk_delay: float = 0.02
    log_file: Path | None = None


class RequestLog:
    """In-memory list of request records (dicts that may still be updated while streaming)."""

    def __init__(self, log_file: Path | None = None) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=MAX_LOG_ENTRIES)
        self._lock = threading.Lock()
        self._log_file = log_file

    def add(self, entry: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._entries.append(entry)
        if self._log_file is not None:
            with self._log_file.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
        return entry

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(e) for e in self._entries]

    def clear(self) -> int:
        with self._lock:
            n = len(self._entries)
            self._entries.clear()
            return n


def _now() -> float:
    return time.time()


def _completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


def _usage(body: Mapping[str, Any], reply: Reply) -> dict[str, int]:
    prompt = max(1, len(json.dumps(body.get("messages", []), default=str)) // 4)
    completion = max(1, (len(reply.content) + len(reply.reasoning)) // 4)
    for call in reply.tool_calls:
        completion += len(call.arguments_json) // 4 + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _request_record(request: Request, body: Mapping[str, Any] | None) -> dict[str, Any]:
    record: dict[str, Any] = {
        "ts": _now(),
        "method": request.method,
        "path": request.url.path,
    }
    if body is None:
        return record
    messages = body.get("messages")
    msgs = [m for m in messages if isinstance(m, Mapping)] if isinstance(messages, list) else []
    tools = body.get("tools")
    tool_names = (
        [
            str(t.get("function", {}).get("name"))
            for t in tools
            if isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)
        ]
        if isinstance(tools, list)
        else []
    )
    last_user = next((m for m in reversed(msgs) if m.get("role") == "user"), None)
    last = msgs[-1] if msgs else None
    record.update(
        {
            "model": body.get("model"),
            "stream": bool(body.get("stream", False)),
            "stream_options": body.get("stream_options"),
            "reasoning_effort": body.get("reasoning_effort"),
            "reasoning": body.get("reasoning"),
            "extra_keys": sorted(
                k for k in body if k not in ("messages", "tools", "model", "stream")
            ),
            "max_tokens": body.get("max_tokens", body.get("max_completion_tokens")),
            "temperature": body.get("temperature"),
            "roles": [str(m.get("role")) for m in msgs],
            "message_count": len(msgs),
            "tools": tool_names,
            "last_user_text": message_text(last_user)[:300] if last_user else None,
            "last_tool_result": (
                message_text(last)[:300]
                if last is not None and last.get("role") == "tool"
                else None
            ),
        }
    )
    return record


def _chunk(
    cid: str,
    created: int,
    model: str,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    include_usage: bool = False,
) -> str:
    payload: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if include_usage:
        payload["usage"] = None
    return "data: " + json.dumps(payload, ensure_ascii=False) + "\n\n"


def _argument_pieces(arguments: str, pieces: int = 3) -> list[str]:
    size = max(1, -(-len(arguments) // pieces))
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]


async def _sse_events(
    body: Mapping[str, Any],
    reply: Reply,
    settings: ServerSettings,
    record: dict[str, Any],
) -> AsyncIterator[str]:
    cid = _completion_id()
    created = int(_now())
    model = str(body.get("model") or MODEL_IDS[0])
    stream_options = body.get("stream_options")
    include_usage = isinstance(stream_options, Mapping) and bool(
        stream_options.get("include_usage")
    )
    delay = settings.chunk_delay if reply.chunk_delay is None else reply.chunk_delay
    record["chunks_sent"] = 0
    record["completed"] = False

    def emit(delta: dict[str, Any], finish: str | None = None) -> str:
        record["chunks_sent"] += 1
        return _chunk(cid, created, model, delta, finish, include_usage)

    if settings.first_token_delay > 0:
        await asyncio.sleep(settings.first_token_delay)
    yield emit({"role": "assistant", "content": ""})
    for piece in reply.reasoning_chunks:
        await asyncio.sleep(delay)
        yield emit({"reasoning_content": piece})
    for piece in reply.content_chunks:
        await asyncio.sleep(delay)
        yield emit({"content": piece})
    for index, call in enumerate(reply.tool_calls):
        await asyncio.sleep(delay)
        yield emit(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        for piece in _argument_pieces(call.arguments_json):
            await asyncio.sleep(delay)
            yield emit({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield emit({}, reply.finish_reason)
    if include_usage:
        usage_chunk = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": None,
            "choices": [],
            "usage": _usage(body, reply),
        }
        yield "data: " + json.dumps(usage_chunk) + "\n\n"
    yield "data: [DONE]\n\n"
    record["completed"] = True


def _completion_json(body: Mapping[str, Any], reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for call in reply.tool_calls
        ]
    return {
        "id": _completion_id(),
        "object": "chat.completion",
        "created": int(_now()),
        "model": str(body.get("model") or MODEL_IDS[0]),
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": _usage(body, reply),
    }


def _model_object(model_id: str) -> dict[str, Any]:
    return {
        "id": model_id,
        "object": "model",
        "created": 1700000000,
        "owned_by": "scripted",
        "context_length": CONTEXT_LENGTH,
    }


def _not_found(path: str) -> JSONResponse:
    return JSONResponse(
        {
            "error": {
                "message": f"scripted-model: no route {path}",
                "type": "not_found",
                "code": "not_found",
            }
        },
        status_code=404,
    )


def build_app(
    *,
    first_token_delay: float = 0.0,
    chunk_delay: float = 0.02,
    log_file: str | Path | None = None,
) -> Starlette:
    """Build the Starlette app. ``app.state.request_log`` holds the :class:`RequestLog`."""
    settings = ServerSettings(
        first_token_delay=first_token_delay,
        chunk_delay=chunk_delay,
        log_file=Path(log_file) if log_file is not None else None,
    )
    request_log = RequestLog(settings.log_file)

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True, "models": list(MODEL_IDS)})

    async def get_log(request: Request) -> Response:
        return JSONResponse(request_log.snapshot())

    async def clear_log(request: Request) -> Response:
        return JSONResponse({"cleared": request_log.clear()})

    async def list_models(request: Request) -> Response:
        request_log.add(_request_record(request, None))
        return JSONResponse({"object": "list", "data": [_model_object(m) for m in MODEL_IDS]})

    async def get_model(request: Request) -> Response:
        request_log.add(_request_record(request, None))
        model_id = str(request.path_params["model_id"])
        if model_id not in MODEL_IDS:
            return _not_found(request.url.path)
        return JSONResponse(_model_object(model_id))

    async def chat_completions(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            request_log.add(_request_record(request, None) | {"status": 400})
            return JSONResponse(
                {"error": {"message": "invalid JSON body", "type": "invalid_request_error"}},
                status_code=400,
            )
        if not isinstance(body, dict):
            request_log.add(_request_record(request, None) | {"status": 400})
            return JSONResponse(
                {"error": {"message": "body must be an object", "type": "invalid_request_error"}},
                status_code=400,
            )
        reply = plan_reply(body)
        record = request_log.add(
            _request_record(request, body)
            | {
                "scenario": reply.scenario,
                "phase": reply.phase,
                "status": reply.status,
                "reply_content": reply.content[:300],
                "reply_tool_calls": [
                    {"name": c.name, "arguments": c.arguments} for c in reply.tool_calls
                ],
            }
        )
        if reply.status != 200:
            return JSONResponse({"error": reply.error or {}}, status_code=reply.status)
        if body.get("stream"):
            return StreamingResponse(
                _sse_events(body, reply, settings, record),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        if settings.first_token_delay > 0:
            await asyncio.sleep(settings.first_token_delay)
        record["completed"] = True
        return JSONResponse(_completion_json(body, reply))

    async def fallback(request: Request) -> Response:
        request_log.add(_request_record(request, None) | {"status": 404})
        return _not_found(request.url.path)

    all_methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    routes = [
        Route("/_health", health, methods=["GET"]),
        Route("/_log", get_log, methods=["GET"]),
        Route("/_log", clear_log, methods=["DELETE"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/models", list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/chat/completions", chat_completions, methods=["POST"]),
        Route("/{path:path}", fallback, methods=all_methods),
    ]
    app = Starlette(routes=routes)
    app.state.request_log = request_log
    app.state.settings = settings
    return app


def run(
    host: str = "127.0.0.1",
    port: int = 8089,
    *,
    first_token_delay: float = 0.0,
    chunk_delay: float = 0.02,
    log_file: str | Path | None = None,
    exit_with_parent: bool = False,
) -> None:
    """Serve the scripted model until SIGINT/SIGTERM (blocking); with `exit_with_parent`,
    also once the process that started it is gone (killed with SIGKILL, it could not stop
    this one itself)."""
    app = build_app(first_token_delay=first_token_delay, chunk_delay=chunk_delay, log_file=log_file)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    if exit_with_parent:
        threading.Thread(target=_exit_with_parent, args=(server, os.getppid()), daemon=True).start()
    server.run()


def _exit_with_parent(server: uvicorn.Server, parent: int) -> None:
    # Orphaned, this process is re-parented: its parent pid changes.
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    server.should_exit = True
