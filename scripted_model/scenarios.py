"""Pure scenario logic: turn an OpenAI chat-completions request body into a scripted reply.

Nothing here does I/O. :func:`plan_reply` looks at the request's messages and tools and
returns a :class:`Reply` that the HTTP layer renders either as an SSE stream or as one
JSON document.

Scenario markers are looked up, case-insensitively, in the text of the LAST user message
(Hermes may add ``[System note: ...]`` text to a user message, so markers are substrings).
A turn is split into phases by counting the ``tool`` messages that follow that user
message: phase 0 asks for a tool, later phases answer.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_CHUNK_WORDS = 3
LONG_CHUNK_DELAY = 0.05
LONG_CHUNKS = 60
VERYLONG_CHUNKS = 400

TOOL_ECHO_COMMAND = "echo hello-from-tool"
TOOL_FINAL_TEXT = "The tool said hello-from-tool. Done."
NARRATION_TEXT = "Let me check that for you."
NARRATE_FINAL_TEXT = "I checked it: the tool said hello-from-tool. All done."
TWO_TOOLS_FIRST_NARRATION = "Running the first step."
TWO_TOOLS_SECOND_NARRATION = "Running the second step."
TWO_TOOLS_FINAL_TEXT = "Both steps ran: one, then two. Done."
SLOW_COMMAND = "sleep 25"
CLARIFY_QUESTION = "Which colour?"
CLARIFY_CHOICES = ("red", "blue")
REASONING_CHUNKS = ("Thinking ", "about ", "it...")
APPROVAL_VERDICT = "ESCALATE"
AUX_DEFAULT_TEXT = "Scripted auxiliary answer."

# Prompt shapes of Hermes' auxiliary calls (hermes-agent 0.19.0).
# agent/title_generator.py _TITLE_PROMPT / _TITLE_PROMPT_PINNED_LANGUAGE
TITLE_SYSTEM_PREFIX = "generate a short, descriptive title"
# tools/approval.py _smart_approve(): system + user prompt
APPROVAL_SYSTEM_MARKER = "you are a security reviewer for an ai coding agent"
APPROVAL_USER_MARKER = "respond with exactly one word: approve, deny, or escalate"

_SYSTEM_NOTE_RE = re.compile(r"\[System note:.*?\]", re.DOTALL | re.IGNORECASE)
_MEMORY_BLOCK_RE = re.compile(r"<memory-context>.*?</memory-context>", re.DOTALL)
_WS_RE = re.compile(r"\s+")


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asks for."""

    name: str
    arguments: dict[str, Any]
    call_id: str = field(default_factory=lambda: "call_" + secrets.token_hex(12))

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass(frozen=True)
class Reply:
    """What the scripted model answers to one request."""

    scenario: str
    phase: int = 0
    reasoning_chunks: tuple[str, ...] = ()
    content_chunks: tuple[str, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    status: int = 200
    error: dict[str, Any] | None = None
    chunk_delay: float | None = None  # None: use the server's --chunk-delay

    @property
    def content(self) -> str:
        return "".join(self.content_chunks)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_chunks)

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


def word_chunks(text: str, words: int = DEFAULT_CHUNK_WORDS) -> tuple[str, ...]:
    """Split ``text`` into chunks of ``words`` words; joining them gives ``text`` back."""
    parts = text.split(" ")
    groups = [" ".join(parts[i : i + words]) for i in range(0, len(parts), words)]
    return tuple(g + " " if i < len(groups) - 1 else g for i, g in enumerate(groups))


def message_text(message: Mapping[str, Any]) -> str:
    """Text of a chat message whose content is a string or a list of content parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts: list[str] = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
            elif isinstance(part, str):
                texts.append(part)
        return "\n".join(texts)
    return ""


def clean_user_text(text: str) -> str:
    """User text without Hermes' injected system notes / memory blocks, whitespace collapsed."""
    text = _MEMORY_BLOCK_RE.sub(" ", text)
    text = _SYSTEM_NOTE_RE.sub(" ", text)
    return _WS_RE.sub(" ", text).strip()


def _messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = body.get("messages")
    if not isinstance(raw, list):
        return []
    return [m for m in raw if isinstance(m, Mapping)]


