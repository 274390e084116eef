"""Fixtures for the workers' tests: fake services, config, resources, media root.

``redis_server`` comes from the shared harness (``tests/conftest.py`` loads
``tests.harness.fixtures``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.workers.fake_services import FakeFcm, FakeNtfy, running_fcm, running_ntfy
from tests.workers.media import samples
from workers.config import WorkerConfig, load_config
from workers.context import WorkerResources, build_resources
from workers.retry import RetryPolicy

_WORKER_ENV = (
    "ANDROID_BUS_URL",
    "ANDROID_PUSH_BACKEND",
    "ANDROID_FCM_SERVICE_ACCOUNT",
    "ANDROID_FCM_SERVER_KEY",
    "ANDROID_FCM_API_BASE",
    "NTFY_SERVER_URL",
    "NTFY_TOPIC",
    "NTFY_TOKEN",
    "NTFY_USER",
    "NTFY_PASSWORD",
    "ANDROID_REDIS_CONNECT_TIMEOUT_S",
    "ANDROID_REDIS_COMMAND_TIMEOUT_S",
    "ANDROID_REDIS_HEALTH_CHECK_S",
)


@pytest.fixture(autouse=True)
def _clean_worker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own ANDROID_* / NTFY_* / HDG_* settings must not leak into tests."""
    import os

    for name in list(os.environ):
        if name in _WORKER_ENV or name.startswith("HDG_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def _fcm_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeFcm]:
    with running_fcm(tmp_path_factory.mktemp("fcm")) as (fake, _):
        yield fake


@pytest.fixture
def fcm(_fcm_session: FakeFcm) -> FakeFcm:
    """The fake OAuth + FCM service, with fresh state for this test."""
    _fcm_session.reset()
    return _fcm_session


@pytest.fixture
def service_account_file(fcm: FakeFcm, tmp_path: Path) -> Path:
    """A service-account key file whose token_uri is the fake's."""
    assert fcm.account is not None
    return fcm.account.write(tmp_path / "service-account.json")


@pytest.fixture(scope="session")
def _ntfy_session() -> Iterator[FakeNtfy]:
    with running_ntfy() as fake:
        yield fake


@pytest.fixture
def ntfy(_ntfy_session: FakeNtfy) -> FakeNtfy:
    """The fake ntfy server (anonymous), with fresh state for this test."""
    _ntfy_session.reset()
    return _ntfy_session


@pytest.fixture
def media_root(tmp_path: Path) -> Path:
    root = tmp_path / "media"
    root.mkdir()
    return root


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., WorkerConfig]:
    def make(**overrides: Any) -> WorkerConfig:
        overrides.setdefault("bus_url", "memory://")
        return load_config(**overrides)

    return make


@pytest.fixture
async def make_resources(
    make_config: Callable[..., WorkerConfig],
) -> AsyncIterator[Callable[..., WorkerResources]]:
    """Resources with in-memory stores and no-wait retry policy, closed at teardown."""
    made: list[WorkerResources] = []

    def make(**overrides: Any) -> WorkerResources:
        res = build_resources(make_config(**overrides))
        res.retry = RetryPolicy(base=0.01, cap=0.05, rng=lambda: 0.5)
        made.append(res)
        return res

    yield make
    for res in made:
        await res.aclose()


# -- sample media (generated once per session; tests must not modify them) -------------


@pytest.fixture(scope="session")
def samples_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("media-samples")


@pytest.fixture(scope="session")
def photo_12mp(samples_dir: Path) -> Path:
    return samples.jpeg_with_orientation(samples_dir / "photo-12mp.jpg")


@pytest.fixture(scope="session")
def sine_60s(samples_dir: Path) -> Path:
    return samples.sine_audio(samples_dir / "sine-60s.flac", seconds=60)


@pytest.fixture(scope="session")
def video_1080p(samples_dir: Path) -> Path:
    return samples.video(samples_dir / "video-1080p-3s.mp4", seconds=3)
