"""`hdgctl chat`: a terminal device (iris dialect) — connect, send, watch the stream."""

from __future__ import annotations

import asyncio
import socket
import ssl as ssl_module
import sys
import uuid
from typing import TextIO

from canonical.client import DeviceClient
from canonical.model import Json


def render(frame: Json, out: TextIO) -> None:
    kind = frame.get("type")
    if kind == "message.update":
        out.write("\r\x1b[K… " + str(frame.get("text", "")).replace("\n", " ")[-160:])
    elif kind == "message":
        role = frame.get("role")
        if role == "user":
            return
        tag = "notice" if frame.get("kind") == "notice" else "agent"
        out.write(f"\r\x1b[K[{tag}] {frame.get('text', '').strip()}\n")
    elif kind in ("tool.start", "tool.end"):
        out.write(f"\r\x1b[K  · {frame.get('tool_name')} {frame.get('status')}\n")
    elif kind == "run.finished":
        out.write(f"  (run {frame.get('status')})\n> ")
    elif kind == "error":
        out.write(f"\r\x1b[K! {frame['error']['code']}: {frame['error']['message']}\n> ")
    elif kind and kind.startswith("channel."):
        entry = frame.get("entry", {})
        out.write(f"\r\x1b[K# {kind} {entry.get('name')}\n")
    out.flush()


async def _follow(client: DeviceClient, out: TextIO, stop: asyncio.Event) -> None:
    index = 0
    while not stop.is_set():
        try:
            await client.wait_for(lambda f: True, timeout=0.5, start=index)
        except TimeoutError:
            continue
        except ConnectionError:
            out.write("\nconnection closed\n")
            stop.set()
            return
        while index < len(client.frames):
            render(client.frames[index], out)
            index += 1


async def run_chat(
    url: str,
    token: str,
    *,
    chat_id: str,
    once: str | None,
    device_id: str | None,
    out: TextIO = sys.stdout,
    ssl: ssl_module.SSLContext | None = None,
) -> int:
    client = await DeviceClient(url, ssl=ssl).connect()
    device = device_id or f"terminal-{socket.gethostname()}"
    ack = await client.hello_iris(token, device, device_name="hdgctl chat")
    if ack.get("type") != "hello.ack":
        out.write(f"refused: {ack.get('error')}\n")
        await client.close()
        return 1
    names = ", ".join(str(c.get("name")) for c in ack.get("channels", []))
    out.write(f"connected to {url} as {device}; channels: {names}\n")
    stop = asyncio.Event()
    follower = asyncio.create_task(_follow(client, out, stop))
    try:
        if once is not None:
            client_id = f"c-{uuid.uuid4().hex}"
            start = len(client.frames)
            await client.send(
                {"type": "message.send", "chat_id": chat_id, "text": once, "client_id": client_id}
            )
            ack_frame = await client.wait_for(
                lambda f: (
                    f.get("client_id") == client_id and f.get("type") in ("message.ack", "error")
                ),
                30,
                start,
            )
            if ack_frame["type"] == "error":
                return 1
            await client.wait_type(
                "run.finished", timeout=300, start=start, run_id=ack_frame["run_id"]
            )
            await asyncio.sleep(0.1)
            return 0
        out.write("> ")
        out.flush()
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            text = line.rstrip("\n")
            if text.strip():
                await client.send(
                    {
                        "type": "message.send",
                        "chat_id": chat_id,
                        "text": text,
                        "client_id": f"c-{uuid.uuid4().hex}",
                    }
                )
        return 0
    finally:
        stop.set()
        follower.cancel()
        await client.close()
