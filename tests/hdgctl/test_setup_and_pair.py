"""`hdgctl setup` (non-interactive) and `hdgctl pair`: the home it writes, the code it shows."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from canonical.pairing import Pairing, parse_pairing
from hdgctl.__main__ import main
from tests.hdgctl.qrdecode import decode_png, decode_terminal


def _env(home: Path) -> dict[str, str]:
    lines = (home / ".env").read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _extra(home: Path) -> dict[str, object]:
    config = yaml.safe_load((home / "config.yaml").read_text(encoding="utf-8"))
    assert config["plugins"]["enabled"] == ["android-platform"]
    return dict(config["gateway"]["platforms"]["android"]["extra"])


def test_setup_with_flags_writes_the_home_and_prints_a_scannable_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = "operator-chosen-token-" + "x" * 20
    code = main(
        ["setup", "--home", str(tmp_path), "--token", token, "--host", "0.0.0.0", "--port", "8811"]
        + ["--public-host", "hermes.lan", "--push", "ntfy", "--ntfy-topic", "hermes-topic-1"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert _env(tmp_path) == {"ANDROID_TOKEN": token, "NTFY_TOPIC": "hermes-topic-1"}
    extra = _extra(tmp_path)
    assert (extra["host"], extra["port"], extra["push_backend"]) == ("0.0.0.0", 8811, "ntfy")
    uri = next(line for line in out.splitlines() if line.startswith("Pairing URI:")).split()[-1]
    assert decode_terminal(out) == uri
    assert parse_pairing(uri) == Pairing(host="hermes.lan", port=8811, token=token)


def test_setup_run_again_keeps_the_token_and_earlier_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["setup", "--home", str(tmp_path), "--port", "8812", "--no-qr"]) == 0
    first = _env(tmp_path)["ANDROID_TOKEN"]
    assert main(["setup", "--home", str(tmp_path), "--push", "none", "--no-qr"]) == 0
    assert _env(tmp_path)["ANDROID_TOKEN"] == first
    assert _extra(tmp_path)["port"] == 8812
    assert "Token: kept" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--token", "too-short"], "at least 32 characters"),
        (["--push", "fcm"], "service-account key"),
        (["--port", "0"], "between 1 and 65535"),
    ],
)
def test_setup_refuses_unusable_answers_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main(["setup", "--home", str(tmp_path), "--no-qr", *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / ".env").exists()


def test_pair_saves_a_png_that_decodes_to_the_printed_uri(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["setup", "--home", str(tmp_path), "--no-qr"])
    capsys.readouterr()
    png = tmp_path / "pair.png"
    assert main(["pair", "--home", str(tmp_path), "--png", str(png), "--quiet"]) == 0
    out = capsys.readouterr().out
    uri = next(line for line in out.splitlines() if line.startswith("pairing URI:")).split()[-1]
    assert decode_png(png) == uri
    assert parse_pairing(uri).token == _env(tmp_path)["ANDROID_TOKEN"]


def _uri(out: str) -> Pairing:
    line = next(line for line in out.splitlines() if line.lower().startswith("pairing uri:"))
    return parse_pairing(line.split()[-1])


def test_pair_shows_the_public_address_setup_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--public-host", "gw.example.org", "--public-port", "443", "--public-tls"]
    assert main(["setup", "--home", str(tmp_path), "--name", "Home", "--no-qr", *flags]) == 0
    shown_by_setup = _uri(capsys.readouterr().out)
    assert main(["pair", "--home", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert _uri(out) == shown_by_setup
    assert shown_by_setup == Pairing(
        host="gw.example.org",
        port=443,
        token=_env(tmp_path)["ANDROID_TOKEN"],
        tls=True,
        name="Home",
    )
    assert "WebSocket:   wss://gw.example.org:443/ws" in out
    # The web client's link carries the token in the fragment, never in the path or query.
    token = _env(tmp_path)["ANDROID_TOKEN"]
    assert f"Web client:  https://gw.example.org:443/app/#token={token}" in out


def test_setup_run_again_with_a_new_port_host_or_tls_moves_the_pairing_code_along(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = str(tmp_path / "home")
    assert main(["setup", "--home", home, "--no-qr"]) == 0
    capsys.readouterr()
    assert main(["setup", "--home", home, "--host", "gw.lan", "--port", "9000", "--no-qr"]) == 0
    moved = _uri(capsys.readouterr().out)
    assert (moved.host, moved.port, moved.tls) == ("gw.lan", 9000, False)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("cert", encoding="utf-8")
    key.write_text("key", encoding="utf-8")
    flags = ["--tls-cert", str(cert), "--tls-key", str(key), "--no-qr"]
    assert main(["setup", "--home", home, *flags]) == 0
    assert _uri(capsys.readouterr().out).tls is True
    assert main(["pair", "--home", home, "--quiet"]) == 0
    paired = _uri(capsys.readouterr().out)
    assert (paired.host, paired.port, paired.tls) == ("gw.lan", 9000, True)


def test_setup_moves_a_pairing_code_an_earlier_release_saved_with_the_listen_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Earlier releases saved the derived public address too, which then never moved.
    public = {"host": "127.0.0.1", "port": 8790, "tls": False, "name": "Hermes"}
    extra = {"host": "127.0.0.1", "port": 8790, "push_backend": "none", "public": public}
    config = {"gateway": {"platforms": {"android": {"enabled": True, "extra": extra}}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["setup", "--home", str(tmp_path), "--port", "9001", "--no-qr"]) == 0
    assert _uri(capsys.readouterr().out).port == 9001
    assert main(["pair", "--home", str(tmp_path), "--quiet"]) == 0
    assert _uri(capsys.readouterr().out).port == 9001


def test_setup_into_a_home_that_cannot_be_created_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["setup", "--home", "/proc/no-such-hermes-home", "--no-qr"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("setup: cannot write the Hermes home /proc/no-such-hermes-home")
    assert "Traceback" not in err


def test_setup_never_writes_the_token_into_a_file_others_can_read(tmp_path: Path) -> None:
    # A temporary file left by an interrupted setup, world-readable, that another local
    # user opened meanwhile: the token must not land in it.
    leftover = tmp_path / ".env.tmp"
    leftover.write_text("", encoding="utf-8")
    leftover.chmod(0o644)
    with leftover.open(encoding="utf-8") as watcher:
        assert main(["setup", "--home", str(tmp_path), "--no-qr"]) == 0
        token = _env(tmp_path)["ANDROID_TOKEN"]
        assert token not in watcher.read()
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600


def test_a_malformed_port_in_the_shell_is_named_and_setup_still_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANDROID_WS_PORT", "80a")
    assert main(["setup", "--home", str(tmp_path), "--no-qr"]) == 0
    capsys.readouterr()
    for command in (["pair", "--quiet"], ["chat", "--once", "hi"], ["devices", "list"]):
        assert main([*command, "--home", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"hdgctl {command[0]}: ANDROID_WS_PORT: "), err


def test_pair_to_a_png_in_a_missing_directory_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["setup", "--home", str(tmp_path), "--no-qr"]) == 0
    png = tmp_path / "no-such-dir" / "qr.png"
    assert main(["pair", "--home", str(tmp_path), "--png", str(png), "--quiet"]) == 2
    assert (
        capsys.readouterr().err == f"hdgctl pair: cannot write {png}: No such file or directory\n"
    )


@pytest.mark.parametrize(
    "config_text",
    ["plugins:\n  enabled:\n", "gateway:\n  platforms:\n    android:\n"],
    ids=["empty plugins.enabled", "empty android section"],
)
def test_setup_fills_in_config_keys_left_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config_text: str
) -> None:
    (tmp_path / "config.yaml").write_text(config_text, encoding="utf-8")
    assert main(["setup", "--home", str(tmp_path), "--port", "8813", "--no-qr"]) == 0
    assert _extra(tmp_path)["port"] == 8813
    assert "ANDROID_TOKEN" in _env(tmp_path)


def test_setup_on_a_config_yaml_it_cannot_read_says_so_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.yaml").write_text("model: [unclosed\n", encoding="utf-8")
    assert main(["setup", "--home", str(tmp_path), "--no-qr"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"setup: {tmp_path / 'config.yaml'} is not valid YAML; fix it first")
    assert not (tmp_path / ".env").exists()
    assert (tmp_path / "config.yaml").read_text(encoding="utf-8") == "model: [unclosed\n"


def test_an_ipv6_listen_address_gets_an_ipv6_code_and_brackets_are_not_doubled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `::` listens on IPv6 only: an IPv4 address in the code could not be dialled.
    assert main(["setup", "--home", str(tmp_path / "a"), "--host", "::", "--no-qr"]) == 0
    host = _uri(capsys.readouterr().out).host
    assert ":" in host and host != "::"
    home = str(tmp_path / "b")
    assert main(["setup", "--home", home, "--public-host", "[fd00::1]", "--no-qr"]) == 0
    out = capsys.readouterr().out
    assert _uri(out).host == "fd00::1"
    assert "App URL:     ws://[fd00::1]:8790/ws" in out
    assert "Web client:  http://[fd00::1]:8790/app/#token=" in out
