"""The pairing URI: everything an app needs to connect, in one QR code (shared by the
plugin's setup and `hdgctl pair`)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, urlencode, urlparse

SCHEME = "hermes-device"


@dataclass(frozen=True)
class Pairing:
    host: str
    port: int
    token: str
    tls: bool = False
    name: str = "Hermes"
    path: str = "/ws"

    def uri(self) -> str:
        query = urlencode(
            {
                "v": 1,
                "host": self.host,
                "port": self.port,
                "tls": int(self.tls),
                "token": self.token,
                "name": self.name,
                "path": self.path,
            },
            quote_via=quote,
        )
        return f"{SCHEME}://pair?{query}"

    def web_url(self) -> str:
        """The web client's link: the token rides in the fragment, which a browser never
        sends to a server, so it reaches no access log."""
        scheme = "https" if self.tls else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}/app/#token={quote(self.token, safe='')}"

    def ws_url(self) -> str:
        scheme = "wss" if self.tls else "ws"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}{self.path}"


def parse_pairing(uri: str) -> Pairing:
    parsed = urlparse(uri)
    if parsed.scheme != SCHEME or parsed.netloc != "pair":
        raise ValueError(f"not a {SCHEME}://pair URI")
    query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
    if query.get("v") != "1":
        raise ValueError("unsupported pairing URI version")
    return Pairing(
        host=query["host"],
        port=int(query["port"]),
        token=query["token"],
        tls=query.get("tls") == "1",
        name=query.get("name", "Hermes"),
        path=query.get("path", "/ws"),
    )


def qr_text(uri: str) -> str:
    """The QR code of ``uri`` drawn with characters, for a terminal."""
    import segno

    buffer = io.StringIO()
    segno.make_qr(uri, error="m").terminal(out=buffer, compact=True)
    return buffer.getvalue()
