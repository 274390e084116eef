"""`hdgctl setup`, `hdgctl devices list|revoke`, `hdgctl token rotate`.

`setup` writes the Hermes home (no gateway needed). The others talk to the *running*
plugin, in both modes, the way a device does: the CLI connects to an edge over WebSocket
with the pairing token (iris dialect) and sends admin frames carrying the admin token,
which only someone who can read the Hermes home has (see gateway_plugin/access/admin.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import ssl
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from canonical import hermes_home as homes
from canonical.client import DeviceClient
from canonical.model import Json
from canonical.settings import GatewaySettings, load_settings
from gateway_plugin.access.admin import load_admin_token
from gateway_plugin.hermes.setup_flow import (
    SetupChoices,
    SetupError,
    android_extra,
    apply_setup,
    current_choices,
    show_pairing,
)

CLOSE_ROTATED = 4401


class OpsError(Exception):
    """Something the operator must fix; the message says what."""


@dataclass
class Target:
    url: str
    token: str
    admin_token: str
    ssl: ssl.SSLContext | None
    home: Path


def home_settings(home: Path) -> GatewaySettings:
    """The plugin's settings for this home: the environment as Hermes has it (the home's
    .env over the shell's variables) > config.yaml extra > secret files."""
    extra = android_extra(homes.read_config(home))
    return load_settings(extra, environ=homes.hermes_environ(home))


def tls_context(cert: Path | None, insecure: bool) -> ssl.SSLContext:
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    ctx = ssl.create_default_context()
    if cert is not None and cert.is_file():
        # Trust the edge's own certificate (self-signed or not): pinned, so the name
        # the CLI dials (loopback) need not match the certificate's.
        ctx.load_verify_locations(cafile=str(cert))
        ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        ctx.check_hostname = False
    return ctx


def resolve_target(
    home: Path, url: str | None = None, *, insecure: bool = False, token: str | None = None
) -> Target:
    # The token, certificate and admin token the running gateway has: its .env wins over
    # a (stale) ANDROID_TOKEN in this shell, as when Hermes loads it.
    settings = home_settings(home)
    pairing_token = token or settings.token_value()
    if not pairing_token:
        raise OpsError(f"no ANDROID_TOKEN for {home}; run `hdgctl setup --home {home}` first")
    data_dir = settings.data_dir or home / "android"
    admin_token = load_admin_token(data_dir, settings.admin_token_value())
    if not admin_token:
        raise OpsError(
            f"no admin token in {data_dir / 'admin.token'} (the plugin writes it when it "
            "starts) and ANDROID_ADMIN_TOKEN is not set; start the gateway once first"
        )
    tls = settings.ws_cert is not None and settings.ws_key is not None
    if url is None:
        # A wildcard listen address is reached over loopback; `::` is IPv6 only.
        loopback = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}
        host = loopback.get(settings.ws_host, settings.ws_host)
        host = f"[{host}]" if ":" in host else host
        url = f"{'wss' if tls else 'ws'}://{host}:{settings.ws_port}/ws"
    context = tls_context(settings.ws_cert, insecure) if url.startswith("wss://") else None
    return Target(url, pairing_token, admin_token, context, home)


