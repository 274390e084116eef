"""Real processes for tests: Redis, the scripted model, the Hermes gateway, edges.

A facade over :mod:`tests.harness.proc` (core: ports, env, :class:`ManagedProcess`),
:mod:`tests.harness.services` (Redis, scripted model, edge) and
:mod:`tests.harness.hermes_gateway`. Plain Python; no pytest.
"""

from tests.harness.hermes_gateway import HermesGateway, HomeLike
from tests.harness.proc import (
    LOOPBACK,
    PYTHON,
    REPO_ROOT,
    SCRUBBED_ENV_PREFIXES,
    SCRUBBED_ENV_SUFFIXES,
    VENV_BIN,
    ManagedProcess,
    ProcessFailed,
    free_port,
    http_get,
    http_ok,
    live_processes,
    port_is_open,
    scrubbed_environ,
    stop_all,
)
from tests.harness.services import (
    EdgeProcess,
    RedisSentinel,
    RedisServer,
    ScriptedModel,
    SentinelGroup,
)

__all__ = [
    "LOOPBACK",
    "PYTHON",
    "REPO_ROOT",
    "SCRUBBED_ENV_PREFIXES",
    "SCRUBBED_ENV_SUFFIXES",
    "VENV_BIN",
    "EdgeProcess",
    "HermesGateway",
    "HomeLike",
    "ManagedProcess",
    "ProcessFailed",
    "RedisSentinel",
    "RedisServer",
    "SentinelGroup",
    "ScriptedModel",
    "free_port",
    "http_get",
    "http_ok",
    "live_processes",
    "port_is_open",
    "scrubbed_environ",
    "stop_all",
]
