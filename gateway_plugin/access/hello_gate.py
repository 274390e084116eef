"""The device gate at hello: each iris hello's device is recorded, and a revoked device's
hello is refused (closed with 4403)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from prometheus_client import Counter

from canonical.model import Json
from canonical.protocol import error_body
from gateway_plugin.access.admin import CLOSE_REVOKED
from gateway_plugin.access.devices import Hello
from gateway_plugin.access.plugin_metrics import counted
from gateway_plugin.storage.threads import run_or_busy

if TYPE_CHECKING:
    from gateway_plugin.controller import Controller

log = logging.getLogger("hdg.plugin.admin")


HELLO_REFUSED = Counter(
    "hdg_plugin_hello_refused_total", "Iris hellos refused by the plugin.", ["reason"]
)


async def on_hellos(controller: Controller, commands: list[Json]) -> list[Json | None]:
    """Record the devices (one transaction, on devices.db's storage thread); per hello,
    the close body refusing it if its device was revoked, else None."""
    revoked = await run_or_busy(
        controller.storage.devices,
        counted(controller, controller.devices.record_hellos),
        [_hello_record(command) for command in commands],
    )
    refusals: list[Json | None] = []
    for command in commands:
        device_id = str(command.get("device_id"))
        if device_id not in revoked:
            refusals.append(None)
            continue
        HELLO_REFUSED.labels(reason="revoked").inc()
        log.info("hello refused: device %s is revoked", device_id)
        request_id = (command.get("args") or {}).get("request_id")
        frame = error_body("unauthorized", "this device was revoked", request_id)
        refusals.append({"code": CLOSE_REVOKED, "frame": frame})
    return refusals


def _hello_record(command: Json) -> Hello:
    args = command.get("args") or {}
    caps = args.get("caps")
    fcm_token = args.get("fcm_token")
    return Hello(
        str(command.get("device_id")),
        str(args.get("device_name") or ""),
        caps if isinstance(caps, list) else [],
        fcm_token if isinstance(fcm_token, str) else None,
    )


__all__ = ["on_hellos"]
