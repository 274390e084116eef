"""workers.settings: real ``arq`` worker processes against a real redis-server.

Covers: one worker process per queue, ``arq --check``, graceful
SIGTERM (running jobs finish), and ``kill -9`` mid-job (a second worker re-runs the
job; the push is sent exactly once and the output file is intact).
"""

from __future__ import annotations

import itertools
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import pytest
import redis
from arq import ArqRedis, create_pool
from arq.connections import RedisSettings
from arq.jobs import Job, JobStatus

from tests.harness.processes import REPO_ROOT, ManagedProcess, RedisServer
from tests.workers.fake_services import FakeFcm
from tests.workers.helpers import notification
from tests.workers.media import samples
from workers.jobs import MAINTENANCE_QUEUE, MEDIA_QUEUE, PUSH_QUEUE, enqueue_media, enqueue_push

_DBS = itertools.cycle(range(8, 16))


@dataclass
class Bus:
    url: str
    sync: redis.Redis

    def exists(self, key: str) -> bool:
        return bool(self.sync.exists(key))


@pytest.fixture
def bus(redis_server: RedisServer) -> Iterator[Bus]:
    """A private, empty Redis database for one test."""
    url = redis_server.url_for_db(next(_DBS))
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield Bus(url, client)
    finally:
        client.flushdb()
        client.close()


@pytest.fixture
async def pool(bus: Bus) -> AsyncIterator[ArqRedis]:
    arq_pool = await create_pool(RedisSettings.from_dsn(bus.url))
    yield arq_pool
    await arq_pool.aclose()


@pytest.fixture
def worker_env(
    bus: Bus, fcm: FakeFcm, service_account_file: Path, media_root: Path
) -> dict[str, str]:
    from tests.harness.processes import scrubbed_environ

    inherited = {k: v for k, v in scrubbed_environ().items() if not k.startswith(("NTFY_", "HDG_"))}
    return inherited | (
        {
            "ANDROID_BUS_URL": bus.url,
            "ANDROID_FCM_SERVICE_ACCOUNT": str(service_account_file),
            "ANDROID_FCM_API_BASE": fcm.url,
            "HDG_MEDIA_ROOT": str(media_root),
            "HDG_JOB_COMPLETION_WAIT": "15",
            "HDG_HEALTH_CHECK_INTERVAL": "1",
            "HDG_POLL_DELAY": "0.1",
        }
    )


@pytest.fixture
def start_worker(
    tmp_path: Path, worker_env: dict[str, str]
) -> Iterator[Callable[..., ManagedProcess]]:
    started: list[ManagedProcess] = []

    def start(settings: str = "PushWorker", ready: bool = True, **env: str) -> ManagedProcess:
        proc = ManagedProcess(
            f"arq:{settings}:{len(started)}",
            [sys.executable, "-m", "arq", f"workers.settings.{settings}"],
            log_path=tmp_path / f"worker-{len(started)}.log",
            env={**worker_env, **env},
            cwd=REPO_ROOT,
        )
        started.append(proc)
        proc.start()
        if ready:
            proc.wait_until(lambda: healthy(worker_env, settings), 20, interval=0.1, what="healthy")
        return proc

    yield start
    for proc in reversed(started):
        proc.stop(timeout=5)


