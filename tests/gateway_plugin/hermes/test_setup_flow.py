"""The setup flow Hermes runs for the android platform, driven without a terminal."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from canonical.pairing import parse_pairing
from gateway_plugin.hermes.setup_flow import MIN_TOKEN_CHARS, interactive_setup
from tests.hdgctl.qrdecode import decode_terminal


class Terminal:
    """Scripted answers for input() and getpass(), and everything printed."""

    def __init__(self, answers: Iterable[str], secrets: Iterable[str] = ()) -> None:
        self.answers = list(answers)
        self.secrets = list(secrets)
        self.prompts: list[str] = []
        self.printed: list[str] = []

    def input(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.answers:
            raise EOFError
        return self.answers.pop(0)

    def getpass(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.secrets:
            raise EOFError
        return self.secrets.pop(0)

    def print(self, *args: Any, **kwargs: Any) -> None:
        self.printed.append(" ".join(str(a) for a in args))

    @property
    def text(self) -> str:
        return "\n".join(self.printed)

    def line(self, prefix: str) -> str:
        return next(p for p in self.printed if p.startswith(prefix))[len(prefix) :].strip()


def run(home: Path, terminal: Terminal) -> Any:
    return interactive_setup(
        home=home, input_fn=terminal.input, getpass_fn=terminal.getpass, print_fn=terminal.print
    )


def read_env(home: Path) -> dict[str, str]:
    lines = (home / ".env").read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def android(home: Path) -> dict[str, Any]:
    config = yaml.safe_load((home / "config.yaml").read_text(encoding="utf-8"))
    assert "android-platform" in config["plugins"]["enabled"]
    entry = config["gateway"]["platforms"]["android"]
    assert entry["enabled"] is True
    return dict(entry["extra"])


# host, port, TLS?, public host, push
DEFAULTS = ["", "", "n", "", ""]


def test_a_blank_token_answer_generates_a_strong_token_and_the_qr_code_carries_it(
    tmp_path: Path,
) -> None:
    terminal = Terminal(DEFAULTS, secrets=[""])
    outcome = run(tmp_path, terminal)
    assert outcome is not None and outcome.token_source == "generated"
    token = read_env(tmp_path)["ANDROID_TOKEN"]
    assert len(token) >= MIN_TOKEN_CHARS
    uri = terminal.line("Pairing URI:")
    assert decode_terminal(terminal.text) == uri
    pairing = parse_pairing(uri)
    assert (pairing.host, pairing.port, pairing.token, pairing.tls) == (
        "127.0.0.1",
        8790,
        token,
        False,
    )
    assert terminal.line("App URL:") == "ws://127.0.0.1:8790/ws"
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600


def test_secrets_go_to_env_and_behaviour_to_config_yaml(tmp_path: Path) -> None:
    terminal = Terminal(["0.0.0.0", "8801", "n", "gw.example.net", "ntfy", "", ""], secrets=[""])
    run(tmp_path, terminal)
    env = read_env(tmp_path)
    extra = android(tmp_path)
    assert extra["host"] == "0.0.0.0" and extra["port"] == 8801
    assert extra["push_backend"] == "ntfy"
    assert extra["ntfy_server_url"] == "https://ntfy.sh"
    assert extra["public"]["host"] == "gw.example.net"
    assert env["NTFY_TOPIC"].startswith("hermes-") and len(env["NTFY_TOPIC"]) > 20
    config_text = (tmp_path / "config.yaml").read_text(encoding="utf-8")
    assert env["ANDROID_TOKEN"] not in config_text
    assert env["NTFY_TOPIC"] not in config_text
    assert parse_pairing(terminal.line("Pairing URI:")).host == "gw.example.net"


def test_the_current_token_is_kept_when_the_operator_says_so(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("ANDROID_TOKEN=" + "k" * 40 + "\nOTHER=1\n", encoding="utf-8")
    terminal = Terminal(["", *DEFAULTS])
    outcome = run(tmp_path, terminal)
    assert outcome.token_source == "kept"
    env = read_env(tmp_path)
    assert env == {"ANDROID_TOKEN": "k" * 40, "OTHER": "1"}
    assert not any(
        "token" in p.lower() and "pairing token (" in p.lower() for p in terminal.prompts
    )


def test_a_short_token_and_a_bad_port_are_asked_again(tmp_path: Path) -> None:
    chosen = "my-own-token-" + "t" * 30
    terminal = Terminal(["", "70000", "8802", "n", "", ""], secrets=["short", chosen])
    outcome = run(tmp_path, terminal)
    assert outcome.token_source == "given"
    assert read_env(tmp_path)["ANDROID_TOKEN"] == chosen
    assert android(tmp_path)["port"] == 8802
    assert f"at least {MIN_TOKEN_CHARS} characters" in terminal.text
    assert "between 1 and 65535" in terminal.text


def test_fcm_needs_a_real_service_account_key(tmp_path: Path) -> None:
    wrong = tmp_path / "not-a-key.json"
    wrong.write_text(json.dumps({"hello": "world"}), encoding="utf-8")
    key = tmp_path / "service-account.json"
    key.write_text(
        json.dumps(
            {
                "project_id": "hermes-test",
                "client_email": "push@hermes-test.iam.gserviceaccount.com",
                "private_key": "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n",
            }
        ),
        encoding="utf-8",
    )
    home = tmp_path / "home"
    terminal = Terminal(["", "", "n", "", "fcm", str(wrong), str(key)], secrets=[""])
    run(home, terminal)
    assert "not a service-account key" in terminal.text
    assert read_env(home)["ANDROID_FCM_SERVICE_ACCOUNT"] == str(key.resolve())
    assert android(home)["push_backend"] == "fcm"


def test_tls_certificates_turn_the_pairing_into_wss(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("cert", encoding="utf-8")
    key.write_text("key", encoding="utf-8")
    terminal = Terminal(["", "", "y", str(cert), str(key), "", ""], secrets=[""])
    run(tmp_path / "home", terminal)
    env = read_env(tmp_path / "home")
    assert env["ANDROID_WS_CERT"] == str(cert.resolve())
    assert env["ANDROID_WS_KEY"] == str(key.resolve())
    assert parse_pairing(terminal.line("Pairing URI:")).tls is True
    assert terminal.line("App URL:").startswith("wss://")


def test_running_out_of_answers_stops_without_writing_anything(tmp_path: Path) -> None:
    terminal = Terminal(["127.0.0.1"], secrets=[""])
    assert run(tmp_path, terminal) is None
    assert "Android setup stopped" in terminal.text
    assert not (tmp_path / ".env").exists()
    assert not (tmp_path / "config.yaml").exists()


def test_hermes_gets_the_flow_as_the_platforms_setup_fn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway_plugin.hermes.bridge import register_platform

    registered: dict[str, Any] = {}

    class Context:
        def register_platform(self, **kwargs: Any) -> None:
            registered.update(kwargs)

        def register_hook(self, name: str, callback: Any) -> None:
            pass

    # register() sets the cron home variable: undone after the test.
    monkeypatch.setenv("ANDROID_CRON_HOME_CHANNEL", "android:home")
    register_platform(Context())
    assert callable(registered["setup_fn"])
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    answers = iter(["", "", "n", "", ""])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "")
    registered["setup_fn"]()  # Hermes calls it with no arguments
    assert len(read_env(tmp_path)["ANDROID_TOKEN"]) >= MIN_TOKEN_CHARS


def test_running_it_again_keeps_the_proxy_port_tls_and_name_it_does_not_ask_about(
    tmp_path: Path,
) -> None:
    from hdgctl.__main__ import main

    proxy = ["--public-host", "gw.example.org", "--public-port", "443", "--public-tls"]
    assert main(["setup", "--home", str(tmp_path), "--name", "Home", "--no-qr", *proxy]) == 0
    terminal = Terminal(["", *DEFAULTS])  # keep the token, accept every default
    run(tmp_path, terminal)
    pairing = parse_pairing(terminal.line("Pairing URI:"))
    assert (pairing.host, pairing.port, pairing.tls, pairing.name) == (
        "gw.example.org",
        443,
        True,
        "Home",
    )


def test_turning_tls_off_removes_the_certificate_so_the_edge_serves_what_the_code_says(
    tmp_path: Path,
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("cert", encoding="utf-8")
    key.write_text("key", encoding="utf-8")
    home = tmp_path / "home"
    run(home, Terminal(["", "", "y", str(cert), str(key), "", ""], secrets=[""]))
    terminal = Terminal(["", "", "", "n", "", ""])  # keep the token; TLS: no
    run(home, terminal)
    env = read_env(home)
    assert "ANDROID_WS_CERT" not in env and "ANDROID_WS_KEY" not in env
    assert parse_pairing(terminal.line("Pairing URI:")).tls is False
    assert terminal.line("App URL:").startswith("ws://")


def test_a_home_that_cannot_be_created_stops_the_flow_with_a_message() -> None:
    terminal = Terminal(DEFAULTS, secrets=[""])
    assert run(Path("/proc/no-such-hermes-home"), terminal) is None
    assert "cannot write the Hermes home /proc/no-such-hermes-home" in terminal.text
