"""Dead peers are reaped: a device that stops answering WebSocket pings is closed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
import urllib.request
from collections.abc import Callable

from tests.e2e.conftest import Deployment

FROZEN_DEVICE = textwrap.dedent(
    """
    import asyncio, sys
    from canonical.client import DeviceClient

    async def main():
        client = await DeviceClient(sys.argv[1]).connect()
        await client.hello_iris(sys.argv[2], "frozen-phone")
        print("ready", flush=True)
        await asyncio.sleep(120)

    asyncio.run(main())
    """
)


def _connections(deployment: Deployment) -> int:
    url = deployment.ws_urls[0].replace("ws://", "http://") + "/readyz"
    with urllib.request.urlopen(url, timeout=2) as response:
        return int(json.loads(response.read())["connections"])


async def test_a_device_that_stops_answering_pings_is_closed(
    embedded: Callable[..., Deployment],
) -> None:
    deployment = embedded(ANDROID_WS_PING_S="1")
    device = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        FROZEN_DEVICE,
        deployment.ws_urls[0] + "/ws",
        deployment.token,
        stdout=asyncio.subprocess.PIPE,
        cwd=os.getcwd(),
        start_new_session=True,
    )
    try:
        assert device.stdout is not None
        assert (await asyncio.wait_for(device.stdout.readline(), 30)).strip() == b"ready"
        assert _connections(deployment) == 1
        os.kill(device.pid, signal.SIGSTOP)  # alive, but deaf: no pong ever comes back
        for _ in range(75):  # ping every 1 s, 1 s to answer: reaped within a few seconds
            if _connections(deployment) == 0:
                break
            await asyncio.sleep(0.2)
        assert _connections(deployment) == 0
    finally:
        os.kill(device.pid, signal.SIGKILL)
        await device.wait()