def arq_check(env: dict[str, str], settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arq", "--check", f"workers.settings.{settings}"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


def healthy(env: dict[str, str], settings: str) -> bool:
    client = redis.Redis.from_url(env["ANDROID_BUS_URL"])
    try:
        queues = {
            "PushWorker": [PUSH_QUEUE],
            "MediaWorker": [MEDIA_QUEUE],
            "MaintenanceWorker": [MAINTENANCE_QUEUE],
        }[settings]
        return all(client.exists(f"{q}:health-check") for q in queues)
    finally:
        client.close()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


async def result_of(job: Job | None, timeout: float = 30) -> Any:
    assert job is not None, "enqueue was refused"
    return await job.result(timeout=timeout, poll_delay=0.1)


def put_upload(media_root: Path, source: Path, name: str) -> dict[str, str]:
    folder = media_root / "uploads" / name
    folder.mkdir(parents=True)
    shutil.copyfile(source, folder / f"original{source.suffix}")
    return {
        "idempotency_key": f"upload-{name}",
        "kind": "video" if source.suffix == ".mp4" else "image",
        "src_path": str(folder / f"original{source.suffix}"),
        "out_dir": str(media_root / "derived" / name),
    }


def decodes_completely(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


# -- settings objects ----------------------------------------------------------------------


def test_each_queue_has_its_own_settings() -> None:
    from workers import settings

    assert settings.PushWorker["queue_name"] == PUSH_QUEUE
    assert settings.MediaWorker["queue_name"] == MEDIA_QUEUE
    assert settings.MaintenanceWorker["queue_name"] == MAINTENANCE_QUEUE
    assert [f.name for f in settings.PushWorker["functions"]] == ["push_notify"]
    assert [f.name for f in settings.MediaWorker["functions"]] == ["media_transcode"]
    [sweep] = settings.MaintenanceWorker["cron_jobs"]
    assert sweep.name == "retention_sweep" and sweep.unique
    assert not hasattr(settings, "WorkerSettings")  # one process per queue, as arq intends
    for worker in (settings.PushWorker, settings.MediaWorker, settings.MaintenanceWorker):
        assert isinstance(worker, dict)  # dicts: arq's class-__dict__ inheritance trap cannot bite
        assert worker["job_completion_wait"] > 0


def test_an_embedded_bus_url_stops_the_arq_worker_with_a_clear_message(
    worker_env: dict[str, str],
) -> None:
    run = arq_check({**worker_env, "ANDROID_BUS_URL": "memory://"}, "PushWorker")
    assert run.returncode != 0
    assert "ANDROID_BUS_URL: is memory://" in run.stderr


def test_the_legacy_server_key_stops_the_worker_naming_the_setting(
    worker_env: dict[str, str],
) -> None:
    run = arq_check({**worker_env, "ANDROID_FCM_SERVER_KEY": "AAAA:legacy"}, "PushWorker")
    assert run.returncode != 0
    assert "ANDROID_FCM_SERVER_KEY: the legacy FCM server-key API was shut down" in run.stderr


# -- real worker processes -----------------------------------------------------------------


async def test_one_worker_per_queue_runs_push_media_and_maintenance_jobs(
    start_worker: Callable[..., ManagedProcess],
    pool: ArqRedis,
    fcm: FakeFcm,
    media_root: Path,
    photo_12mp: Path,
    worker_env: dict[str, str],
) -> None:
    worker = start_worker("PushWorker")
    start_worker("MediaWorker")
    start_worker("MaintenanceWorker")
    push = await enqueue_push(pool, notification())
    media = await enqueue_media(pool, put_upload(media_root, photo_12mp, "p1"))
    sweep = await pool.enqueue_job("retention_sweep", _queue_name=MAINTENANCE_QUEUE)

    assert (await result_of(push))["outcome"] == "delivered"
    assert (await result_of(media))["outputs"] == {"thumbnail": "derived/p1/thumb.webp"}
    assert (await result_of(sweep))["files_deleted"] == 0
    assert len(fcm.deliveries("device-token-1")) == 1

    # The same idempotency key again (a producer retry after arq forgot the job id).
    again = await pool.enqueue_job("push_notify", notification(), _queue_name=PUSH_QUEUE)
    assert (await result_of(again))["duplicate"] is True
    assert fcm.attempts["device-token-1"] == 1
    assert await enqueue_push(pool, notification()) is None  # arq's own job-id dedupe
    assert worker.running


async def test_arq_check_reports_the_worker_health(
    start_worker: Callable[..., ManagedProcess], worker_env: dict[str, str]
) -> None:
    assert arq_check(worker_env, "PushWorker").returncode == 1  # nothing running yet
    workers = {
        name: start_worker(name) for name in ("PushWorker", "MediaWorker", "MaintenanceWorker")
    }
    for settings in workers:
        run = arq_check(worker_env, settings)
        assert run.returncode == 0, (settings, run.stderr)
    workers["PushWorker"].stop(timeout=20)
    assert arq_check(worker_env, "PushWorker").returncode == 1  # health key removed on exit
    assert arq_check(worker_env, "MediaWorker").returncode == 0  # the other queues run on


async def test_single_queue_workers_start_on_their_own(
    start_worker: Callable[..., ManagedProcess], pool: ArqRedis, fcm: FakeFcm
) -> None:
    start_worker("PushWorker")
    start_worker("MediaWorker")
    start_worker("MaintenanceWorker")
    assert (await result_of(await enqueue_push(pool, notification())))["outcome"] == "delivered"


async def test_sigterm_lets_running_jobs_finish(
    start_worker: Callable[..., ManagedProcess],
    pool: ArqRedis,
    fcm: FakeFcm,
    bus: Bus,
    media_root: Path,
    tmp_path: Path,
) -> None:
    pusher, transcoder = start_worker("PushWorker"), start_worker("MediaWorker")
    fcm.send_delay = 1.5  # FCM answers slowly: the push is mid-request at SIGTERM
    clip = samples.video(tmp_path / "clip.mp4", seconds=10, size=(1920, 1080), fps=60, audio=False)
    push = await enqueue_push(pool, notification())
    media = await enqueue_media(pool, put_upload(media_root, clip, "v1"))
    assert push is not None and media is not None
    wait_for(
        lambda: (
            bus.exists(f"arq:in-progress:{push.job_id}")
            and bus.exists(f"arq:in-progress:{media.job_id}")
        ),
        10,
        "both jobs to start",
    )
    for worker in (pusher, transcoder):
        worker.send_signal(signal.SIGTERM)
    for worker in (pusher, transcoder):
        assert worker.wait(40) == 0, worker.log_tail()
    assert (await result_of(push, timeout=5))["outcome"] == "delivered"
    transcoded = await result_of(media, timeout=5)
    assert transcoded["outcome"] == "done"
    assert decodes_completely(media_root / transcoded["outputs"]["preview"]) == 300
    assert all("shutdown on SIGTERM" in w.log_text() for w in (pusher, transcoder))


async def test_a_killed_workers_jobs_are_rerun_once_by_another_worker(
    start_worker: Callable[..., ManagedProcess],
    pool: ArqRedis,
    fcm: FakeFcm,
    bus: Bus,
    media_root: Path,
    tmp_path: Path,
) -> None:
    timeouts = {
        "HDG_PUSH_JOB_TIMEOUT": "2",
        "HDG_MEDIA_JOB_TIMEOUT": "3",
    }  # re-run after timeout + 10 s
    first = [start_worker(name, **timeouts) for name in ("PushWorker", "MediaWorker")]
    fcm.token_delay = 10.0  # the first OAuth grant hangs: the push job is mid-flight
    clip = samples.video(tmp_path / "clip.mp4", seconds=10, size=(1920, 1080), fps=60, audio=False)
    push = await enqueue_push(pool, notification())
    media = await enqueue_media(pool, put_upload(media_root, clip, "v1"))
    assert push is not None and media is not None
    wait_for(
        lambda: fcm.token_requests == 1 and bus.exists(f"arq:in-progress:{media.job_id}"),
        10,
        "the push to wait on OAuth and the transcode to start",
    )
    preview = media_root / "derived" / "v1" / "preview.mp4"
    for worker in first:
        worker.kill9()
    assert not preview.exists()  # killed mid-transcode
    assert fcm.attempts["device-token-1"] == 0  # killed before the push was sent

    # The re-run is bounded by the second worker's own limits: generous ones, so a busy
    # machine (the suite runs three test processes at once) cannot time the transcode out.
    for name in ("PushWorker", "MediaWorker"):
        start_worker(name, HDG_PUSH_JOB_TIMEOUT="30", HDG_MEDIA_JOB_TIMEOUT="120")
    pushed = await result_of(push, timeout=60)
    transcoded = await result_of(media, timeout=150)

    assert pushed["outcome"] == "delivered" and pushed["tries"] == 2
    assert fcm.attempts["device-token-1"] == 1
    assert len(fcm.deliveries("device-token-1")) == 1
    assert transcoded["outcome"] == "done"
    assert decodes_completely(preview) == 300
    info = await media.info()
    assert info is not None and info.job_try == 2
    assert await media.status() == JobStatus.complete
