"""The README's scaled-mode block, run as written: its lines are a complete set-up.

Only what differs on a test machine is replaced: the Redis URL (a private server), the two
edge ports (free ones), the attachments directory and the Hermes home (this test's), and
`.venv/bin/` (the interpreter running the tests). Then a device streams a turn through
edge 1 and uploads a file through edge 2, which needs the attachments directory the block
exports.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from canonical import hermes_home as homes
from tests.e2e.flows import default_conversation, iris_send
from tests.harness.device import DeviceClient
from tests.harness.proc import REPO_ROOT, ManagedProcess, free_port, http_ok, scrubbed_environ
from tests.harness.processes import RedisServer

pytestmark = pytest.mark.timeout(240)


def readme_block() -> str:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Scaled mode") :]
    match = re.search(r"```\n(.*?)```", section, re.DOTALL)
    assert match, "the scaled-mode section has a command block"
    return match.group(1)


class ReadmeStack:
    def __init__(self, redis: RedisServer, workdir: Path) -> None:
        self.ports = (free_port(), free_port())
        self.home = workdir / "hermes-home"
        self.attachments = workdir / "attachments"
        block = readme_block()
        for needed in ("ANDROID_BUS_URL=redis://127.0.0.1:6379/0", "ANDROID_ATTACHMENTS_DIR"):
            assert needed in block
        script = (
            block.replace("redis://127.0.0.1:6379/0", redis.url)
            .replace("8801", str(self.ports[0]))
            .replace("8802", str(self.ports[1]))
            .replace("$PWD/.run/attachments", str(self.attachments))
            .replace(".run/hermes-home", str(self.home))
            .replace(".venv/bin/", f"{sys.prefix}/bin/")
        )
        (workdir / "scaled.sh").write_text(script + "wait\n", encoding="utf-8")
        self.process = ManagedProcess(
            "readme-scaled",
            ["bash", str(workdir / "scaled.sh")],
            log_path=workdir / "scaled.log",
            env=scrubbed_environ(),
            cwd=REPO_ROOT,
        )

    def edge(self, n: int) -> str:
        return f"127.0.0.1:{self.ports[n]}"

    def platform_connected(self) -> bool:
        """Hermes says the android platform is up: the plugin has registered its tenant."""
        try:
            state = json.loads((self.home / "gateway_state.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return bool(state.get("platforms", {}).get("android", {}).get("state") == "connected")

    def token(self) -> str:
        return str(homes.read_env(self.home)["ANDROID_TOKEN"])


@pytest.fixture
def stack(redis_factory: Callable[..., RedisServer], tmp_path: Path) -> Iterator[ReadmeStack]:
    stack = ReadmeStack(redis_factory(), tmp_path)
    stack.process.start()
    try:
        stack.process.wait_until(
            lambda: (
                stack.platform_connected()
                and all(http_ok(f"http://{stack.edge(n)}/readyz") for n in (0, 1))
            ),
            90,
            interval=0.2,
            what="the plugin connected and both edges ready",
        )
        yield stack
    finally:
        stack.process.stop(timeout=20)


async def test_the_readme_scaled_block_serves_a_turn_and_an_upload(stack: ReadmeStack) -> None:
    phone = await DeviceClient(f"ws://{stack.edge(0)}/ws").connect()
    try:
        ack = await phone.hello_iris(stack.token(), "readme-phone")
        assert ack["type"] == "hello.ack", ack
        sent = await iris_send(phone, "android:default", "[tool] from the README")
        assert sent["type"] == "message.ack", sent
        finished = await phone.wait_type("run.finished", timeout=120, run_id=sent["run_id"])
        assert finished["status"] == "completed"
    finally:
        await phone.close()

    # A client says hello as soon as its socket opens (the edge closes a silent one
    # after 10 s), so the second device connects only once the turn is over.
    tablet = await DeviceClient(f"ws://{stack.edge(1)}/ws").connect()
    try:
        assert (await tablet.hello_pheby(stack.token()))["type"] == "ready"
        conversation_id = await default_conversation(tablet)
        body = b"uploaded through edge 2\n" * 100
        async with httpx.AsyncClient(base_url=f"http://{stack.edge(1)}", timeout=60) as http:
            uploaded = await http.post(
                "/attachments",
                params={"conversation_id": conversation_id, "filename": "notes.txt"},
                content=body,
                headers={"Authorization": f"Bearer {stack.token()}"},
            )
        assert uploaded.status_code == 201, uploaded.text
        assert any(stack.attachments.rglob("*")), "stored in the exported directory"
    finally:
        await tablet.close()