def _last_user_index(messages: Sequence[Mapping[str, Any]]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return None


def _tool_schemas(body: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """name -> JSON-schema ``parameters`` of the function tools offered in the request."""
    found: dict[str, Mapping[str, Any]] = {}
    tools = body.get("tools")
    if not isinstance(tools, list):
        return found
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        fn = tool.get("function")
        if not isinstance(fn, Mapping):
            continue
        name = fn.get("name")
        params = fn.get("parameters")
        if isinstance(name, str):
            found[name] = params if isinstance(params, Mapping) else {}
    return found


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "array": (list, tuple),
    "object": (dict,),
}


def arguments_fit_schema(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> bool:
    """Shallow JSON-schema check: required keys present, no unknown keys, basic types match."""
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = schema.get("required")
    if isinstance(required, list) and any(key not in arguments for key in required):
        return False
    for key, value in arguments.items():
        prop = props.get(key)
        if not isinstance(prop, Mapping):
            return False
        expected = prop.get("type")
        if isinstance(expected, str) and expected in _JSON_TYPES:
            if isinstance(value, bool) and expected in ("integer", "number"):
                return False
            if not isinstance(value, _JSON_TYPES[expected]):
                return False
    return True


def _tool_or_excuse(
    scenario: str,
    phase: int,
    schemas: Mapping[str, Mapping[str, Any]],
    call: ToolCall,
    narration: str = "",
) -> Reply:
    """A reply that calls ``call`` if the request offers a compatible tool, else says why not."""
    schema = schemas.get(call.name)
    if schema is None:
        text = (
            f"Scripted model: scenario {scenario} wants the `{call.name}` tool, "
            "but the request offers no such tool."
        )
        return Reply(scenario=scenario, phase=phase, content_chunks=word_chunks(text))
    if not arguments_fit_schema(call.arguments, schema):
        text = (
            f"Scripted model: scenario {scenario} wants the `{call.name}` tool, "
            "but its schema does not accept the scripted arguments."
        )
        return Reply(scenario=scenario, phase=phase, content_chunks=word_chunks(text))
    return Reply(
        scenario=scenario,
        phase=phase,
        content_chunks=word_chunks(narration) if narration else (),
        tool_calls=(call,),
    )


def _text(scenario: str, phase: int, text: str) -> Reply:
    return Reply(scenario=scenario, phase=phase, content_chunks=word_chunks(text))


def _short(text: str, limit: int) -> str:
    text = _WS_RE.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clarify_answer(tool_text: str) -> str:
    try:
        data = json.loads(tool_text)
    except ValueError:
        return _short(tool_text, 120)
    if isinstance(data, Mapping):
        answer = data.get("user_response")
        if isinstance(answer, str):
            return answer
        error = data.get("error")
        if isinstance(error, str):
            return "error: " + error
    return _short(tool_text, 120)


# Order matters: the first marker found wins.
SCENARIO_MARKERS: tuple[tuple[str, str], ...] = (
    ("[fail]", "fail"),
    ("[verylong]", "verylong"),
    ("[long]", "long"),
    ("[two tools]", "two_tools"),
    ("[narrate]", "narrate"),
    ("[slow]", "slow"),
    ("[danger]", "danger"),
    ("[clarify]", "clarify"),
    ("[reasoning]", "reasoning"),
    ("[tool]", "tool"),
    ("[media]", "media"),
    ("[hostile]", "hostile"),
)


def scenario_for(text: str) -> str:
    lowered = text.lower()
    for marker, name in SCENARIO_MARKERS:
        if marker in lowered:
            return name
    return "default"


# Model text that would run script or navigate if a client rendered it as HTML: a web
# client must show it as text (and its markdown link must not become a javascript: URL).
HOSTILE_TEXT = (
    'Hostile **bold** <img src=x onerror="window.__hdgPwned=1">'
    " <script>window.__hdgPwned=2</script>"
    " [click me](javascript:window.__hdgPwned=3) and [safe](https://example.org/docs)"
    " `<b>code</b>`"
)

MEDIA_PNG_SIDE = 4


def media_png_bytes(side: int = MEDIA_PNG_SIDE) -> bytes:
    """A valid side x side RGB PNG (red), built without an imaging library."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * side for _ in range(side))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def write_media_png() -> str:
    """Write a small PNG into a temp dir; its absolute path (for a ``MEDIA:`` tag)."""
    import tempfile
    from pathlib import Path

    directory = Path(tempfile.gettempdir()) / "hdg-scripted-media"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"chart-{secrets.token_hex(6)}.png"
    path.write_bytes(media_png_bytes())
    return str(path)


def _title_reply(messages: Sequence[Mapping[str, Any]]) -> Reply:
    conversation = "\n".join(message_text(m) for m in messages)
    if "[title-fail]" in conversation.lower():
        return Reply(
            scenario="title",
            status=500,
            error={
                "message": "scripted title failure ([title-fail] marker): invalid_request_error",
                "type": "invalid_request_error",
                "code": "invalid_request_error",
            },
        )
    user = message_text(messages[-1]) if messages else ""
    # Shape: "User: <first user message>\n\nAssistant: <first answer>"
    match = re.search(r"User:\s*(.*?)(?:\n\nAssistant:|$)", user, re.DOTALL)
    snippet = clean_user_text(match.group(1) if match else user)
    words = snippet.split()[:3]
    title = "Scripted Title For " + " ".join(words) if words else "Scripted Title"
    return Reply(scenario="title", content_chunks=(title.strip(),))


def _aux_reply(messages: Sequence[Mapping[str, Any]]) -> Reply | None:
    """Recognise Hermes' auxiliary calls by prompt shape; None for a normal agent turn."""
    system = " ".join(message_text(m) for m in messages if m.get("role") == "system").lower()
    last_user = ""
    idx = _last_user_index(messages)
    if idx is not None:
        last_user = message_text(messages[idx]).lower()
    if system.lstrip().startswith(TITLE_SYSTEM_PREFIX):
        return _title_reply(messages)
    if APPROVAL_SYSTEM_MARKER in system or APPROVAL_USER_MARKER in last_user:
        return Reply(scenario="approval", content_chunks=(APPROVAL_VERDICT,))
    return None


def plan_reply(body: Mapping[str, Any]) -> Reply:
    """Decide the scripted reply to one ``/v1/chat/completions`` request body."""
    messages = _messages(body)
    aux = _aux_reply(messages)
    if aux is not None:
        return aux

    idx = _last_user_index(messages)
    user_text = message_text(messages[idx]) if idx is not None else ""
    after = messages[idx + 1 :] if idx is not None else messages
    tool_results = [m for m in after if m.get("role") == "tool"]
    phase = len(tool_results)
    last_tool_text = message_text(tool_results[-1]) if tool_results else ""
    scenario = scenario_for(user_text)
    schemas = _tool_schemas(body)
    said = clean_user_text(user_text)[:40]
    default_text = f"Hello from the scripted model. You said: {said}."

    if scenario == "fail":
        return Reply(
            scenario=scenario,
            phase=phase,
            status=500,
            error={
                "message": "scripted failure ([fail] marker): invalid_request_error",
                "type": "invalid_request_error",
                "code": "invalid_request_error",
            },
        )
    if scenario in ("long", "verylong"):
        count = LONG_CHUNKS if scenario == "long" else VERYLONG_CHUNKS
        chunks = tuple(
            f"Long answer chunk {i:03d}." + (" " if i < count else "") for i in range(1, count + 1)
        )
        return Reply(
            scenario=scenario, phase=phase, content_chunks=chunks, chunk_delay=LONG_CHUNK_DELAY
        )
    if scenario == "reasoning":
        return Reply(
            scenario=scenario,
            phase=phase,
            reasoning_chunks=REASONING_CHUNKS,
            content_chunks=word_chunks(default_text),
        )
    if scenario == "tool":
        if phase == 0:
            call = ToolCall("terminal", {"command": TOOL_ECHO_COMMAND})
            return _tool_or_excuse(scenario, phase, schemas, call)
        return _text(scenario, phase, TOOL_FINAL_TEXT)
    if scenario == "narrate":
        if phase == 0:
            call = ToolCall("terminal", {"command": TOOL_ECHO_COMMAND})
            return _tool_or_excuse(scenario, phase, schemas, call, NARRATION_TEXT)
        return _text(scenario, phase, NARRATE_FINAL_TEXT)
    if scenario == "two_tools":
        if phase == 0:
            call = ToolCall("terminal", {"command": "echo one"})
            return _tool_or_excuse(scenario, phase, schemas, call, TWO_TOOLS_FIRST_NARRATION)
        if phase == 1:
            call = ToolCall("terminal", {"command": "echo two"})
            return _tool_or_excuse(scenario, phase, schemas, call, TWO_TOOLS_SECOND_NARRATION)
        return _text(scenario, phase, TWO_TOOLS_FINAL_TEXT)
    if scenario == "slow":
        if phase == 0:
            call = ToolCall("terminal", {"command": SLOW_COMMAND})
            return _tool_or_excuse(scenario, phase, schemas, call)
        return _text(
            scenario, phase, f"The slow command finished. Result: {_short(last_tool_text, 160)}"
        )
    if scenario == "danger":
        if phase == 0:
            target = f"/tmp/hdg-danger-{secrets.token_hex(6)}"
            call = ToolCall("terminal", {"command": f"rm -rf {target}"})
            return _tool_or_excuse(scenario, phase, schemas, call)
        return _text(
            scenario,
            phase,
            f"The dangerous command was handled. Result: {_short(last_tool_text, 160)}",
        )
    if scenario == "media":
        # The one scenario with a side effect: the agent "produced" a file, delivered
        # through Hermes' MEDIA: pipeline (extract_media → the adapter's send_* methods).
        return _text(scenario, phase, f"Here it is MEDIA:{write_media_png()}")
    if scenario == "hostile":
        return _text(scenario, phase, HOSTILE_TEXT)
    if scenario == "clarify":
        if phase == 0:
            call = ToolCall(
                "clarify", {"question": CLARIFY_QUESTION, "choices": list(CLARIFY_CHOICES)}
            )
            return _tool_or_excuse(scenario, phase, schemas, call)
        return _text(scenario, phase, f"You picked: {_clarify_answer(last_tool_text)}.")
    return _text("default", phase, default_text)
