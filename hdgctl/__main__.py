"""`hdgctl` / `python -m hdgctl`: up, chat, pair."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from canonical import hermes_home as homes
from canonical.errors import SettingsError
from canonical.pairing import Pairing
from gateway_plugin.hermes.setup_flow import SetupError, android_extra, check_port, home_pairing

from . import ops


def _python_bin(name: str) -> str:
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else (shutil.which(name) or name)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pairing(home: Path, host: str | None = None, name: str = "Hermes") -> Pairing:
    settings = ops.home_settings(home)  # .env wins over the shell, as in Hermes
    token = settings.token_value()
    if not token:
        raise SystemExit(
            f"no ANDROID_TOKEN in {home / '.env'}; run `hdgctl up` or `hdgctl setup` first"
        )
    try:
        port = check_port(settings.ws_port)
    except SetupError as exc:
        raise SetupError(f"ANDROID_WS_PORT: {exc}") from None
    bind = settings.ws_host
    # chat runs on the gateway's host: a wildcard listen address is reached over loopback
    # (`::` listens on IPv6 only).
    shown = host or {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(bind, bind)
    return Pairing(host=shown, port=port, token=token, tls=settings.ws_cert is not None, name=name)


def cmd_pair(args: argparse.Namespace) -> int:
    import segno

    pairing = home_pairing(Path(args.home), public_host=args.public_host, name=args.name)
    uri = pairing.uri()
    qr = segno.make(uri, error="m")
    for path in (args.png, args.svg):
        if path:
            try:
                qr.save(path, scale=6)
            except OSError as exc:
                raise SetupError(f"cannot write {path}: {exc.strerror or exc}") from None
    if not args.quiet:
        qr.terminal(compact=True)
    print(f"pairing URI: {uri}")
    print(f"WebSocket:   {pairing.ws_url()}")
    print(f"Web client:  {pairing.web_url()}")
    return 0


def _start_scripted_model(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    log = open(home / "scripted-model.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "scripted_model", "--port", str(port), "--exit-with-parent"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            with urllib.request.urlopen(base + "/_health", timeout=0.5):
                return proc, base + "/v1"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the scripted model did not start; see " + str(home / "scripted-model.log"))


def cmd_up(args: argparse.Namespace) -> int:
    home = Path(args.home)
    home.mkdir(parents=True, exist_ok=True)
    config = homes.read_config(home)
    env = homes.read_env(home)
    model_proc = None
    model = config.get("model")
    if not homes.model_configured(config, env) or (
        isinstance(model, dict) and model.get("default") == "scripted-model"
    ):
        model_proc, base_url = _start_scripted_model(home)
        config["model"] = {
            "provider": "custom",
            "base_url": base_url,
            "default": "scripted-model",
            "api_key": "scripted",
        }
        print(
            "No model configured: using the built-in scripted model (try prompts like '[tool] hi')."
        )
        print(
            "Point Hermes at a real model with `hermes model` or by editing", home / "config.yaml"
        )
    # Keep the listen address setup wrote unless one is given here.
    extra = {"host": "127.0.0.1", "port": 8790, **android_extra(config)}
    if args.host is not None:
        extra["host"] = args.host
    if args.port is not None:
        extra["port"] = args.port
    homes.enable_plugin(config, {"host": extra["host"], "port": extra["port"]})
    homes.write_config(home, config)
    if not ops.home_settings(home).token_value():
        homes.set_env(home, {"ANDROID_TOKEN": homes.new_token()})
        print("Generated a pairing token in", home / ".env")
    cmd_pair(
        argparse.Namespace(
            home=str(home), public_host=None, name=None, png=None, svg=None, quiet=args.no_qr
        )
    )
    print(f"Chat from this terminal: {_python_bin('hdgctl')} chat --home {home}")
    child_env = {**os.environ, "HERMES_HOME": str(home)}
    gateway = subprocess.Popen([_python_bin("hermes"), "gateway", "run"], env=child_env)

    def forward(signum: int, _frame: object) -> None:
        gateway.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        return gateway.wait()
    finally:
        if model_proc is not None:
            model_proc.terminate()
            model_proc.wait(5)


def cmd_chat(args: argparse.Namespace) -> int:
    from .chat import run_chat

    if args.url and args.token:
        url, token = args.url, args.token
    else:
        pairing = _pairing(Path(args.home))
        url, token = args.url or pairing.ws_url(), args.token or pairing.token
    context = None
    if url.startswith("wss://"):
        # The edge's own certificate is trusted (pinned), as for hdgctl devices / token.
        cert = ops.home_settings(Path(args.home)).ws_cert
        context = ops.tls_context(cert, insecure=False)
    return asyncio.run(
        run_chat(
            url,
            token,
            chat_id=args.chat_id,
            once=args.once,
            device_id=args.device_id,
            ssl=context,
        )
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hdgctl", description="Hermes device gateway: set up, run, pair, operate."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    default_home = str(homes.default_home())

    up = sub.add_parser(
        "up",
        help="configure the plugin in a Hermes home and run `hermes gateway run` (embedded mode)",
    )
    up.add_argument("--home", default=default_home)
    up.add_argument("--host", help="listen address (default: the home's, else 127.0.0.1)")
    up.add_argument("--port", type=int, help="listen port (default: the home's, else 8790)")
    up.add_argument("--no-qr", action="store_true")
    up.set_defaults(func=cmd_up)

    pair = sub.add_parser("pair", help="print the pairing QR code and URI (optionally as PNG/SVG)")
    pair.add_argument("--home", default=default_home)
    pair.add_argument("--public-host", help="host name or address the phone should dial")
    pair.add_argument("--name", help="server name shown in the app (default: setup's)")
    pair.add_argument("--png")
    pair.add_argument("--svg")
    pair.add_argument("--quiet", action="store_true")
    pair.set_defaults(func=cmd_pair)

    chat = sub.add_parser("chat", help="a terminal device: send messages and watch the stream")
    chat.add_argument("--home", default=default_home)
    chat.add_argument("--url", help="ws://host:port/ws (default: from the home's settings)")
    chat.add_argument("--token")
    chat.add_argument("--chat-id", default="android:default")
    chat.add_argument("--device-id")
    chat.add_argument("--once", help="send one message, print the reply, exit")
    chat.set_defaults(func=cmd_chat)
    ops.add_parsers(sub, default_home)  # setup, devices list|revoke, token rotate
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (SettingsError, SetupError, homes.HomeError) as exc:  # a bad setting: say which
        print(f"hdgctl {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
