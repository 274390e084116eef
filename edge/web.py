"""The web client: static files under `/app/` on the edge's own port.

Plain ES modules and hand-written CSS, shipped in the package (`edge/web_static/`): no
build step and nothing fetched from elsewhere at run time, so LAN/VPN deployments work.
Every response carries a strict Content-Security-Policy: scripts only from this origin
(no inline script, no eval), WebSockets and fetches only to this origin.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

STATIC_DIR = Path(__file__).resolve().parent / "web_static"

# blob: images are thumbnails fetched with the token and shown from memory.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
    "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Small files that change with releases: revalidate rather than guess a lifetime.
    "Cache-Control": "no-cache",
}
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}


def _files() -> dict[str, Path]:
    """The servable files, fixed at start: a request path is looked up, never joined."""
    if not STATIC_DIR.is_dir():
        return {}
    return {
        path.name: path
        for path in STATIC_DIR.iterdir()
        if path.is_file() and path.suffix in MEDIA_TYPES
    }


def routes() -> list[BaseRoute]:
    files = _files()

    async def redirect(request: Request) -> Response:
        return RedirectResponse("/app/", status_code=308)

    async def page(request: Request) -> Response:
        name = str(request.path_params.get("name") or "index.html")
        path = files.get(name)
        if path is None:
            return Response("not found", status_code=404, media_type="text/plain", headers=HEADERS)
        return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers=HEADERS)

    return [
        Route("/app", redirect, methods=["GET", "HEAD"]),
        Route("/app/", page, methods=["GET", "HEAD"]),
        Route("/app/{name}", page, methods=["GET", "HEAD"]),
    ]


__all__ = ["CSP", "STATIC_DIR", "routes"]
