"""Local fakes of Google OAuth, FCM HTTP v1 and ntfy, on real loopback sockets.

They answer like the real services, byte shapes included:

* ``POST /token``: the service-account JWT-bearer grant. Verifies the assertion's RS256
  signature with the account's *public* key, ``iss``/``aud``/``scope``/``iat``/``exp``
  and the ``kid`` header, then issues an opaque access token.
* ``POST /v1/projects/{project}/messages:send``: checks the bearer token (401
  ``UNAUTHENTICATED`` otherwise), validates the message shape (400 ``INVALID_ARGUMENT``
  with a ``google.rpc.BadRequest``), then plays the *script* for the device token:
  ``FcmScript.unregistered()``, ``quota_exceeded(retry_after)``, ``unavailable()``,
  ``internal()``, ``expired_token()``, ``sender_id_mismatch()``, ``invalid_token()``,
  ``third_party_auth()``; an empty script means success (``{"name": ...}``).
* ntfy ``POST /``: JSON publish with optional Bearer/Basic auth and scripted 429 / 5xx.

Each service runs uvicorn in a daemon thread (so a subprocess worker can reach it too);
state is guarded by a lock because tests read it from another thread.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import socket
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
FCM_ERROR = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
PROJECT_ID = "hdg-test-project"


# -- a real loopback server in a thread ---------------------------------------------------


class ServerThread:
    """uvicorn serving ``app`` on 127.0.0.1:<free port> in a daemon thread."""

    def __init__(self, app: Starlette) -> None:
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only when
        # the listening socket's proto is IPPROTO_TCP (proto 0 costs 40 ms per response).
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            ws="none",
            http="h11",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name=f"fake:{self.port}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._sock]))

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake service did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


# -- service account ----------------------------------------------------------------------


@dataclass
class ServiceAccountFile:
    """A freshly generated service account (RSA 2048) whose token_uri is the fake."""

    info: dict[str, Any]
    public_key_pem: bytes

    @classmethod
    def generate(cls, token_uri: str, project_id: str = PROJECT_ID) -> ServiceAccountFile:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        public_pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        info = {
            "type": "service_account",
            "project_id": project_id,
            "private_key_id": secrets.token_hex(20),
            "private_key": private_pem,
            "client_email": f"hdg-push@{project_id}.iam.gserviceaccount.com",
            "client_id": "1234567890",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": token_uri,
        }
        return cls(info, public_pem)

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.info), encoding="utf-8")
        return path


# -- FCM ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FcmScript:
    """One scripted FCM answer for a device token."""

    status: int
    error_status: str
    error_code: str | None
    message: str
    retry_after: str | None = None
    expire_token: bool = False
    bad_request_field: str | None = None

    @classmethod
    def unregistered(cls) -> FcmScript:
        return cls(404, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found.")

    @classmethod
    def quota_exceeded(cls, retry_after: int | str = 1) -> FcmScript:
        return cls(
            429,
            "RESOURCE_EXHAUSTED",
            "QUOTA_EXCEEDED",
            "Quota exceeded for quota metric 'Send requests'.",
            retry_after=str(retry_after),
        )

    @classmethod
    def unavailable(cls) -> FcmScript:
        return cls(503, "UNAVAILABLE", "UNAVAILABLE", "The service is currently unavailable.")

    @classmethod
    def internal(cls) -> FcmScript:
        return cls(500, "INTERNAL", "INTERNAL", "Internal error encountered.")

    @classmethod
    def expired_token(cls) -> FcmScript:
        """401 for the presented access token, which the fake then treats as expired."""
        return cls(
            401,
            "UNAUTHENTICATED",
            None,
            "Request had invalid authentication credentials. Expected OAuth 2 access token.",
            expire_token=True,
        )

    @classmethod
    def sender_id_mismatch(cls) -> FcmScript:
        return cls(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", "SenderId mismatch")

    @classmethod
    def invalid_token(cls) -> FcmScript:
        return cls(
            400,
            "INVALID_ARGUMENT",
            "INVALID_ARGUMENT",
            "The registration token is not a valid FCM registration token",
            bad_request_field="message.token",
        )

    @classmethod
    def third_party_auth(cls) -> FcmScript:
        return cls(
            401,
            "UNAUTHENTICATED",
            "THIRD_PARTY_AUTH_ERROR",
            "Auth error from APNS or Web Push Service",
        )

    def response(self) -> JSONResponse:
        details: list[dict[str, Any]] = []
        if self.error_code:
            details.append({"@type": FCM_ERROR, "errorCode": self.error_code})
        if self.bad_request_field:
            details.append(
                {
                    "@type": BAD_REQUEST,
                    "fieldViolations": [
                        {"field": self.bad_request_field, "description": self.message}
                    ],
                }
            )
        body: dict[str, Any] = {
            "code": self.status,
            "message": self.message,
            "status": self.error_status,
        }
        if details:
            body["details"] = details
        headers = {"Retry-After": self.retry_after} if self.retry_after else None
        return JSONResponse({"error": body}, status_code=self.status, headers=headers)


def google_error(
    status: int, error_status: str, message: str, violations: list[str] | None = None
) -> JSONResponse:
    body: dict[str, Any] = {"code": status, "message": message, "status": error_status}
    if violations:
        body["details"] = [
            {
                "@type": BAD_REQUEST,
                "fieldViolations": [{"field": f, "description": message} for f in violations],
            }
        ]
    return JSONResponse({"error": body}, status_code=status)


@dataclass
class FakeFcm:
    """OAuth token endpoint + FCM ``messages:send``, sharing one server."""

    account: ServiceAccountFile | None = None
    project_id: str = PROJECT_ID
    token_lifetime: int = 3599
    token_delay: float = 0.0  # seconds the *next* grant waits before answering
    send_delay: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    issued: dict[str, float] = field(default_factory=dict)  # access token -> expiry
    grants: int = 0
    token_requests: int = 0  # counted on arrival, before any delay
    epoch: int = 0  # bumped by reset(): late answers to an earlier test record nothing
    grant_rejections: list[str] = field(default_factory=list)
    scripts: dict[str, deque[FcmScript]] = field(default_factory=lambda: defaultdict(deque))
    attempts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    delivered: list[dict[str, Any]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)  # time.time() of each send request
    peers: list[tuple[str, int]] = field(default_factory=list)  # client address of each send
    server: ServerThread | None = None

    # -- test API ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    @property
    def token_uri(self) -> str:
        return self.url + "/token"

    def script(self, device_token: str, *answers: FcmScript) -> None:
        with self.lock:
            self.scripts[device_token].extend(answers)

    def reset(self) -> None:
        """Forget all state (tokens, scripts, deliveries); keep the server and account."""
        with self.lock:
            self.epoch += 1
            self.token_delay = self.send_delay = 0.0
            self.token_lifetime = 3599
            self.grants = self.token_requests = 0
            for collection in (self.issued, self.grant_rejections, self.scripts, self.attempts):
                collection.clear()
            for log in (self.delivered, self.arrivals, self.peers):
                log.clear()

    def deliveries(self, device_token: str) -> list[dict[str, Any]]:
        with self.lock:
            return [m for m in self.delivered if m.get("token") == device_token]

    def expire_all_tokens(self) -> None:
        with self.lock:
            self.issued.clear()

    # -- app --------------------------------------------------------------------------
    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/token", self._token, methods=["POST"]),
                Route("/v1/projects/{project}/messages:send", self._send, methods=["POST"]),
            ]
        )

    async def _token(self, request: Request) -> Response:
        with self.lock:
            epoch = self.epoch
            self.token_requests += 1
            delay, self.token_delay = self.token_delay, 0.0
        if delay:
            await asyncio.sleep(delay)
        form = await request.form()
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return self._reject("unsupported_grant_type", "Invalid grant_type")
        assertion = form.get("assertion")
        if not isinstance(assertion, str) or self.account is None:
            return self._reject("invalid_request", "Missing assertion")
        try:
            header = jwt.get_unverified_header(assertion)
            claims = jwt.decode(
                assertion,
                self.account.public_key_pem,
                algorithms=["RS256"],
                audience=self.token_uri,
                options={"require": ["iss", "aud", "iat", "exp", "scope"]},
            )
        except jwt.PyJWTError as exc:
            return self._reject("invalid_grant", f"Invalid JWT Signature: {exc}")
        info = self.account.info
        if header.get("kid") != info["private_key_id"]:
            return self._reject("invalid_grant", "Invalid JWT: kid")
        if claims["iss"] != info["client_email"] or claims["scope"] != FCM_SCOPE:
            return self._reject("invalid_grant", "Invalid JWT: iss/scope")
        if not 0 < claims["exp"] - claims["iat"] <= 3600:
            return self._reject("invalid_grant", "Invalid JWT: Token must be a short-lived token")
        with self.lock:
            if epoch == self.epoch:
                self.grants += 1
            token = f"ya29.fake-{secrets.token_urlsafe(16)}"
            self.issued[token] = time.time() + self.token_lifetime
        return JSONResponse(
            {"access_token": token, "expires_in": self.token_lifetime, "token_type": "Bearer"}
        )

    def _reject(self, error: str, description: str) -> JSONResponse:
        with self.lock:
            self.grant_rejections.append(description)
        return JSONResponse({"error": error, "error_description": description}, status_code=400)

    async def _send(self, request: Request) -> Response:
        arrived = time.time()
        auth = request.headers.get("authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else ""
        with self.lock:
            valid = self.issued.get(token, 0.0) > time.time()
        if not valid:
            return google_error(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, "
                "login cookie or other valid authentication credential.",
            )
        if request.path_params["project"] != self.project_id:
            return google_error(403, "PERMISSION_DENIED", "Permission denied on resource project.")
        try:
            body = json.loads(await request.body())
        except ValueError:
            return google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        problem = _message_problem(body)
        if problem:
            return google_error(400, "INVALID_ARGUMENT", f"Invalid value at '{problem}'", [problem])
        message = body["message"]
        device = message["token"]
        with self.lock:
            epoch = self.epoch
            self.attempts[device] += 1
            self.arrivals.append(arrived)
            if request.client is not None:
                self.peers.append((request.client.host, request.client.port))
            script = self.scripts[device].popleft() if self.scripts[device] else None
            if script is not None and script.expire_token:
                self.issued.pop(token, None)
            delay = self.send_delay
        if delay:
            await asyncio.sleep(delay)
        if script is not None:
            return script.response()
        with self.lock:
            if epoch == self.epoch:
                self.delivered.append(message)
            number = len(self.delivered)
        return JSONResponse({"name": f"projects/{self.project_id}/messages/0:{number}"})


def _message_problem(body: Any) -> str | None:
    """The field path of the first shape error, or None (FCM's own rules, abridged)."""
    if not isinstance(body, dict) or not isinstance(body.get("message"), dict):
        return "message"
    message = body["message"]
    targets = [k for k in ("token", "topic", "condition") if k in message]
    if len(targets) != 1:
        return "message.token"
    if not isinstance(message.get("token"), str) or not message["token"]:
        return "message.token"
    data = message.get("data", {})
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        return "message.data"
    android = message.get("android", {})
    if not isinstance(android, dict):
        return "message.android"
    if android.get("priority", "NORMAL") not in ("NORMAL", "HIGH"):
        return "message.android.priority"
    if "collapse_key" in android and not isinstance(android["collapse_key"], str):
        return "message.android.collapse_key"
    if len(json.dumps(message).encode()) > 4096:
        return "message"
    return None


# -- ntfy ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NtfyScript:
    status: int
    error: str
    retry_after: str | None = None

    @classmethod
    def rate_limited(cls, retry_after: int | None = None) -> NtfyScript:
        return cls(
            429,
            "limit reached: too many requests",
            None if retry_after is None else str(retry_after),
        )

    @classmethod
    def server_error(cls) -> NtfyScript:
        return cls(500, "internal server error")

    @classmethod
    def forbidden(cls) -> NtfyScript:
        return cls(403, "forbidden")

    def response(self) -> JSONResponse:
        headers = {"Retry-After": self.retry_after} if self.retry_after else None
        body = {
            "code": self.status * 100 + 1,
            "http": self.status,
            "error": self.error,
            "link": "https://ntfy.sh/docs/publish/",
        }
        return JSONResponse(body, status_code=self.status, headers=headers)


@dataclass
class FakeNtfy:
    """ntfy's JSON publish endpoint (``POST /``)."""

    token: str | None = None  # required Bearer token, if set
    basic: tuple[str, str] | None = None  # required user/password, if set
    lock: threading.Lock = field(default_factory=threading.Lock)
    scripts: dict[str, deque[NtfyScript]] = field(default_factory=lambda: defaultdict(deque))
    published: list[dict[str, Any]] = field(default_factory=list)
    attempts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    server: ServerThread | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def script(self, topic: str, *answers: NtfyScript) -> None:
        with self.lock:
            self.scripts[topic].extend(answers)

    def reset(self, *, token: str | None = None, basic: tuple[str, str] | None = None) -> None:
        with self.lock:
            self.token, self.basic = token, basic
            self.scripts.clear()
            self.attempts.clear()
            self.published.clear()

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/", self._publish, methods=["POST", "PUT"])])

    def _authorized(self, header: str) -> bool:
        if self.token is not None:
            return header == f"Bearer {self.token}"
        if self.basic is not None:
            expected = base64.b64encode(f"{self.basic[0]}:{self.basic[1]}".encode()).decode()
            return header == f"Basic {expected}"
        return True

    async def _publish(self, request: Request) -> Response:
        header = request.headers.get("authorization", "")
        if not self._authorized(header):
            status = 401 if not header else 403
            return NtfyScript(status, "unauthorized" if status == 401 else "forbidden").response()
        try:
            body = json.loads(await request.body())
        except ValueError:
            return NtfyScript(400, "invalid request: body must be message JSON").response()
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("topic"), str)
            or not body["topic"]
        ):
            return NtfyScript(400, "invalid request: topic invalid").response()
        priority = body.get("priority", 3)
        if not isinstance(priority, int) or not 1 <= priority <= 5:
            return NtfyScript(400, "invalid request: priority invalid").response()
        topic = body["topic"]
        with self.lock:
            self.attempts[topic] += 1
            script = self.scripts[topic].popleft() if self.scripts[topic] else None
        if script is not None:
            return script.response()
        with self.lock:
            self.published.append(body)
            number = len(self.published)
        return JSONResponse(
            {
                "id": f"msg{number:09d}",
                "time": int(time.time()),
                "expires": int(time.time()) + 43200,
                "event": "message",
                "topic": topic,
                "title": body.get("title"),
                "message": body.get("message", "triggered"),
            }
        )


# -- fixtures' building blocks ------------------------------------------------------------


@contextmanager
def running_fcm(tmp_path: Path) -> Iterator[tuple[FakeFcm, Path]]:
    """A started fake FCM plus a service-account file pointing at it."""
    fake = FakeFcm()
    fake.server = ServerThread(fake.app()).start()
    try:
        fake.account = ServiceAccountFile.generate(fake.token_uri)
        yield fake, fake.account.write(tmp_path / "service-account.json")
    finally:
        fake.server.stop()


@contextmanager
def running_ntfy(**kwargs: Any) -> Iterator[FakeNtfy]:
    fake = FakeNtfy(**kwargs)
    fake.server = ServerThread(fake.app()).start()
    try:
        yield fake
    finally:
        fake.server.stop()
