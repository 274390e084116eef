"""Operating the plugin: admin frames and the admin credential. The device gate at hello
is `hello_gate`, the plugin's metrics `plugin_metrics`.

Admin frames (iris dialect, docs/operations.md "Admin access"):

- ``admin.devices.list``            every device the registry knows, with who is online
- ``admin.devices.revoke``          revoke one device and close its sockets on every edge
- ``admin.token.rotate``            switch the pairing token; every socket is closed

Who may send them: a connection that presents the **admin token** in the frame
(``admin_token``). The edge replaces it by its SHA-256 before the command reaches the bus,
so the admin token never travels through Redis or a log; the plugin compares digests in
constant time. The admin token is ``ANDROID_ADMIN_TOKEN`` if set (in the environment or
a secret file), else the contents of
``<data dir>/admin.token`` (created on first start, mode 0600): whoever can read the Hermes
home may administer it; a phone holding only the pairing token may not.
``ANDROID_ADMIN_DEVICES`` (comma-separated device ids) narrows it further.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import re
import secrets
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter
from pydantic import SecretStr

from canonical import logredact
from canonical.bus import token_digest
from canonical.envfile import update_env_file
from canonical.errors import BusUnavailable
from canonical.model import Json
from canonical.protocol import error_body
from gateway_plugin.access.plugin_metrics import _CONTROLLERS, _metrics_server, counted
from gateway_plugin.storage.threads import run_or_busy

if TYPE_CHECKING:
    from gateway_plugin.controller import Controller

log = logging.getLogger("hdg.plugin.admin")


ADMIN_TOKEN_FILE = "admin.token"
TOKEN_ENV = "ANDROID_TOKEN"
CLOSE_UNAUTHORIZED = 4401
CLOSE_REVOKED = 4403
TOKEN_RE = re.compile(r"^[A-Za-z0-9._~-]{32,512}$")
RETIRE_AGAIN_AFTER_S = 1.0

COMMANDS = Counter("hdg_plugin_commands_total", "Device commands handled, by name.", ["cmd"])
REVOCATIONS = Counter("hdg_plugin_device_revocations_total", "Devices revoked.")
ROTATIONS = Counter("hdg_plugin_token_rotations_total", "Pairing-token rotations.")
ADMIN_REFUSED = Counter(
    "hdg_plugin_admin_refused_total", "Admin frames refused (no or wrong admin token)."
)


def admin_token_path(data_dir: Path) -> Path:
    return data_dir / ADMIN_TOKEN_FILE


def load_admin_token(
    data_dir: Path, configured: str | None = None, *, create: bool = False
) -> str | None:
    """``configured`` (the settings' ``ANDROID_ADMIN_TOKEN``, from the environment or a
    secret file), else ``<data_dir>/admin.token`` (created 0600 if asked)."""
    if configured and configured.strip():
        return configured.strip()
    path = admin_token_path(data_dir)
    try:
        value = path.read_text(encoding="utf-8").strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    if not create:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(value + "\n")
    return value


@dataclass
class _AdminState:
    digest: str
    devices: frozenset[str]


_STATE: weakref.WeakKeyDictionary[Controller, _AdminState] = weakref.WeakKeyDictionary()


# -- lifecycle (Controller.start / stop)
def attach(controller: Controller) -> None:
    """Admin credential, log redaction, metrics for one running controller."""
    settings = controller.settings
    admin_token = load_admin_token(controller.data_dir, settings.admin_token_value(), create=True)
    assert admin_token is not None
    logredact.install([controller.token, admin_token])
    _STATE[controller] = _AdminState(token_digest(admin_token), settings.admin_device_ids)
    _CONTROLLERS.add(controller)
    _metrics_server.start_if_configured(settings.metrics_host, settings.metrics_port)


def detach(controller: Controller) -> None:
    _CONTROLLERS.discard(controller)
    _STATE.pop(controller, None)
    if not _CONTROLLERS:
        _metrics_server.stop()
        for task in list(_BACKGROUND):
            task.cancel()


def observe_command(name: str, known: bool, count: int = 1) -> None:
    COMMANDS.labels(cmd=name if known else "unknown").inc(count)


# -- admin frames (CommandHandler.handle)
def _authorized(controller: Controller, command: Json) -> bool:
    state = _STATE.get(controller)
    digest = (command.get("args") or {}).get("admin_digest")
    if state is None or command.get("dialect") != "iris" or not isinstance(digest, str):
        return False
    if not hmac.compare_digest(digest, state.digest):
        return False
    return not state.devices or str(command.get("device_id")) in state.devices


async def handle(controller: Controller, command: Json) -> None:
    name = str(command.get("cmd"))
    request_id = command.get("request_id")
    handler = _HANDLERS.get(name)
    if handler is None:
        await controller.reply(
            command, error_body("unknown_type", f"unknown admin frame {name[:64]!r}", request_id)
        )
        return
    if not _authorized(controller, command):
        ADMIN_REFUSED.inc()
        log.warning("admin frame %s refused for device %s", name, command.get("device_id"))
        await controller.reply(
            command,
            error_body(
                "unauthorized",
                "admin frames need the admin token (docs/operations.md, 'Admin access')",
                request_id,
            ),
        )
        return
    try:
        await handler(controller, command, command.get("args") or {})
    except BusUnavailable:
        await controller.reply(
            command, error_body("unavailable", "the bus is unreachable; retry", request_id)
        )


def _result(command: Json, **body: Any) -> Json:
    return {
        "type": "admin.result",
        "op": command.get("cmd"),
        "request_id": command.get("request_id"),
        **body,
    }


async def _devices_list(controller: Controller, command: Json, args: Json) -> None:
    try:
        online = await controller.bus.presence(controller.tenant)
    except BusUnavailable:
        online = {}
    devices = []
    for device in await run_or_busy(controller.storage.devices, controller.devices.list):
        wire = device.to_wire()
        where = online.get(device.device_id)
        wire["online"] = where is not None
        if where is not None:
            wire["edge"] = where.get("edge")
        devices.append(wire)
    await controller.reply(
        command,
        {"type": "admin.devices", "request_id": command.get("request_id"), "devices": devices},
    )


async def _devices_revoke(controller: Controller, command: Json, args: Json) -> None:
    device_id = str(args.get("device_id") or "")
    revoke = counted(controller, controller.devices.revoke)
    device = await run_or_busy(controller.storage.devices, revoke, device_id)
    if device is None:
        await controller.reply(
            command,
            error_body("not_found", f"no device {device_id[:128]!r}", command.get("request_id")),
        )
        return
    REVOCATIONS.inc()
    log.warning("device %s revoked; closing its sockets on every edge", device_id)
    await controller.reply(command, _result(command, device=device.to_wire()))
    controller.publish(
        [
            {
                "type": "_control",
                "action": "close_device",
                "device_id": device_id,
                "code": CLOSE_REVOKED,
            }
        ]
    )


async def _token_rotate(controller: Controller, command: Json, args: Json) -> None:
    new = args.get("token")
    request_id = command.get("request_id")
    if not isinstance(new, str) or not TOKEN_RE.match(new):
        await controller.reply(
            command,
            error_body(
                "bad_request", "token must be 32-512 characters of [A-Za-z0-9._~-]", request_id
            ),
        )
        return
    old = controller.token
    if hmac.compare_digest(new, old):
        await controller.reply(
            command, error_body("bad_request", "that is the current token", request_id)
        )
        return
    logredact.add_secret(new)
    await controller.bus.register_tenant(controller.tenant, new)
    # From here the heartbeat re-registers the new token, never the old one.
    controller.token = new
    controller.settings.token = SecretStr(new)
    await _save_token(controller, new)
    await _retire(controller, old)
    ROTATIONS.inc()
    log.warning("pairing token rotated; closing every device socket of this tenant")
    await controller.reply(command, _result(command))
    controller.publish([{"type": "_control", "action": "close_all", "code": CLOSE_UNAUTHORIZED}])
    # A heartbeat already in flight when the token changed may re-add the old digest
    # after the first retirement: retire it once more a moment later.
    task = asyncio.get_running_loop().create_task(_retire_later(controller, old))
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


_BACKGROUND: set[asyncio.Task[None]] = set()


async def _save_token(controller: Controller, new: str) -> None:
    """Into the Hermes home's .env, where Hermes and a reconnecting adapter read it (it
    wins over the shell's variable and a secret file): the rotation outlives a restart
    whichever client asked for it. Off the event loop: it is file work."""
    env_file = controller.env_file
    if env_file is None:
        return
    try:
        await asyncio.to_thread(update_env_file, env_file, {TOKEN_ENV: new})
    except OSError as exc:
        log.error(
            "pairing token rotated but not saved to %s (%s): a restart goes back to the old one",
            env_file,
            exc.strerror or exc,
        )


async def _retire(controller: Controller, old: str) -> None:
    await controller.bus.unregister_tenant(controller.tenant, old)
    # unregister also cleared the tenant's liveness: mark it alive again under the new token.
    await controller.bus.register_tenant(controller.tenant, controller.token)


async def _retire_later(controller: Controller, old: str) -> None:
    await asyncio.sleep(RETIRE_AGAIN_AFTER_S)
    if not controller.running or controller.token == old:
        return
    try:
        await _retire(controller, old)
    except BusUnavailable:
        log.warning("could not re-check the old token's retirement (bus unavailable)")


_HANDLERS = {
    "admin.devices.list": _devices_list,
    "admin.devices.revoke": _devices_revoke,
    "admin.token.rotate": _token_rotate,
}


__all__ = [
    "ADMIN_TOKEN_FILE",
    "admin_token_path",
    "attach",
    "detach",
    "handle",
    "load_admin_token",
    "observe_command",
]
