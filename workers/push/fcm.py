"""FCM HTTP v1 sender: service-account OAuth and one ``messages:send`` per token.

OAuth: a JWT-bearer grant signed with the service account's RSA key (PyJWT, RS256),
POSTed to the account's own ``token_uri`` (so tests can point it at a local server).
The access token is cached and refreshed five minutes before it expires; a 401 from
FCM refreshes it once and resends once.

The legacy server-key API (``ANDROID_FCM_SERVER_KEY``) is gone; :mod:`workers.config`
rejects that setting with a message pointing here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt

from ..errors import ConfigError, PermanentError, RetryableError
from .classify import AuthExpired, Failed, PushOutcome, RetryLater, classify_fcm
from .notification import Notification, fcm_message

__all__ = [
    "DEFAULT_API_BASE",
    "FCM_SCOPE",
    "AccessTokenSource",
    "FcmSender",
    "ServiceAccount",
]

log = logging.getLogger(__name__)

FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
DEFAULT_API_BASE = "https://fcm.googleapis.com"
JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ASSERTION_LIFETIME = 3600
REFRESH_MARGIN = 300.0
_SETTING = "ANDROID_FCM_SERVICE_ACCOUNT"


@dataclass(frozen=True, slots=True)
class ServiceAccount:
    """The fields of a Google service-account key file that the grant needs."""

    project_id: str
    client_email: str
    private_key: str = ""
    private_key_id: str | None = None
    token_uri: str = "https://oauth2.googleapis.com/token"

    def __repr__(self) -> str:  # never print the key
        return f"ServiceAccount(project_id={self.project_id!r}, client_email={self.client_email!r})"

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> ServiceAccount:
        """Validate a parsed key file; raise :class:`ConfigError` naming the setting."""
        if info.get("type") != "service_account":
            raise ConfigError(
                _SETTING, 'is not a service-account key ("type" must be "service_account")'
            )
        values: dict[str, str] = {}
        for name in ("project_id", "client_email", "private_key", "token_uri"):
            value = info.get(name)
            if not isinstance(value, str) or not value:
                raise ConfigError(_SETTING, f"the key file has no {name!r}")
            values[name] = value
        if "PRIVATE KEY" not in values["private_key"]:
            raise ConfigError(_SETTING, "private_key is not a PEM private key")
        key_id = info.get("private_key_id")
        return cls(private_key_id=key_id if isinstance(key_id, str) else None, **values)

    @classmethod
    def from_file(cls, path: Path) -> ServiceAccount:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(_SETTING, f"cannot read {path}: {exc.strerror}") from None
        except ValueError:
            raise ConfigError(_SETTING, f"{path} is not valid JSON") from None
        if not isinstance(info, dict):
            raise ConfigError(_SETTING, f"{path} does not hold a JSON object")
        return cls.from_info(info)

    def assertion(self, now: float) -> str:
        """A signed JWT-bearer assertion valid for one hour from ``now``."""
        issued = int(now)
        claims = {
            "iss": self.client_email,
            "scope": FCM_SCOPE,
            "aud": self.token_uri,
            "iat": issued,
            "exp": issued + ASSERTION_LIFETIME,
        }
        headers = {"kid": self.private_key_id} if self.private_key_id else None
        try:
            return jwt.encode(claims, self.private_key, algorithm="RS256", headers=headers)
        except (ValueError, TypeError, jwt.PyJWTError) as exc:
            raise ConfigError(_SETTING, f"cannot sign with private_key: {exc}") from None


class AccessTokenSource:
    """Caches the OAuth access token; refreshes it ``refresh_margin`` s before expiry.

    ``clock`` (monotonic by default) times the cache; the assertion is always signed
    with wall-clock time, as Google checks ``iat``/``exp`` against its own clock.

    Concurrent callers share one refresh (a lock), so a burst of pushes makes one grant.
    """

    def __init__(
        self,
        account: ServiceAccount,
        client: httpx.AsyncClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        refresh_margin: float = REFRESH_MARGIN,
    ) -> None:
        self._account = account
        self._client = client
        self._clock = clock
        self._margin = refresh_margin
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        self.grants = 0  # number of successful token requests (observability, tests)

    def invalidate(self, token: str | None = None) -> None:
        """Forget the cached token (only if it is still ``token``, when given)."""
        if token is None or token == self._token:
            self._token = None
            self._expires_at = 0.0

    async def token(self) -> str:
        """A valid access token. Raises RetryableError / PermanentError on grant failure."""
        if self._fresh():
            assert self._token is not None
            return self._token
        async with self._lock:
            if self._fresh():
                assert self._token is not None
                return self._token
            token, lifetime = await self._grant()
            self._token = token
            self._expires_at = self._clock() + lifetime
            self.grants += 1
            return token

    def _fresh(self) -> bool:
        return self._token is not None and self._clock() < self._expires_at - self._margin

    async def _grant(self) -> tuple[str, float]:
        form = {"grant_type": JWT_BEARER_GRANT, "assertion": self._account.assertion(time.time())}
        try:
            response = await self._client.post(self._account.token_uri, data=form)
        except httpx.HTTPError as exc:
            raise RetryableError(f"OAuth token request failed: {exc!r}") from exc
        if response.status_code == 429 or response.status_code >= 500:
            raise RetryableError(f"OAuth token endpoint answered HTTP {response.status_code}")
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code != 200 or not isinstance(body, dict):
            detail = ""
            if isinstance(body, dict):
                detail = str(body.get("error_description") or body.get("error") or "")[:200]
            raise PermanentError(
                "the OAuth token endpoint rejected the service account "
                f"(HTTP {response.status_code}{': ' + detail if detail else ''}); check {_SETTING}"
            )
        token = body.get("access_token")
        lifetime = body.get("expires_in", 3600)
        if not isinstance(token, str) or not token:
            raise RetryableError("OAuth token response without access_token")
        if not isinstance(lifetime, int | float) or isinstance(lifetime, bool) or lifetime <= 0:
            lifetime = 3600
        return token, float(lifetime)


class FcmSender:
    """Sends one notification to one registration token over a shared client."""

    backend = "fcm"

    def __init__(
        self,
        account: ServiceAccount,
        client: httpx.AsyncClient,
        *,
        api_base: str = DEFAULT_API_BASE,
        tokens: AccessTokenSource | None = None,
    ) -> None:
        self.account = account
        self._client = client
        self._url = f"{api_base.rstrip('/')}/v1/projects/{account.project_id}/messages:send"
        self.tokens = tokens or AccessTokenSource(account, client)

    async def send(self, notification: Notification, link: str) -> PushOutcome:
        """Deliver; never raises for service or network errors (they are outcomes)."""
        body = fcm_message(notification, link)
        verdict = await self._post(body)
        if isinstance(verdict, AuthExpired):
            log.info("FCM rejected the OAuth token (%s); refreshing once", verdict.reason)
            verdict = await self._post(body, force_refresh=True)
            if isinstance(verdict, AuthExpired):
                return Failed(
                    f"FCM rejected a freshly minted OAuth token ({verdict.reason}); check {_SETTING}"
                )
        return verdict

    async def _post(
        self, body: dict[str, Any], *, force_refresh: bool = False
    ) -> PushOutcome | AuthExpired:
        if force_refresh:
            self.tokens.invalidate()
        try:
            token = await self.tokens.token()
        except RetryableError as exc:
            return RetryLater(str(exc))
        except PermanentError as exc:
            return Failed(str(exc))
        try:
            response = await self._client.post(
                self._url, json=body, headers={"Authorization": f"Bearer {token}"}
            )
        except httpx.HTTPError as exc:
            return RetryLater(f"FCM request failed: {exc!r}")
        verdict = classify_fcm(response.status_code, response.content, response.headers)
        if isinstance(verdict, AuthExpired):
            self.tokens.invalidate(token)
        return verdict
