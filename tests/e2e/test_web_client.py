"""The web client (`/app/`) in a real browser: Debian's Chromium driven by Playwright,
against a real gateway with the scripted model, embedded and scaled.

One stack per deployment and one browser for the module; each browser context is a
separate device (its own storage, so its own device id). Screenshots of the main screens
are taken by these tests; with `HDG_SCREENSHOTS=docs/images` they replace the docs' own, so
the docs show what the client shows (otherwise they go to a temporary directory and a test
run leaves the checkout as it was).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import secrets
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from PIL import Image
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

from scripted_model.scenarios import CLARIFY_QUESTION, TOOL_FINAL_TEXT
from tests.e2e.conftest import platform_connected
from tests.e2e.flows import frames_of_run, iris_send
from tests.harness.device import DeviceClient
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import (
    REPO_ROOT,
    EdgeProcess,
    HermesGateway,
    RedisServer,
    ScriptedModel,
    free_port,
    http_ok,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

IMAGES = REPO_ROOT / os.environ.get(
    "HDG_SCREENSHOTS", str(Path(tempfile.gettempdir()) / "hdg-screenshots")
)
# Another site's origin in the allowlist: the page's own origin must still be accepted.
FOREIGN_ORIGIN = "https://app.example.org"


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("Debian's chromium is required (scripts/test installs it)")


@dataclass
class Stack:
    token: str
    urls: list[str]  # http base URLs of the edges (or of the proxy in front of them)
    gateway: HermesGateway
    edges: list[EdgeProcess] = field(default_factory=list)
    clients: list[DeviceClient] = field(default_factory=list)

    @property
    def link(self) -> str:
        return f"{self.urls[0]}/app/#token={self.token}"

    async def iris(self, device_id: str, base: str | None = None) -> DeviceClient:
        url = (base or self.urls[0]).replace("http://", "ws://") + "/ws"
        client = await DeviceClient(url).connect()
        self.clients.append(client)
        ack = await client.hello_iris(self.token, device_id)
        assert ack["type"] == "hello.ack", ack
        return client


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        # --no-sandbox: tests run as root, where Chromium's sandbox refuses to start.
        launched = await pw.chromium.launch(
            executable_path=chromium_path(), headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture(scope="module")
def embedded_stack(
    tmp_path_factory: pytest.TempPathFactory, scripted_model: ScriptedModel
) -> Iterator[Stack]:
    home = HermesHome(scripted_model.base_url, path=tmp_path_factory.mktemp("web-home"))
    token = secrets.token_urlsafe(32)
    port = free_port()
    gateway = HermesGateway(
        home,
        env={
            "ANDROID_TOKEN": token,
            "ANDROID_WS_PORT": str(port),
            "ANDROID_ALLOWED_ORIGINS": FOREIGN_ORIGIN,
        },
    ).start()
    try:
        gateway.wait_ready(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=90)
        yield Stack(token, [f"http://127.0.0.1:{port}"], gateway)
    finally:
        gateway.stop()


async def paired_page(
    browser: Browser, stack: Stack, **options: Any
) -> tuple[BrowserContext, Page]:
    context = await browser.new_context(**options)
    page = await context.new_page()
    # Uncaught exceptions in the client (a refused WebSocket while offline is expected
    # and only logged by the browser).
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(stack.link)
    await expect(page.locator("#conn")).to_have_attribute("data-state", "online", timeout=20000)
    page.errors = errors  # type: ignore[attr-defined]
    return context, page


async def send(page: Page, text: str) -> None:
    box = page.locator("#composer-text")
    await box.fill(text)
    await box.press("Enter")


def reply(page: Page, text: str) -> Any:
    return page.locator("article.msg.assistant:not([aria-busy])", has_text=text)


async def shot(page: Page, name: str) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    path = IMAGES / name
    await page.screenshot(path=str(path))
    # Committed with the docs: keep the repository light.
    assert path.stat().st_size < 400_000, path


# -- embedded


async def test_pairing_from_the_link_streams_a_tool_turn(
    browser: Browser, embedded_stack: Stack
) -> None:
    context, page = await paired_page(browser, embedded_stack)
    try:
        # The token left the address bar, and is kept for this origin.
        assert "token" not in page.url
        stored = await page.evaluate("localStorage.getItem('hdg.token')")
        assert stored == embedded_stack.token
        await expect(page.locator(".lane-btn[aria-current=page]")).to_be_visible()

        await send(page, "[tool] say hello")
        await expect(page.locator(".tool[data-status=completed]").first).to_contain_text(
            "terminal", timeout=60000
        )
        await expect(reply(page, TOOL_FINAL_TEXT)).to_be_visible(timeout=60000)
        # The user's own message shows once: the local echo and the gateway's are one.
        await expect(page.locator("article.msg.user", has_text="say hello")).to_have_count(1)
        await expect(page.locator("#stop-btn")).to_be_hidden()
        await shot(page, "web-chat.png")

        # A reload keeps the pairing and shows the transcript.
        await page.reload()
        await expect(page.locator("#conn")).to_have_attribute("data-state", "online")
        await expect(page.locator("article.msg", has_text=TOOL_FINAL_TEXT)).to_be_visible()
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        await context.close()


async def test_a_wrong_token_shows_the_pairing_screen(
    browser: Browser, embedded_stack: Stack
) -> None:
    context = await browser.new_context()
    try:
        page = await context.new_page()
        await page.goto(f"{embedded_stack.urls[0]}/app/#token={'x' * 43}")
        await expect(page.locator("#pair-screen")).to_be_visible(timeout=20000)
        await expect(page.locator("#pair-reason")).to_contain_text("refused this token")
        assert await page.evaluate("localStorage.getItem('hdg.token')") is None
        await shot(page, "web-pair.png")
        # Pairing from the form with the right token works without a reload.
        await page.locator("#pair-input").fill(f"{embedded_stack.link}")
        await page.locator("#pair-input").press("Enter")
        await expect(page.locator("#conn")).to_have_attribute("data-state", "online")
    finally:
        await context.close()


async def test_hostile_model_text_is_rendered_inert(
    browser: Browser, embedded_stack: Stack
) -> None:
    context, page = await paired_page(browser, embedded_stack)
    try:
        await send(page, "[hostile] render this")
        message = reply(page, "Hostile")
        await expect(message).to_be_visible(timeout=60000)
        body = message.locator(".body")
        # The markup is text, the safe markdown is markup.
        await expect(body).to_contain_text('<img src=x onerror="window.__hdgPwned=1">')
        await expect(body).to_contain_text("<script>")
        await expect(body.locator("strong")).to_have_text("bold")
        await expect(body.locator("code")).to_have_text("<b>code</b>")
        assert await body.locator("img, script, b").count() == 0
        links = body.locator("a")
        await expect(links).to_have_count(1)
        assert await links.get_attribute("href") == "https://example.org/docs"
        await expect(body).to_contain_text("[click me](javascript:window.__hdgPwned=3)")
        assert await page.evaluate("window.__hdgPwned") is None
    finally:
        await context.close()


async def test_an_approval_answered_in_one_tab_closes_in_the_other(
    browser: Browser, embedded_stack: Stack
) -> None:
    context_a, tab_a = await paired_page(browser, embedded_stack)
    context_b, tab_b = await paired_page(browser, embedded_stack)
    try:
        await send(tab_a, "[danger] clean up")
        card_a = tab_a.locator(".picker[data-kind=approval]").last
        card_b = tab_b.locator(".picker[data-kind=approval]").last
        await expect(card_a).to_contain_text("rm -rf", timeout=60000)
        await expect(card_b.locator("button[data-value=once]")).to_be_visible()
        await shot(tab_a, "web-approval.png")
        await card_a.locator("button[data-value=once]").click()
        # Tab B (another device) sees it closed, answered elsewhere.
        await expect(card_b).to_have_attribute("data-state", "resolved")
        await expect(card_b.locator("button")).to_have_count(0)
        await expect(card_b).to_contain_text("once")
        done = "The dangerous command was handled"
        await expect(reply(tab_a, done)).to_be_visible(timeout=60000)
        await expect(reply(tab_b, done)).to_be_visible(timeout=60000)
        # Both devices show the same run in the same order.
        order = (
            "(root) => [...root.querySelectorAll('article.msg, .picker, .tool')]"
            ".slice(-4).map((n) => n.dataset.mid || n.dataset.kind || 'tool')"
        )
        lane_a = tab_a.locator(".lane")
        lane_b = tab_b.locator(".lane")
        assert await lane_a.evaluate(order) == await lane_b.evaluate(order)
    finally:
        await context_a.close()
        await context_b.close()


async def test_a_clarification_is_answered_with_free_text(
    browser: Browser, embedded_stack: Stack
) -> None:
    context, page = await paired_page(browser, embedded_stack)
    try:
        await send(page, "[clarify] pick one")
        card = page.locator(".picker[data-kind=clarify]").last
        await expect(card).to_contain_text(CLARIFY_QUESTION, timeout=60000)
        await card.get_by_label("Other answer").fill("teal")
        await card.get_by_label("Other answer").press("Enter")
        await expect(card).to_have_attribute("data-state", "resolved")
        await expect(reply(page, "You picked: teal")).to_be_visible(timeout=60000)
    finally:
        await context.close()


async def test_search_finds_a_message_and_jumps_to_it(
    browser: Browser, embedded_stack: Stack
) -> None:
    context, page = await paired_page(browser, embedded_stack)
    word = f"zucchini{uuid.uuid4().hex[:6]}"
    try:
        await send(page, f"remember the {word} please")
        await expect(reply(page, word)).to_be_visible(timeout=60000)
        for i in range(3):  # push it up the page
            await send(page, f"filler message {i}")
            await expect(reply(page, f"filler message {i}")).to_be_visible(timeout=60000)
        await page.locator("#search-input").fill(word)
        await page.locator("#search-input").press("Enter")
        hits = page.locator("#search-results button.hit")
        await expect(hits.first).to_be_visible(timeout=20000)
        await expect(hits.first.locator("mark").first).to_contain_text(word)
        await shot(page, "web-search.png")
        await hits.last.click()
        jumped = page.locator("article.msg.jumped")
        await expect(jumped).to_have_count(1)
        await expect(jumped).to_contain_text(word)
        await expect(jumped).to_be_focused()
        await expect(jumped).to_be_in_viewport()
    finally:
        await context.close()


def _png(side: int = 96) -> bytes:
    image = Image.new("RGB", (side, side), (34, 81, 201))
    for x in range(side):
        image.putpixel((x, x), (255, 158, 27))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


async def test_an_uploaded_image_shows_its_thumbnail(
    browser: Browser, embedded_stack: Stack
) -> None:
    context, page = await paired_page(browser, embedded_stack)
    try:
        await page.locator("#file-input").set_input_files(
            {"name": "chart.png", "mimeType": "image/png", "buffer": _png()}
        )
        upload = page.locator(".upload[data-file='chart.png']")
        await expect(upload).to_have_attribute("data-state", "ready", timeout=30000)
        assert await upload.locator("progress").evaluate("(p) => p.value === p.max")
        await send(page, "what is in this picture?")
        thumb = page.locator("article.msg.user img[data-variant=thumbnail]")
        await expect(thumb).to_have_attribute("alt", "chart.png", timeout=60000)
        assert await thumb.evaluate("(img) => img.complete && img.naturalWidth > 0")
        await expect(page.locator("#stop-btn")).to_be_hidden(timeout=60000)
        await shot(page, "web-media.png")
    finally:
        await context.close()


async def test_the_client_is_accessible_by_keyboard_and_on_a_phone(
    browser: Browser, embedded_stack: Stack
) -> None:
    from axe_playwright_python.async_playwright import Axe

    context, page = await paired_page(
        browser, embedded_stack, viewport={"width": 390, "height": 844}, is_mobile=True
    )
    try:
        # Keyboard only: skip link to the message box, type, Enter sends.
        await page.keyboard.press("Tab")
        await expect(page.locator(".skip")).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(page.locator("#composer-text")).to_be_focused()
        await page.keyboard.type("typed without a mouse")
        await page.keyboard.press("Enter")
        await expect(reply(page, "typed without a mouse")).to_be_visible(timeout=60000)
        await shot(page, "web-phone.png")
        # The channel drawer opens from the keyboard on a narrow screen.
        await page.locator("#nav-toggle").focus()
        await page.keyboard.press("Enter")
        await expect(page.locator("#sidebar")).to_be_visible()
        await expect(page.locator("#nav-toggle")).to_have_attribute("aria-expanded", "true")
        await expect(page.locator("#chat")).to_be_hidden()
        await page.keyboard.press("Enter")
        results = await Axe().run(page)
        assert results.violations_count == 0, results.generate_report()
    finally:
        await context.close()


# -- scaled: the tab's edge dies; the tab reconnects through the same address and catches up


class Balancer:
    """A TCP load balancer in front of the edges, as a deployment has: each new
    connection goes to the first edge that is up. `hold()` refuses connections
    (a network drop) until `release()`."""

    def __init__(self, edges: list[EdgeProcess]) -> None:
        self.edges = edges
        self.held = False
        self.server: asyncio.Server | None = None
        self.port = 0
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> Balancer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = next((e for e in self.edges if e.running), None)
        if self.held or upstream is None:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(upstream.host, upstream.port)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)


@pytest.fixture(scope="module")
def scaled_stack(
    tmp_path_factory: pytest.TempPathFactory,
    scripted_model: ScriptedModel,
    redis_server: RedisServer,
) -> Iterator[Stack]:
    home = HermesHome(scripted_model.base_url, path=tmp_path_factory.mktemp("web-scaled-home"))
    token = secrets.token_urlsafe(32)
    gateway = HermesGateway(
        home, env={"ANDROID_TOKEN": token, "ANDROID_BUS_URL": redis_server.url}
    ).start()
    edges: list[EdgeProcess] = []
    try:
        for i in range(2):
            edges.append(
                EdgeProcess(
                    env={"ANDROID_BUS_URL": redis_server.url, "ANDROID_WS_HOST": "127.0.0.1"},
                    port_env="ANDROID_WS_PORT",
                    workdir=tmp_path_factory.mktemp(f"web-edge-{i}"),
                ).start()
            )
        gateway.wait_ready(platform_connected(gateway), timeout=90)  # type: ignore[arg-type]
        yield Stack(token, [e.url for e in edges], gateway, edges)
    finally:
        for edge in edges:
            edge.stop()
        gateway.stop()


async def test_the_tab_reconnects_to_another_edge_and_catches_up(
    browser: Browser, scaled_stack: Stack
) -> None:
    balancer = await Balancer(scaled_stack.edges).start()
    stack = Stack(scaled_stack.token, [balancer.url], scaled_stack.gateway, scaled_stack.edges)
    context, page = await paired_page(browser, stack)
    phone = await scaled_stack.iris("phone-web-test", scaled_stack.urls[1])
    try:
        await send(page, "[tool] before the drop")
        await expect(reply(page, TOOL_FINAL_TEXT)).to_be_visible(timeout=60000)

        # The tab's edge dies while the network is down: the tab shows it is offline.
        balancer.held = True
        scaled_stack.edges[0].kill9()
        await expect(page.locator("#conn")).not_to_have_attribute(
            "data-state", "online", timeout=20000
        )
        await shot(page, "web-offline.png")
        # Meanwhile another device runs a turn in the same channel.
        ack = await iris_send(phone, "android:default", "[tool] while you were away")
        assert ack["type"] == "message.ack", ack
        await frames_of_run(phone, ack["run_id"])

        balancer.held = False  # the balancer now sends the tab to the surviving edge
        await expect(page.locator("#conn")).to_have_attribute("data-state", "online", timeout=30000)
        await expect(
            page.locator("article.msg.user", has_text="while you were away")
        ).to_have_count(1, timeout=20000)
        # Caught up from its cursor: the missed turn once, nothing doubled.
        await expect(reply(page, TOOL_FINAL_TEXT)).to_have_count(2, timeout=20000)
        await expect(page.locator("article.msg.user", has_text="before the drop")).to_have_count(1)
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        await context.close()
        await balancer.close()
        if not scaled_stack.edges[0].running:
            scaled_stack.edges[0].start()
