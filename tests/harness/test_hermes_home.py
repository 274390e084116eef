"""HermesHome + the scripted model drive a REAL Hermes agent (no plugin of ours involved)."""

from __future__ import annotations

import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.harness.hermes_home import HermesHome
from tests.harness.processes import VENV_BIN, ManagedProcess, ScriptedModel, scrubbed_environ

COLD_TURN_BUDGET_S = 60.0


def run_in_home(
    home: HermesHome, argv: list[str], tmp_path: Path, name: str, timeout: float = 60.0
) -> tuple[int | None, str, float]:
    """Run a Hermes command in ``home``; returns (exit code, output, seconds)."""
    workdir = tmp_path / f"cwd-{name}"
    workdir.mkdir()
    proc = ManagedProcess(
        name,
        argv,
        log_path=tmp_path / f"{name}.log",
        env=scrubbed_environ(home.process_env()),
        cwd=workdir,
    )
    started = time.monotonic()
    proc.start()
    code = proc.wait(timeout)
    elapsed = time.monotonic() - started
    if code is None:
        proc.stop(timeout=5)
    else:
        proc.stop(timeout=1)
    return code, proc.log_text(), elapsed


def hermes_python(home: HermesHome, tmp_path: Path, name: str, code: str) -> str:
    """Run ``code`` in a fresh interpreter of the Hermes venv with ``home`` as HERMES_HOME."""
    exit_code, output, _ = run_in_home(home, [sys.executable, "-c", code], tmp_path, name)
    assert exit_code == 0, output
    return output


def test_the_config_has_the_scripted_model_the_plugin_and_the_android_block(
    hermes_home_factory: Callable[..., HermesHome], scripted_model: ScriptedModel
) -> None:
    home = hermes_home_factory(android_extra={"bus_url": "memory://", "edge": {"port": 1234}})
    config = yaml.safe_load(home.config_path.read_text(encoding="utf-8"))
    assert config["model"] == {
        "provider": "custom",
        "base_url": scripted_model.base_url,
        "default": "scripted-model",
        "api_key": "dummy-key",
        "context_length": 131072,
    }
    assert config["plugins"] == {"enabled": ["android-platform"]}
    assert config["gateway"]["platforms"]["android"] == {
        "enabled": True,
        "extra": {"bus_url": "memory://", "edge": {"port": 1234}},
    }
    assert config["streaming"] == {"enabled": True, "edit_interval": 0.1, "buffer_threshold": 10}
    assert config["display"]["tool_progress"] == "all"
    assert config["approvals"]["mode"] == "manual"
    assert config["security"] == {"tirith_enabled": False, "allow_lazy_installs": False}
    assert config["platform_toolsets"]["android"] == ["terminal", "clarify", "todo"]
    assert config["onboarding"]["profile_build"] == "off"


def test_secrets_go_to_a_private_env_file_and_overrides_merge_deeply(
    hermes_home_factory: Callable[..., HermesHome],
) -> None:
    home = hermes_home_factory(secrets={"ANDROID_TOKEN": "t0k3n", "SPACED": "a b"})
    assert home.env_path.read_text(encoding="utf-8") == 'ANDROID_TOKEN=t0k3n\nSPACED="a b"\n'
    assert stat.S_IMODE(home.env_path.stat().st_mode) == 0o600
    home.update_config({"streaming": {"enabled": False}, "agent": {"reasoning_effort": "high"}})
    config = home.read_config()
    assert config["streaming"] == {"enabled": False, "edit_interval": 0.1, "buffer_threshold": 10}
    assert config["agent"] == {"reasoning_effort": "high"}
    env = home.process_env()
    assert env["HERMES_HOME"] == str(home.path)
    assert env["HOME"] == str(home.user_home)


def test_a_real_hermes_chat_turn_runs_the_terminal_tool_and_prints_the_final_text(
    hermes_home_factory: Callable[..., HermesHome],
    scripted_model: ScriptedModel,
    tmp_path: Path,
) -> None:
    home = hermes_home_factory(plugins_enabled=[])
    scripted_model.clear_log()
    code, output, cold = run_in_home(
        home,
        [str(VENV_BIN / "hermes"), "chat", "-q", "[tool] hi"],
        tmp_path,
        "hermes-chat-cold",
        timeout=COLD_TURN_BUDGET_S,
    )
    assert code == 0, output
    assert cold < COLD_TURN_BUDGET_S
    assert "echo hello-from-tool" in output  # the tool progress line
    assert "The tool said hello-from-tool. Done." in output

    turns = [e for e in scripted_model.chat_log() if e["scenario"] == "tool"]
    assert [e["phase"] for e in turns] == [0, 1]
    assert all(e["stream"] and e["model"] == "scripted-model" for e in turns)
    assert sorted(turns[0]["tools"]) == ["clarify", "process", "terminal", "todo"]
    assert "hello-from-tool" in (turns[1]["last_tool_result"] or "")  # the command really ran

    agent_log = (home.path / "logs" / "agent.log").read_text(encoding="utf-8")
    assert "Lazy-installing" not in agent_log
    assert "tirith not found" not in agent_log
    assert "Failed to fetch model metadata from OpenRouter" not in agent_log
    assert not (home.user_home / ".hermes").exists()

    # Same home again (the process is new, the home is warm), now with a reasoning effort.
    home.update_config({"agent": {"reasoning_effort": "high"}})
    scripted_model.clear_log()
    code, output, warm = run_in_home(
        home, [str(VENV_BIN / "hermes"), "chat", "-q", "hello again"], tmp_path, "hermes-chat-warm"
    )
    assert code == 0, output
    assert "Hello from the scripted model. You said: hello again." in output
    (greeting,) = [e for e in scripted_model.chat_log() if e["scenario"] == "default"]
    assert greeting["reasoning_effort"] == "high"  # agent.reasoning_effort reaches the request
    print(f"\nhermes chat -q: cold home {cold:.2f}s, warm home {warm:.2f}s")


def test_hermes_title_generator_gets_a_scripted_title(
    hermes_home_factory: Callable[..., HermesHome], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    home = hermes_home_factory(plugins_enabled=[])
    script = (
        "from agent.title_generator import generate_title\n"
        "print('TITLE=' + repr(generate_title('plan my holiday trip', 'Sure.')))\n"
        "print('FAILED=' + repr(generate_title('[title-fail] hello', 'Hi.')))\n"
    )
    output = hermes_python(home, tmp_path, "title", script)
    assert "TITLE='Scripted Title For plan my holiday'" in output
    assert "FAILED=None" in output
    scenarios = [e["scenario"] for e in scripted_model.chat_log()]
    assert "title" in scenarios


def test_hermes_smart_approval_escalates_to_a_manual_prompt(
    hermes_home_factory: Callable[..., HermesHome], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    home = hermes_home_factory(plugins_enabled=[], approvals_mode="smart")
    scripted_model.clear_log()
    script = (
        "from tools.approval import _smart_approve\n"
        "print('VERDICT=' + _smart_approve('rm -rf /tmp/hdg-danger-x', 'delete in root path'))\n"
    )
    output = hermes_python(home, tmp_path, "approval", script)
    assert "VERDICT=escalate" in output
    entries: list[dict[str, Any]] = scripted_model.chat_log()
    assert [e["scenario"] for e in entries] == ["approval"]
    assert entries[0]["stream"] is False
