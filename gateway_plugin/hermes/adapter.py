"""The `android` platform adapter: a thin shell between Hermes and the Controller.

Hermes calls these methods on its event loop; each turns into a controller call. Here:
the lifecycle (connect, the embedded edge, disconnect) and text, typing and processing
events. The decisions Hermes waits for are `adapter_decisions.DecisionSendsMixin`, the
AgentPort through which the controller reaches Hermes is `agent_port.AgentPortMixin`, the
media sends (files stored as attachments) are `adapter_media.MediaSendsMixin`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from canonical import fastpath
from canonical.bus import open_bus
from canonical.errors import BusUnavailable, SettingsError
from canonical.model import Lane
from canonical.protocol import now_iso
from canonical.sentinel import bus_url_for_display
from canonical.settings import GatewaySettings, require_token
from gateway_plugin.channels.store import ChannelError
from gateway_plugin.controller import Controller
from gateway_plugin.hermes import bridge as hb
from gateway_plugin.hermes import contract, hooks, state_db
from gateway_plugin.hermes import runner as hr
from gateway_plugin.hermes.adapter_decisions import DecisionSendsMixin
from gateway_plugin.hermes.adapter_media import MediaSendsMixin
from gateway_plugin.hermes.agent_port import HOOKED, INLINE, AgentPortMixin
from gateway_plugin.shutdown import UNBOUNDED, Deadline, disconnect_budget

log = logging.getLogger("hdg.plugin")
# The embedded edge closes its devices with 1001 and waits for them (uvicorn: 5 s at most).
EDGE_STOP_WAIT_S = 8.0

SendResult = hb.SendResult


class AndroidAdapter(
    DecisionSendsMixin,
    AgentPortMixin,
    MediaSendsMixin,
    hb.BasePlatformAdapter,  # type: ignore[misc]
):
    """The `android` platform: Hermes on one side, the device bus on the other."""

    SUPPORTS_MESSAGE_EDITING = True
    MAX_MESSAGE_LENGTH = 0
    supports_code_blocks = True

    def __init__(self, config: hb.PlatformConfig) -> None:
        super().__init__(config, hb.Platform(hb.PLATFORM))
        self.hdg_settings = hb.settings_from(config)
        self.controller: Controller | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._server_task: asyncio.Task[None] | None = None
        self._captures: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._locked: tuple[str, str, int, bool] | None = None

    @property
    def authorization_is_upstream(self) -> bool:
        # The edge verified the token (constant time, lockout) and the controller checks
        # the device allowlist at hello; Hermes' own allowlist would deny by default.
        return True

    # -- lifecycle
    async def connect(self, *, is_reconnect: bool = False) -> bool:
        if not self._hermes_supported():
            return False
        settings = self.hdg_settings
        try:
            token = require_token(settings)
        except SettingsError as exc:
            self._set_fatal_error("config_invalid", str(exc), retryable=False)
            return False
        home = Path(hb.get_hermes_home())
        # Two profiles (or two gateways) must never serve the same token or port.
        held = hb.acquire_locks(
            token, settings.ws_host, settings.ws_port, embedded=settings.embedded
        )
        if held is not None:
            self._set_fatal_error("lock_held", held, retryable=False)
            return False
        self._locked = (token, settings.ws_host, settings.ws_port, settings.embedded)
        data_dir = settings.data_dir or home / hb.PLATFORM
        fastpath.configure(settings.fastpath)
        bus = open_bus(settings.bus_url, settings.redis_timeouts())
        self.loop = asyncio.get_running_loop()
        # Opening the plugin's SQLite files (schemas, first reads) waits on any lock
        # another process holds: on a thread, not on the loop.
        self.controller = await asyncio.to_thread(
            Controller,
            settings,
            bus,
            tenant=hb.tenant_for(settings, home),
            token=token,
            data_dir=data_dir,
            state_db=home / "state.db",
            agent=self,
            env_file=home / ".env",
        )
        try:
            await self.controller.start()
        except BusUnavailable as exc:
            self._set_fatal_error(
                "bus_unavailable",
                f"cannot reach {bus_url_for_display(settings.bus_url)}: {exc}",
                retryable=True,
            )
            return False
        # Before Hermes' start-up restore runs (after every platform connected): it may
        # resume only the turns the outbox says were unfinished, not every recent session.
        store = getattr(self, "_session_store", None)
        try:
            kept_out = await asyncio.to_thread(
                hr.keep_resumes_of, store, self.controller.orphans.unfinished_lanes()
            )
        except Exception:
            log.exception("could not narrow Hermes' start-up resume to unfinished runs")
        else:
            if kept_out:
                log.info("%d finished conversations will not be resumed by Hermes", kept_out)
        # The edge opens only once the tenant is registered, so a device's first hello works.
        if settings.embedded and not await self._start_embedded_edge(settings, bus):
            await self.controller.stop()
            self.controller = None
            return False
        hooks.ADAPTERS.append(self)
        if settings.allow_all_users:
            log.warning(
                "ANDROID_ALLOW_ALL_USERS is on: any device with the token may connect (dev only)"
            )
        self._mark_connected()
        return True

    def _hermes_supported(self) -> bool:
        """The Hermes internals of `contract` against this Hermes and the live objects it
        wired in (getattr only, no I/O). A missing load-bearing one stops the platform
        with one error line; any other switches its feature off (logged)."""
        contract.reset()
        state_db.forget_schema_checks()
        mismatches = contract.check(
            adapter=self, runner=self.runner, session_store=getattr(self, "_session_store", None)
        )
        try:
            contract.apply(mismatches)
        except contract.HermesUnsupported as exc:
            report = getattr(self, "_set_fatal_error", None)  # itself on the list
            if callable(report):
                report("hermes_unsupported", str(exc), retryable=False)
            return False
        return True

    async def _start_embedded_edge(self, settings: GatewaySettings, bus: Any) -> bool:
        from edge.app import build_app
        from edge.server import EmbeddedServer, bind_check, make_state, uvicorn_config

        try:
            bind_check(settings.ws_host, settings.ws_port)
        except OSError as exc:
            self._set_fatal_error(
                "bind_failed",
                f"cannot listen on {settings.ws_host}:{settings.ws_port} ({exc.strerror}); set ANDROID_WS_PORT",
                retryable=True,
            )
            return False
        assert self.controller is not None
        # The embedded edge writes uploads where this plugin's registry reads them.
        storage = self.controller.attachments.storage_root
        state = make_state(settings.model_copy(update={"attachments_dir": storage}), bus)
        self._server = EmbeddedServer(uvicorn_config(build_app(state), settings))
        self._server_task = asyncio.create_task(self._server.serve(), name="hdg-embedded-edge")
        for _ in range(200):
            if self._server.started or self._server_task.done():
                break
            await asyncio.sleep(0.025)
        if not self._server.started:
            self._set_fatal_error(
                "bind_failed",
                f"edge did not start on {settings.ws_host}:{settings.ws_port}",
                retryable=True,
            )
            return False
        log.info("android edge listening on %s:%d (embedded)", settings.ws_host, settings.ws_port)
        return True

    async def _stop_embedded_edge(self, deadline: Deadline = UNBOUNDED) -> None:
        if self._server is not None:
            self._server.should_exit = True
            if self._server_task is not None:
                wait = deadline.left(EDGE_STOP_WAIT_S)
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(self._server_task, wait)
            self._server = None

    async def disconnect(self) -> None:
        # Within the time Hermes allows (shutdown.py): past it Hermes cancels this, and
        # nothing after the wait that overran would be closed in order.
        deadline = Deadline(disconnect_budget(os.environ))
        await self._stop_embedded_edge(deadline)
        if self.controller is not None:
            await self.controller.stop(deadline)
        if self._locked is not None:
            hb.release_locks(*self._locked)
            self._locked = None
        if self in hooks.ADAPTERS:
            hooks.ADAPTERS.remove(self)
        self._mark_disconnected()

    # -- lanes
    def _lane(self, chat_id: str, metadata: dict[str, Any] | None) -> Lane | None:
        assert self.controller is not None
        chat_id = hb.delivery_chat_id(chat_id, self.hdg_settings)
        thread_id = (metadata or {}).get("thread_id")
        if thread_id:
            return (chat_id, str(thread_id))
        if self.controller.channels.get(chat_id, None) is not None:
            return (chat_id, None)
        try:
            # Cron passes "<chat>:<thread>" as one chat id, or a channel name.
            entry = self.controller.channels.resolve_target(chat_id)
        except ChannelError as exc:
            log.error(
                "android: no channel for delivery target %r (%s); not delivered", chat_id, exc
            )
            return None
        return (entry.chat_id, entry.thread_id)

    def source_for(self, lane: Lane, user_id: str = "device") -> Any:
        name = lane[0]
        if self.controller is not None:
            entry = self.controller.channels.get(lane[0], lane[1])
            name = entry.name if entry else name
        return self.build_source(
            chat_id=lane[0],
            chat_name=name,
            chat_type="dm",
            user_id=user_id,
            user_name=user_id,
            thread_id=lane[1],
        )

    # -- Hermes → devices
    async def send(
        self,
        chat_id: str,
        content: str,
        reply_to: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Any:
        return self._deliver_text(chat_id, content, metadata, status=False)

    async def edit_message(
        self, chat_id: str, message_id: str, content: str, *, finalize: bool = False
    ) -> Any:
        if self.controller is None:
            return SendResult(success=False, error="android adapter is not connected")
        self.controller.on_edit(message_id, content, finalize=finalize)
        return SendResult(success=True, message_id=message_id)

    async def send_or_update_status(
        self,
        chat_id: str,
        status_key: str,
        content: str,
        metadata: dict[str, Any] | None = None,
    ) -> Any:
        """Hermes' status callback (lifecycle messages: retries, a provider failure).
        Without this method Hermes sends them with `send`, indistinguishable from text."""
        return self._deliver_text(chat_id, content, metadata, status=True)

    def _deliver_text(
        self, chat_id: str, content: str, metadata: dict[str, Any] | None, *, status: bool
    ) -> Any:
        """Text (or, with `status`, a Hermes status message) into the lane of `chat_id`."""
        if self.controller is None:
            return SendResult(
                success=False, error="android adapter is not connected", retryable=True
            )
        lane = self._lane(chat_id, metadata)
        if lane is None:
            return SendResult(success=False, error=f"unknown android target {chat_id!r}")
        deliver = self.controller.on_status if status else self.controller.on_send
        try:
            message_id = deliver(lane, content, metadata)
        except ChannelError as exc:  # an archived or unknown lane: not delivered anywhere
            log.error("android: delivery to %r refused: %s", chat_id, exc)
            return SendResult(success=False, error=str(exc))
        return SendResult(success=True, message_id=message_id)

    async def send_typing(self, chat_id: str, metadata: dict[str, Any] | None = None) -> None:
        if self.controller is None:
            return
        lane = self._lane(chat_id, metadata)
        if lane is not None:
            self.controller.typing(lane, True)

    async def stop_typing(self, chat_id: str, metadata: dict[str, Any] | None = None) -> None:
        if self.controller is None:
            return
        lane = self._lane(chat_id, metadata) if metadata else (chat_id, None)
        if lane is not None:
            self.controller.typing(lane, False)

    async def get_chat_info(self, chat_id: str) -> dict[str, Any]:
        chat_id = hb.delivery_chat_id(chat_id, self.hdg_settings)
        entry = self.controller.channels.get(chat_id, None) if self.controller else None
        return {"name": entry.name if entry else chat_id, "type": "dm"}

    def set_message_handler(self, handler: Callable[[Any], Awaitable[Any]]) -> None:
        """Hermes' handler, noting each event of a run it is called for without the
        processing hooks first: nothing else would end that run (`AgentPortMixin.submit`)."""

        async def handle(event: Any) -> Any:
            meta = event.metadata
            if isinstance(meta, dict) and meta.get("hdg_run_id") and not meta.get(HOOKED):
                meta[INLINE] = True
            return await handler(event)

        super().set_message_handler(handle)

    async def on_processing_start(self, event: Any) -> None:
        if self.controller is None or event.source is None:
            return
        lane = (str(event.source.chat_id), event.source.thread_id)
        run_id = (event.metadata or {}).get("hdg_run_id")
        if run_id is not None:
            event.metadata[HOOKED] = True
        self.controller.on_processing_start(lane, run_id)
        if run_id is not None and self.controller.cancels.cancelled.get(lane) == run_id:
            # Cancelled before Hermes took it up (it waited behind another turn, whose
            # signal Hermes clears): this turn starts interrupted.
            await self.interrupt(lane, user_id=str(event.source.user_id or "device"))

    async def on_processing_complete(self, event: Any, outcome: Any) -> None:
        if self.controller is None or event.source is None:
            return
        lane = (str(event.source.chat_id), event.source.thread_id)
        self.controller.on_processing_complete(
            lane, (event.metadata or {}).get("hdg_run_id"), outcome.value
        )


__all__ = ["AndroidAdapter", "now_iso"]
