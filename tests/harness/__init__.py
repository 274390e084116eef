"""Process harness for integration tests: real Redis, scripted model, Hermes gateway, edges.

Plain helpers live in :mod:`tests.harness.processes` and :mod:`tests.harness.hermes_home`;
pytest fixtures in :mod:`tests.harness.fixtures` (enable with
``pytest_plugins = ["tests.harness.fixtures"]`` in ``tests/conftest.py``).
"""

from tests.harness.hermes_home import HermesHome, deep_merge
from tests.harness.processes import (
    EdgeProcess,
    HermesGateway,
    ManagedProcess,
    ProcessFailed,
    RedisServer,
    ScriptedModel,
    free_port,
    http_get,
    http_ok,
    live_processes,
    scrubbed_environ,
    stop_all,
)

__all__ = [
    "EdgeProcess",
    "HermesGateway",
    "HermesHome",
    "ManagedProcess",
    "ProcessFailed",
    "RedisServer",
    "ScriptedModel",
    "deep_merge",
    "free_port",
    "http_get",
    "http_ok",
    "live_processes",
    "scrubbed_environ",
    "stop_all",
]
