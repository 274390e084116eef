"""The web client's static routes and the same-origin rule for its WebSocket."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette

from edge import web
from edge.app import same_origin


def _client() -> httpx.AsyncClient:
    app = Starlette(routes=web.routes())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge")


async def test_the_page_and_its_modules_are_served_with_a_strict_csp() -> None:
    async with _client() as client:
        await _check_served(client)


async def _check_served(client: httpx.AsyncClient) -> None:
    page = await client.get("/app/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    for name in ("app.js", "md.js", "sha256.js"):
        module = await client.get(f"/app/{name}")
        assert module.status_code == 200
        assert module.headers["content-type"].startswith("text/javascript")
        assert "innerHTML" not in module.text
    assert (await client.get("/app")).headers["location"] == "/app/"


async def test_only_listed_files_are_served() -> None:
    async with _client() as client:
        for path in ("/app/..%2Fweb.py", "/app/%2e%2e/app.py", "/app/nope.js", "/app/web.py"):
            assert (await client.get(path)).status_code == 404, path


def test_same_origin_compares_the_origin_with_the_host_dialled() -> None:
    assert same_origin("http://127.0.0.1:8790", "127.0.0.1:8790")
    assert same_origin("https://gw.example.org", "gw.example.org:443")
    assert same_origin("http://GW.example.org:80", "gw.example.org")
    assert same_origin("http://[::1]:8790", "[::1]:8790")
    assert not same_origin("http://evil.example:8790", "127.0.0.1:8790")
    assert not same_origin("http://127.0.0.1:8791", "127.0.0.1:8790")
    assert not same_origin("null", "127.0.0.1:8790")
    assert not same_origin("http://127.0.0.1:8790", None)
