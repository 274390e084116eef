"""The deployment files: compose.yaml against the Compose Specification schema, plus the
structure the scaled topology depends on; the Caddyfile; the runbook (the systemd units:
test_systemd.py; Caddy itself: tests/e2e/test_caddy.py).

No Docker engine runs here: `tests/deploy/compose-spec.json` is the schema from
compose-spec/compose-spec (schema/compose-spec.json, commit 00655e2222608fa6eaecdf12ac5195889ca2244a).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Path(__file__).with_name("compose-spec.json")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def service(compose: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(compose["services"][name])


def test_compose_yaml_is_valid_against_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(
        jsonschema.Draft7Validator(schema).iter_errors(compose), key=lambda e: list(e.path)
    )
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_schema_rejects_a_broken_file(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    broken = json.loads(json.dumps(compose))
    broken["services"]["edge"]["depends_on"]["redis"]["condition"] = "whenever"
    with pytest.raises(jsonschema.ValidationError):
        # The schema's $schema URL is https://json-schema.org/draft-07/schema: name the draft.
        jsonschema.validate(broken, schema, cls=jsonschema.Draft7Validator)


WORKERS = {
    "push-worker": "PushWorker",
    "media-worker": "MediaWorker",
    "maintenance-worker": "MaintenanceWorker",
}


def test_the_topology_has_redis_gateway_edges_a_worker_per_queue_and_a_proxy(
    compose: dict[str, Any],
) -> None:
    assert set(compose["services"]) == {"redis", "gateway", "edge", "caddy", *WORKERS}
    assert service(compose, "redis")["image"].startswith("redis:7")
    assert service(compose, "gateway")["command"] == ["hermes", "gateway", "run"]
    assert service(compose, "edge")["command"] == ["python", "-m", "edge"]
    for name, settings in WORKERS.items():
        assert service(compose, name)["command"] == ["arq", f"workers.settings.{settings}"]
    assert service(compose, "caddy")["image"].startswith("caddy:2")


def test_edges_run_two_replicas_without_host_ports(compose: dict[str, Any]) -> None:
    edge = service(compose, "edge")
    assert edge["deploy"]["replicas"] == 2
    assert "ports" not in edge
    assert edge["expose"] == ["8790"]
    assert edge["environment"]["ANDROID_WS_HOST"] == "0.0.0.0"
    published = [name for name, svc in compose["services"].items() if "ports" in svc]
    assert published == ["caddy"], "only the proxy publishes host ports"


def test_edges_believe_the_forwarded_address_from_the_proxy_alone(
    compose: dict[str, Any],
) -> None:
    # Otherwise every device is Caddy's address and shares one hello lockout; and "*"
    # would let any container on the network pose as any device address.
    trusted = service(compose, "edge")["environment"]["FORWARDED_ALLOW_IPS"]
    proxy_ip = service(compose, "caddy")["networks"]["default"]["ipv4_address"]
    assert trusted == proxy_ip != "*"


def test_every_service_has_a_health_check_and_a_stop_grace_period(
    compose: dict[str, Any],
) -> None:
    for name, svc in compose["services"].items():
        assert svc.get("healthcheck", {}).get("test"), f"{name} has no health check"
        assert re.fullmatch(r"\d+[smh]", svc.get("stop_grace_period", "")), name
    assert service(compose, "redis")["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    for name, settings in WORKERS.items():
        assert service(compose, name)["healthcheck"]["test"] == [
            "CMD",
            "arq",
            "--check",
            f"workers.settings.{settings}",
        ]
    assert "/readyz" in " ".join(service(compose, "edge")["healthcheck"]["test"])
    assert "gateway_state.json" in " ".join(service(compose, "gateway")["healthcheck"]["test"])


def test_services_start_only_after_what_they_need_is_healthy(compose: dict[str, Any]) -> None:
    needs = {"gateway": {"redis"}, "edge": {"redis"}, "caddy": {"edge"}}
    needs |= dict.fromkeys(WORKERS, {"redis"})
    for name, wanted in needs.items():
        depends = service(compose, name)["depends_on"]
        assert set(depends) == wanted
        assert all(d["condition"] == "service_healthy" for d in depends.values())


def test_every_process_shares_the_one_redis_bus(compose: dict[str, Any]) -> None:
    for name in ("gateway", "edge", *WORKERS):
        assert service(compose, name)["environment"]["ANDROID_BUS_URL"] == "redis://redis:6379/0"


def test_the_gateway_keeps_its_home_and_shares_attachments_with_workers(
    compose: dict[str, Any],
) -> None:
    gateway = service(compose, "gateway")
    assert "hermes-home:/data/hermes" in gateway["volumes"]
    assert gateway["environment"]["HERMES_HOME"] == "/data/hermes"
    assert "attachments:/data/attachments" in gateway["volumes"]
    for name in WORKERS:
        assert "attachments:/data/attachments" in service(compose, name)["volumes"]
    assert {"hermes-home", "attachments"} <= set(compose["volumes"])


def test_workers_get_twice_the_job_completion_wait_to_stop(compose: dict[str, Any]) -> None:
    for name in WORKERS:
        worker = service(compose, name)
        wait = int(worker["environment"]["HDG_JOB_COMPLETION_WAIT"])
        assert int(worker["stop_grace_period"].rstrip("s")) >= 2 * wait


def test_the_caddyfile_proxies_websockets_to_health_checked_edges() -> None:
    text = (ROOT / "deploy" / "Caddyfile").read_text(encoding="utf-8")
    assert "import upstreams-{$HDG_UPSTREAM_MODE:dynamic}" in text
    assert "health_uri /healthz" in text  # static upstreams (hosts) are checked actively
    assert re.search(r"@internal path /metrics /readyz\s+respond @internal 404", text)
    assert text.count("{") == text.count("}"), "balanced blocks"
    for credential in ("Authorization", "X-Pheby-Secret"):  # never in the access log
        assert f"request>headers>{credential} delete" in text


def test_the_runbook_names_the_files_to_back_up_and_the_metrics_to_watch() -> None:
    text = "".join(
        (ROOT / "docs" / page).read_text(encoding="utf-8")
        for page in ("operations.md", "troubleshooting.md")
    )
    for needed in (
        "android/outbox.db",
        "android/channels.db",
        "android/devices.db",
        "state.db",
        "hdg_edge_connections",
        "hdg_plugin_outbox_head",
        "hdg_push_results_total",
        "hello refused source=",
        "bind_failed",
        "ANDROID_ADMIN_TOKEN",
    ):
        assert needed in text, needed


# -- secrets ------------------------------------------------------------------------------
SECRET_TARGETS = {
    "gateway": {"ANDROID_TOKEN", "ANDROID_ADMIN_TOKEN", "ANDROID_FCM_SERVICE_ACCOUNT"},
    "push-worker": {"ANDROID_FCM_SERVICE_ACCOUNT"},
}


def mounted_secrets(compose: dict[str, Any], name: str) -> dict[str, str]:
    """target (the file's name under /run/secrets) → secret, for one service."""
    return {s["target"]: s["source"] for s in service(compose, name).get("secrets", [])}


def test_the_tokens_and_the_fcm_key_are_docker_secrets_under_their_variables_names(
    compose: dict[str, Any],
) -> None:
    for name, targets in SECRET_TARGETS.items():
        assert set(mounted_secrets(compose, name)) == targets, name
    assert "secrets" not in service(compose, "edge"), "edges never see a token"
    used = {source for name in SECRET_TARGETS for source in mounted_secrets(compose, name).values()}
    assert used == set(compose["secrets"]), "every declared secret is used, and only those"


def test_each_secret_target_is_a_setting_read_from_the_secrets_directory(
    compose: dict[str, Any],
) -> None:
    from canonical.settings import GatewaySettings
    from canonical.settings_base import DOCKER_SECRETS_DIR, documented_name
    from workers.config import WorkerConfig

    models = {"gateway": GatewaySettings, "push-worker": WorkerConfig}
    for name, model in models.items():
        names = {documented_name(field) for field in model.model_fields.values()}
        assert set(mounted_secrets(compose, name)) <= names, name
    # compose mounts a secret at /run/secrets/<target>: the settings' default directory
    assert DOCKER_SECRETS_DIR == Path("/run/secrets")
    for name in SECRET_TARGETS:
        environment = service(compose, name).get("environment", {})
        assert "ANDROID_SECRETS_DIR" not in environment
        assert not set(environment) & set(mounted_secrets(compose, name)), (
            "a variable in environment: would win over its secret file"
        )


def test_the_secret_files_live_where_the_docs_say_and_are_never_committed(
    compose: dict[str, Any],
) -> None:
    secrets_dir = ROOT / "deploy" / "secrets"
    readme = (secrets_dir / "README.md").read_text(encoding="utf-8")
    operations = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    for secret in compose["secrets"].values():
        path = (ROOT / secret["file"]).resolve()
        assert path.parent == secrets_dir, secret
        assert f"`{path.name}`" in readme
        assert f"deploy/secrets/{path.name}" in operations
        assert f"deploy/secrets/{path.name}" in str(service_comment(compose_text()))
    ignored = (secrets_dir / ".gitignore").read_text(encoding="utf-8").split()
    assert ignored[ignored.index("*") :] == ["*", "!.gitignore", "!README.md"]


def compose_text() -> str:
    return (ROOT / "compose.yaml").read_text(encoding="utf-8")


def service_comment(text: str) -> str:
    """The header comment of compose.yaml: the commands a user runs first."""
    return "\n".join(line for line in text.splitlines() if line.startswith("#"))