class AdminSession:
    """One admin connection: hello as `hdgctl-<host>`, then admin frames."""

    def __init__(self, target: Target, device_id: str | None = None) -> None:
        self.target = target
        self.device_id = device_id or f"hdgctl-{socket.gethostname()}"[:128]
        self.client = DeviceClient(target.url, ssl=target.ssl)

    async def __aenter__(self) -> AdminSession:
        try:
            await self.client.connect(open_timeout=10)
        except (OSError, TimeoutError) as exc:
            raise OpsError(f"cannot reach the gateway at {self.target.url}: {exc}") from None
        try:
            ack = await self.client.hello_iris(
                self.target.token, self.device_id, device_name="hdgctl admin"
            )
        except (ConnectionError, TimeoutError) as exc:
            await self.client.close()
            raise OpsError(f"the gateway closed the connection at hello: {exc}") from None
        if ack.get("type") != "hello.ack":
            await self.client.close()
            error = ack.get("error") or {}
            raise OpsError(f"hello refused: {error.get('code')}: {error.get('message')}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()

    async def request(self, kind: str, **fields: Any) -> Json:
        frame: Json = {"type": kind, "admin_token": self.target.admin_token, **fields}
        try:
            reply = await self.client.request(frame, timeout=30)
        except (ConnectionError, TimeoutError) as exc:
            raise OpsError(f"{kind}: no answer from the gateway ({exc})") from None
        if reply.get("type") == "error":
            error = reply.get("error") or {}
            raise OpsError(f"{kind} refused: {error.get('code')}: {error.get('message')}")
        return reply


# -- commands
def cmd_setup(args: argparse.Namespace) -> int:
    home = Path(args.home)
    try:
        defaults, _ = current_choices(home)
    except homes.HomeError as exc:
        print(f"setup: {exc}", file=sys.stderr)
        return 2
    choices = SetupChoices(
        token=args.token,
        host=args.host or defaults.host,
        port=args.port if args.port is not None else defaults.port,
        push=args.push or defaults.push,
        fcm_service_account=args.fcm_service_account or defaults.fcm_service_account,
        ntfy_topic=args.ntfy_topic or defaults.ntfy_topic,
        ntfy_server_url=args.ntfy_server or defaults.ntfy_server_url,
        tls_cert=args.tls_cert or defaults.tls_cert,
        tls_key=args.tls_key or defaults.tls_key,
        public_host=args.public_host or defaults.public_host,
        public_port=args.public_port if args.public_port is not None else defaults.public_port,
        public_tls=True if args.public_tls else defaults.public_tls,
        name=args.name or defaults.name,
    )
    try:
        outcome = apply_setup(home, choices)
    except (SetupError, homes.HomeError) as exc:
        print(f"setup: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a home that cannot be created or written
        print(f"setup: cannot write the Hermes home {home}: {exc}", file=sys.stderr)
        return 2
    print(f"Token: {outcome.token_source}. Wrote {home / '.env'} and {home / 'config.yaml'}.")
    show_pairing(outcome, qr=not args.no_qr)
    print("Start (or restart) the gateway to apply: hermes gateway run")
    return 0


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


def print_devices(devices: list[Json], out: TextIO) -> None:
    if not devices:
        out.write("no devices yet\n")
        return
    out.write(f"{'DEVICE':<32} {'NAME':<20} {'STATE':<8} {'ONLINE':<7} {'PUSH':<5} LAST SEEN\n")
    for d in devices:
        state = "revoked" if d.get("revoked") else "active"
        online = "yes" if d.get("online") else "no"
        out.write(
            f"{str(d['device_id'])[:32]:<32} {str(d.get('name') or '')[:20]:<20} {state:<8} "
            f"{online:<7} {str(d.get('push') or '-'):<5} {_when(d.get('last_seen'))}\n"
        )


async def devices_list(target: Target, device_id: str | None = None) -> list[Json]:
    async with AdminSession(target, device_id) as admin:
        reply = await admin.request("admin.devices.list")
    return list(reply.get("devices") or [])


async def devices_revoke(target: Target, victim: str, device_id: str | None = None) -> Json:
    async with AdminSession(target, device_id) as admin:
        reply = await admin.request("admin.devices.revoke", device_id=victim)
    return dict(reply.get("device") or {})


async def token_rotate(target: Target, new: str, device_id: str | None = None) -> None:
    """Rotate on the running plugin, then persist to .env so a restart keeps it."""
    async with AdminSession(target, device_id) as admin:
        await admin.request("admin.token.rotate", token=new)
        # The plugin closes every socket of the tenant, this one included.
        await admin.client.wait_closed(10)
    homes.set_env(target.home, {"ANDROID_TOKEN": new})


def _target(args: argparse.Namespace) -> Target:
    return resolve_target(Path(args.home), args.url, insecure=args.insecure)


def cmd_devices_list(args: argparse.Namespace) -> int:
    devices = asyncio.run(devices_list(_target(args), args.device_id))
    if args.json:
        print(json.dumps(devices, indent=2))
    else:
        print_devices(devices, sys.stdout)
    return 0


def cmd_devices_revoke(args: argparse.Namespace) -> int:
    device = asyncio.run(devices_revoke(_target(args), args.victim, args.device_id))
    print(f"revoked {device.get('device_id')}; its connections were closed on every edge")
    return 0


def cmd_token_rotate(args: argparse.Namespace) -> int:
    from gateway_plugin.hermes.setup_flow import check_token

    try:
        new = check_token(args.token) if args.token else homes.new_token()
    except SetupError as exc:
        print(f"token rotate: {exc}", file=sys.stderr)
        return 2
    asyncio.run(token_rotate(_target(args), new, args.device_id))
    print(f"token rotated; every device was disconnected. New token saved in {args.home}/.env.")
    print(f"Pair your devices again: hdgctl pair --home {args.home}")
    return 0


def _guarded(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except OpsError as exc:
            print(f"hdgctl: {exc}", file=sys.stderr)
            return 1

    return run


def add_parsers(sub: Any, default_home: str) -> None:
    """Register `setup`, `devices` and `token` on hdgctl's sub-parsers."""
    setup = sub.add_parser(
        "setup",
        help="write the plugin's settings into a Hermes home and print the pairing code",
    )
    setup.add_argument("--home", default=default_home)
    setup.add_argument("--token", help="pairing token (default: keep the home's, or generate)")
    setup.add_argument("--host", help="listen address (127.0.0.1, or 0.0.0.0 for the LAN)")
    setup.add_argument("--port", type=int)
    setup.add_argument("--push", choices=["fcm", "ntfy", "none"])
    setup.add_argument("--fcm-service-account", help="Firebase service-account key (JSON)")
    setup.add_argument("--ntfy-topic")
    setup.add_argument("--ntfy-server", help="ntfy server URL (default https://ntfy.sh)")
    setup.add_argument("--tls-cert", help="serve wss:// directly with this certificate (PEM)")
    setup.add_argument("--tls-key", help="the certificate's private key (PEM)")
    setup.add_argument("--public-host", help="host name or address the app dials")
    setup.add_argument("--public-port", type=int, help="port the app dials (e.g. 443 via a proxy)")
    setup.add_argument(
        "--public-tls", action="store_true", help="the app dials wss:// (TLS at a proxy)"
    )
    setup.add_argument("--name", help="server name shown in the app")
    setup.add_argument("--no-qr", action="store_true")
    setup.set_defaults(func=_guarded(cmd_setup))

    def connection_options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--home", default=default_home)
        parser.add_argument("--url", help="edge WebSocket URL (default: from the home)")
        parser.add_argument("--insecure", action="store_true", help="skip TLS verification")
        parser.add_argument("--device-id", help="this CLI's device id (default hdgctl-<host>)")

    devices = sub.add_parser("devices", help="list or revoke paired devices")
    devices_sub = devices.add_subparsers(dest="devices_command", required=True)
    listing = devices_sub.add_parser("list", help="every device that connected, and its state")
    connection_options(listing)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_guarded(cmd_devices_list))
    revoke = devices_sub.add_parser("revoke", help="revoke a device: closed on every edge now")
    connection_options(revoke)
    revoke.add_argument("victim", metavar="DEVICE_ID")
    revoke.set_defaults(func=_guarded(cmd_devices_revoke))

    token = sub.add_parser("token", help="manage the pairing token")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    rotate = token_sub.add_parser(
        "rotate", help="switch to a new token now; every device must pair again"
    )
    connection_options(rotate)
    rotate.add_argument("--token", help="the new token (default: generate one)")
    rotate.set_defaults(func=_guarded(cmd_token_rotate))


__all__ = [
    "AdminSession",
    "OpsError",
    "Target",
    "add_parsers",
    "devices_list",
    "devices_revoke",
    "home_settings",
    "resolve_target",
    "token_rotate",
]
