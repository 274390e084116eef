"""The scripted model server, driven over real HTTP with the ``openai`` client Hermes uses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from scripted_model.scenarios import VERYLONG_CHUNKS, plan_reply
from tests.harness.processes import ScriptedModel, free_port, http_get, http_ok

TERMINAL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "terminal",
        "description": "Run a shell command",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "background": {"type": "boolean"},
                "timeout": {"type": "integer"},
            },
            "required": ["command"],
        },
    },
}
CLARIFY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "clarify",
        "description": "Ask the user",
        "parameters": {
            "type": "object",
            "properties": {
                "question": {"type": "string"},
                "choices": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["question"],
        },
    },
}
TOOLS = [TERMINAL_TOOL, CLARIFY_TOOL]


@pytest.fixture(scope="module")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptedModel]:
    server = ScriptedModel(workdir=tmp_path_factory.mktemp("model"), chunk_delay=0.0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(model_server: ScriptedModel) -> Iterator[OpenAI]:
    with OpenAI(base_url=model_server.base_url, api_key="dummy", max_retries=0) as c:
        yield c


class Streamed:
    """What a streamed completion added up to."""

    def __init__(self) -> None:
        self.content_chunks: list[str] = []
        self.reasoning_chunks: list[str] = []
        self.tool_calls: dict[int, dict[str, str]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.events: list[str] = []

    @property
    def content(self) -> str:
        return "".join(self.content_chunks)

    def arguments(self, index: int = 0) -> dict[str, Any]:
        parsed = json.loads(self.tool_calls[index]["arguments"])
        assert isinstance(parsed, dict)
        return parsed


def stream(client: OpenAI, messages: list[dict[str, Any]], **kwargs: Any) -> Streamed:
    result = Streamed()
    kwargs.setdefault("tools", TOOLS)
    response = completions(client).create(
        model="scripted-model",
        messages=messages,
        stream=True,
        **kwargs,
    )
    with response:
        for chunk in response:
            if chunk.usage is not None:
                result.usage = chunk.usage
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            delta = choice.delta
            reasoning = (delta.model_extra or {}).get("reasoning_content")
            if reasoning:
                result.reasoning_chunks.append(reasoning)
                result.events.append("reasoning")
            if delta.content:
                result.content_chunks.append(delta.content)
                result.events.append("content")
            for call in delta.tool_calls or []:
                slot = result.tool_calls.setdefault(
                    call.index, {"id": "", "name": "", "arguments": ""}
                )
                if call.id:
                    slot["id"] = call.id
                if call.function and call.function.name:
                    slot["name"] = call.function.name
                if call.function and call.function.arguments:
                    slot["arguments"] += call.function.arguments
                result.events.append("tool_call")
            if choice.finish_reason:
                result.finish_reason = choice.finish_reason
    return result


def completions(client: OpenAI) -> Any:
    """``client.chat.completions``, untyped: the tests pass plain dict messages."""
    return client.chat.completions


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def after_tool_calls(prompt: str, outputs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """A conversation: system, user prompt, then (command, output) tool round trips."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are Hermes."},
        user(prompt),
    ]
    for i, (command, output) in enumerate(outputs):
        call_id = f"call_{i}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "terminal",
                            "arguments": json.dumps({"command": command}),
                        },
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
    return messages


def test_the_model_list_names_both_scripted_models(client: OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == ["scripted-model", "other-model"]


def test_a_plain_prompt_streams_a_greeting_in_three_word_chunks(client: OpenAI) -> None:
    result = stream(client, [user("hi there, how are you today?")])
    assert (
        result.content == "Hello from the scripted model. You said: hi there, how are you today?."
    )
    assert result.content_chunks[0] == "Hello from the "
    assert all(len(chunk.split()) <= 3 for chunk in result.content_chunks)
    assert result.finish_reason == "stop"
    assert result.tool_calls == {}


def test_the_greeting_echoes_only_the_first_forty_characters(client: OpenAI) -> None:
    text = "a" * 30 + " " + "b" * 30
    result = stream(client, [user(text)])
    assert result.content == f"Hello from the scripted model. You said: {text[:40]}."


def test_a_plain_prompt_without_streaming_returns_the_same_greeting(client: OpenAI) -> None:
    completion = completions(client).create(
        model="scripted-model",
        messages=[user("hi")],
        tools=TOOLS,
    )
    assert completion.choices[0].message.content == "Hello from the scripted model. You said: hi."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0


def test_hermes_system_notes_are_not_echoed_back(client: OpenAI) -> None:
    note = "[System note: This is the user's very first message ever. Briefly introduce yourself.]"
    result = stream(client, [user(f"hello\n\n{note}")])
    assert result.content == "Hello from the scripted model. You said: hello."


def test_usage_arrives_in_a_final_chunk_when_include_usage_is_requested(client: OpenAI) -> None:
    result = stream(client, [user("hi")], stream_options={"include_usage": True})
    assert result.usage is not None
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens


def test_a_tool_prompt_streams_a_terminal_call(client: OpenAI) -> None:
    result = stream(client, [user("[tool] please run something")])
    assert result.finish_reason == "tool_calls"
    assert result.content == ""
    assert result.tool_calls[0]["name"] == "terminal"
    assert result.tool_calls[0]["id"].startswith("call_")
    assert result.arguments() == {"command": "echo hello-from-tool"}


def test_a_tool_prompt_without_streaming_returns_the_same_call(client: OpenAI) -> None:
    completion = completions(client).create(
        model="scripted-model",
        messages=[user("[TOOL] go")],
        tools=TOOLS,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.function.name == "terminal"
    assert json.loads(call.function.arguments) == {"command": "echo hello-from-tool"}


def test_a_tool_result_gets_the_final_answer(client: OpenAI) -> None:
    result = stream(
        client, after_tool_calls("[tool] hi", [("echo hello-from-tool", "hello-from-tool")])
    )
    assert result.content == "The tool said hello-from-tool. Done."
    assert result.finish_reason == "stop"


def test_narration_comes_before_the_tool_call_in_one_response(client: OpenAI) -> None:
    result = stream(client, [user("[narrate] check it")])
    assert result.content == "Let me check that for you."
    assert result.tool_calls[0]["name"] == "terminal"
    assert result.finish_reason == "tool_calls"
    first_tool = result.events.index("tool_call")
    assert set(result.events[:first_tool]) == {"content"}
    assert set(result.events[first_tool:]) == {"tool_call"}
    final = stream(
        client,
        after_tool_calls("[narrate] check it", [("echo hello-from-tool", "hello-from-tool")]),
    )
    assert final.content == "I checked it: the tool said hello-from-tool. All done."


def test_two_tools_are_asked_for_one_after_the_other(client: OpenAI) -> None:
    first = stream(client, [user("[two tools] go")])
    assert first.content == "Running the first step."
    assert first.arguments() == {"command": "echo one"}
    second = stream(client, after_tool_calls("[two tools] go", [("echo one", "one")]))
    assert second.content == "Running the second step."
    assert second.arguments() == {"command": "echo two"}
    final = stream(
        client, after_tool_calls("[two tools] go", [("echo one", "one"), ("echo two", "two")])
    )
    assert final.content == "Both steps ran: one, then two. Done."
    assert final.tool_calls == {}


def test_a_slow_prompt_asks_for_a_long_sleep(client: OpenAI) -> None:
    result = stream(client, [user("[slow] wait")])
    assert result.arguments() == {"command": "sleep 25"}
    final = stream(client, after_tool_calls("[slow] wait", [("sleep 25", "[Command interrupted]")]))
    assert final.content.startswith("The slow command finished.")
    assert "[Command interrupted]" in final.content


def test_a_danger_prompt_asks_for_a_recursive_delete_in_tmp(client: OpenAI) -> None:
    one = stream(client, [user("[danger] clean up")]).arguments()["command"]
    two = stream(client, [user("[danger] clean up")]).arguments()["command"]
    assert one.startswith("rm -rf /tmp/hdg-danger-")
    assert one != two
    final = stream(
        client, after_tool_calls("[danger] clean up", [(one, "BLOCKED: denied by user")])
    )
    assert final.content.startswith("The dangerous command was handled.")
    assert "BLOCKED" in final.content


def test_a_clarify_prompt_asks_which_colour_and_echoes_the_answer(client: OpenAI) -> None:
    result = stream(client, [user("[clarify] paint it")])
    assert result.tool_calls[0]["name"] == "clarify"
    assert result.arguments() == {"question": "Which colour?", "choices": ["red", "blue"]}
    answer = json.dumps(
        {"question": "Which colour?", "choices_offered": ["red", "blue"], "user_response": "blue"}
    )
    messages = [
        user("[clarify] paint it"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "clarify", "arguments": result.tool_calls[0]["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": answer},
    ]
    assert stream(client, messages).content == "You picked: blue."


def test_a_reasoning_prompt_streams_reasoning_before_the_answer(client: OpenAI) -> None:
    result = stream(client, [user("[reasoning] think")])
    assert "".join(result.reasoning_chunks) == "Thinking about it..."
    assert result.events.index("content") > max(
        i for i, e in enumerate(result.events) if e == "reasoning"
    )
    assert result.content.startswith("Hello from the scripted model.")


def test_a_reasoning_prompt_without_streaming_carries_reasoning_content(client: OpenAI) -> None:
    completion = completions(client).create(
        model="scripted-model", messages=[user("[reasoning] x")]
    )
    message = completion.choices[0].message
    assert (message.model_extra or {}).get("reasoning_content") == "Thinking about it..."


def test_a_long_prompt_streams_sixty_chunks_at_a_twentieth_of_a_second(client: OpenAI) -> None:
    started = time.monotonic()
    result = stream(client, [user("[long] talk")])
    elapsed = time.monotonic() - started
    assert len(result.content_chunks) == 60
    assert result.content_chunks[0] == "Long answer chunk 001. "
    assert result.content.endswith("Long answer chunk 060.")
    assert elapsed >= 60 * 0.05 * 0.9


def test_a_verylong_prompt_plans_four_hundred_slow_chunks() -> None:
    reply = plan_reply({"messages": [user("[verylong] go")]})
    assert reply.scenario == "verylong"
    assert len(reply.content_chunks) == VERYLONG_CHUNKS == 400
    assert reply.chunk_delay == 0.05


def test_a_client_that_hangs_up_mid_stream_is_logged_as_incomplete(
    client: OpenAI, model_server: ScriptedModel
) -> None:
    model_server.clear_log()
    response = completions(client).create(
        model="scripted-model",
        messages=[user("[verylong] go")],
        stream=True,
    )
    with response:
        for n, _chunk in enumerate(response):
            if n == 5:
                break
    time.sleep(0.3)
    (entry,) = model_server.chat_log()
    assert entry["scenario"] == "verylong"
    assert entry["completed"] is False
    assert 5 <= entry["chunks_sent"] < 400


def test_a_fail_prompt_gets_a_non_retryable_500(client: OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        stream(client, [user("[fail] please")])
    assert caught.value.status_code == 500
    body = caught.value.body
    assert isinstance(body, dict)
    assert body.get("code") == "invalid_request_error"


def test_a_title_request_gets_a_short_title(client: OpenAI) -> None:
    completion = completions(client).create(
        model="scripted-model",
        messages=[
            {
                "role": "system",
                "content": "Generate a short, descriptive title (3-7 words) for a conversation that "
                "starts with the following exchange. Return ONLY the title text, nothing else.",
            },
            user("User: plan my holiday trip to Rome\n\nAssistant: Sure, here is a plan."),
        ],
        max_tokens=500,
        temperature=0.3,
    )
    assert completion.choices[0].message.content == "Scripted Title For plan my holiday"


def test_a_title_request_for_a_title_fail_conversation_gets_a_500(client: OpenAI) -> None:
    with pytest.raises(openai.InternalServerError):
        completions(client).create(
            model="scripted-model",
            messages=[
                {
                    "role": "system",
                    "content": "Generate a short, descriptive title (3-7 words) ...",
                },
                user("User: [title-fail] hello\n\nAssistant: Hello from the scripted model."),
            ],
        )


def test_a_smart_approval_assessment_escalates(client: OpenAI) -> None:
    completion = completions(client).create(
        model="scripted-model",
        messages=[
            {
                "role": "system",
                "content": "You are a security reviewer for an AI coding agent. You assess whether "
                "shell commands are safe to execute.\n\nRespond with exactly one word: APPROVE, DENY, or ESCALATE",
            },
            user(
                "The following command was flagged as: delete in root path\n\n<command>\nrm -rf /tmp/x\n</command>\n\n"
                "Respond with exactly one word: APPROVE, DENY, or ESCALATE"
            ),
        ],
        temperature=0,
        max_tokens=16,
    )
    assert completion.choices[0].message.content == "ESCALATE"


def test_without_a_terminal_tool_the_model_says_so_in_plain_text(client: OpenAI) -> None:
    result = stream(client, [user("[tool] hi")], tools=[CLARIFY_TOOL])
    assert result.tool_calls == {}
    assert "no such tool" in result.content
    assert "`terminal`" in result.content


def test_a_terminal_tool_with_an_incompatible_schema_is_not_called(client: OpenAI) -> None:
    odd = json.loads(json.dumps(TERMINAL_TOOL))
    odd["function"]["parameters"] = {
        "type": "object",
        "properties": {"cmd": {"type": "string"}},
        "required": ["cmd"],
    }
    result = stream(client, [user("[tool] hi")], tools=[odd])
    assert result.tool_calls == {}
    assert "schema" in result.content


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/models"),
        ("GET", "/api/tags"),
        ("GET", "/v1/props"),
        ("GET", "/props"),
        ("GET", "/version"),
        ("POST", "/api/show"),
        ("GET", "/v1/models/no-such-model"),
    ],
)
def test_local_server_probes_get_a_quick_json_404(
    model_server: ScriptedModel, method: str, path: str
) -> None:
    started = time.monotonic()
    response = httpx.request(
        method, model_server.url + path, json={"name": "scripted-model"}, timeout=2
    )
    assert time.monotonic() - started < 1.0
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_known_model_can_be_looked_up_by_id(model_server: ScriptedModel) -> None:
    status, body = http_get(model_server.base_url + "/models/other-model")
    assert status == 200
    assert json.loads(body)["id"] == "other-model"


def test_the_request_log_records_model_stream_flag_reasoning_effort_and_roles(
    client: OpenAI, model_server: ScriptedModel
) -> None:
    model_server.clear_log()
    stream(client, [{"role": "system", "content": "s"}, user("[tool] x")], reasoning_effort="high")
    completions(client).create(model="other-model", messages=[user("hi")])
    entries = model_server.chat_log()
    assert [e["model"] for e in entries] == ["scripted-model", "other-model"]
    assert [e["stream"] for e in entries] == [True, False]
    assert entries[0]["reasoning_effort"] == "high"
    assert entries[0]["roles"] == ["system", "user"]
    assert entries[0]["scenario"] == "tool"
    assert entries[0]["tools"] == ["terminal", "clarify"]
    assert entries[0]["completed"] is True
    assert entries[1]["scenario"] == "default"
    assert all(isinstance(e["ts"], float) for e in entries)
    model_server.clear_log()
    assert model_server.log() == []


def test_health_answers_ok(model_server: ScriptedModel) -> None:
    status, body = http_get(model_server.url + "/_health")
    assert status == 200
    assert json.loads(body)["ok"] is True


def test_the_log_file_gets_one_json_line_per_request(
    client: OpenAI, model_server: ScriptedModel
) -> None:
    log_file = Path(model_server.workdir) / "requests.jsonl"
    before = len(log_file.read_text(encoding="utf-8").splitlines())
    completions(client).create(model="scripted-model", messages=[user("hi")])
    lines = log_file.read_text(encoding="utf-8").splitlines()
    assert len(lines) == before + 1
    assert json.loads(lines[-1])["scenario"] == "default"


def test_first_token_delay_holds_back_the_first_chunk(tmp_path: Path) -> None:
    with ScriptedModel(workdir=tmp_path, first_token_delay=0.6, chunk_delay=0.0) as slow:
        with OpenAI(base_url=slow.base_url, api_key="dummy", max_retries=0) as c:
            started = time.monotonic()
            response = completions(c).create(
                model="scripted-model",
                messages=[user("hi")],
                stream=True,
            )
            with response:
                next(iter(response))
                first = time.monotonic() - started
    assert first >= 0.55


def test_with_exit_with_parent_the_server_stops_once_its_parent_is_killed(
    tmp_path: Path,
) -> None:
    # The parent starts the server as hdgctl up does (its own session, out of reach of
    # a signal to the parent's group), prints its pid, then waits to be killed.
    parent_code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-m', 'scripted_model', '--port', sys.argv[1],"
        " '--exit-with-parent'], start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    port = free_port()
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 30
        while not http_ok(f"http://127.0.0.1:{port}/_health"):
            assert time.monotonic() < deadline, "the scripted model never answered"
            time.sleep(0.1)
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + 30
        while _alive(child):
            assert time.monotonic() < deadline, "the orphaned scripted model kept running"
            time.sleep(0.1)
    finally:
        parent.kill()
        parent.wait(timeout=10)
        parent.stdout.close()
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie re-parented to init is gone for this purpose.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
