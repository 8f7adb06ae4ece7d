"""The Dockerfile: multi-stage, slim, non-root, HEALTHCHECK on /healthz, `crawler run` as the
command, and its install step is deploy/install.sh, which the slow test below runs for real
in a fresh venv on the exact build context that .dockerignore lets through."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests._ports import free_port
from tests.deploy._util import REPO, build_context_files, copy_build_context, in_build_context


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in (REPO / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions():
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def test_multi_stage_slim_non_root() -> None:
    st = stages()
    assert len(st) >= 2
    args = {a.split("=", 1)[0]: a.split("=", 1)[1] for w, a in instructions() if w == "ARG"}
    for stage in st:
        base = stage[0][1].split()[0]
        base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
        assert "slim" in base, f"base image {base} is not slim"
    runtime = st[-1]
    users = [a for w, a in runtime if w == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    # the runtime stage copies only the builder's venv, no sources
    copies_from = [a for w, a in runtime if w == "COPY" and "--from=" in a]
    assert copies_from and all("/opt/venv" in a for a in copies_from)


def test_builder_installs_with_the_shared_script() -> None:
    builder = stages()[0]
    runs = [a for w, a in builder if w == "RUN"]
    assert any(shlex.split(r)[:2] == ["sh", "deploy/install.sh"] for r in runs), runs
    assert (REPO / "deploy/install.sh").is_file()


def test_copy_sources_exist_and_are_in_the_build_context() -> None:
    for word, args in instructions():
        if word != "COPY" or "--from=" in args:
            continue
        parts = [p for p in shlex.split(args) if not p.startswith("--")]
        for src in parts[:-1]:
            path = REPO / src
            assert path.exists(), f"COPY {src}: missing"
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            for f in files:
                if "__pycache__" in f.parts:
                    continue
                rel = f.relative_to(REPO).as_posix()
                assert in_build_context(rel), f"COPY {src}: {rel} excluded by .dockerignore"


def test_build_context_is_small() -> None:
    files = build_context_files()
    assert "pyproject.toml" in files and "README.md" in files
    assert not [f for f in files if f.startswith((".venv/", ".git/", "tests/", "results/"))]


def test_healthcheck_probes_healthz() -> None:
    checks = [a for w, a in instructions() if w == "HEALTHCHECK"]
    assert len(checks) == 1
    assert "/healthz" in checks[0] and "CRAWLER_METRICS_PORT" in checks[0]


def test_start_command_is_crawler_run() -> None:
    ins = instructions()
    entrypoint = exec_form([a for w, a in ins if w == "ENTRYPOINT"][-1])
    cmd = exec_form([a for w, a in ins if w == "CMD"][-1])
    assert cmd == ["crawler", "run"]
    assert entrypoint == ["docker-entrypoint.sh"]
    script = (REPO / "deploy/docker-entrypoint.sh").read_text()
    assert "crawler db upgrade" in script and 'exec "$@"' in script
    assert os.access(REPO / "deploy/docker-entrypoint.sh", os.X_OK)
    # `crawler` is the package's console script
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "crawler" in scripts


def test_the_package_provides_crawler_run() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from crawler.cli import main; main()", "run", "--help"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"`crawler run --help` failed:\n{proc.stdout}\n{proc.stderr}"


def test_entrypoint_migrates_only_for_run(tmp_path: Path) -> None:
    """Run the real entry-point script with a stub `crawler` on PATH."""
    log = tmp_path / "calls"
    stub = tmp_path / "crawler"
    stub.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    entry = str(REPO / "deploy/docker-entrypoint.sh")
    subprocess.run(["sh", entry, "crawler", "run"], env=env, check=True, timeout=30)
    assert log.read_text().splitlines() == ["db upgrade", "run"]
    log.unlink()
    subprocess.run(["sh", entry, "crawler", "add", "https://e.org/"], env=env, check=True)
    assert log.read_text().splitlines() == ["add https://e.org/"]


@pytest.mark.slow
def test_install_script_in_a_fresh_venv(tmp_path: Path) -> None:
    """What the builder stage does, for real: the .dockerignore'd context, a new venv,
    `pip install .` through deploy/install.sh, then the image's command exists."""
    context = tmp_path / "src"
    copy_build_context(context)
    venv = tmp_path / "venv"
    proc = subprocess.run(
        ["sh", "deploy/install.sh", str(venv), str(context)],
        cwd=context, capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    crawler = venv / "bin" / "crawler"
    help_ = subprocess.run(
        [str(crawler), "run", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert help_.returncode == 0, help_.stdout + help_.stderr
    # what the entry point runs before `crawler run`: the migrations ship in the package
    db = tmp_path / "upgrade.db"
    upgrade = subprocess.run(
        [str(crawler), "db", "upgrade"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={**os.environ, "CRAWLER_DATABASE_URL": f"sqlite:///{db}"},
    )  # fmt: skip
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    assert db.is_file()
    # The image's start: ENTRYPOINT + CMD exactly as the Dockerfile gives them, on the
    # installed venv; the image's HEALTHCHECK command must then report healthy, and
    # SIGTERM (docker stop) must stop the service cleanly.
    ins = instructions()
    entrypoint = exec_form([a for w, a in ins if w == "ENTRYPOINT"][-1])
    command = exec_form([a for w, a in ins if w == "CMD"][-1])
    health = [a for w, a in ins if w == "HEALTHCHECK"][-1]
    health_cmd = exec_form(health[health.index("CMD") + 3 :].strip())
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "CRAWLER_DATABASE_URL": f"sqlite:///{tmp_path / 'service.db'}",
        "CRAWLER_METRICS_HOST": "127.0.0.1",
        "CRAWLER_METRICS_PORT": str(port),
        "CRAWLER_SLOT_SECONDS": "0.2",
    }
    entry = REPO / "deploy" / entrypoint[0]
    service = subprocess.Popen(
        ["sh", str(entry), *command], env=env, cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        healthy = False
        for _ in range(120):
            probe = subprocess.run(
                health_cmd, env=env, capture_output=True, timeout=10, check=False
            )
            if probe.returncode == 0:
                healthy = True
                break
            assert service.poll() is None, service.communicate()[1][-3000:]
            time.sleep(0.5)
        assert healthy, "the HEALTHCHECK command never succeeded"
        service.send_signal(signal.SIGTERM)
        _, err = service.communicate(timeout=60)
        assert service.returncode == 0, err[-3000:]
        assert "applying database migrations" in err
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("POSTGRES_PASSWORD", "change-me-postgres"),
        ("GRAFANA_ADMIN_PASSWORD", "change-me-grafana"),
        (
            "CRAWLER_DATABASE_URL",
            "postgresql+psycopg://crawler:change-me-postgres@postgres/crawler",
        ),
    ],
)
def test_entrypoint_refuses_the_placeholder_passwords(
    tmp_path: Path, variable: str, value: str
) -> None:
    """compose's ${VAR:?} passes the copied .env.example: the entry point refuses it."""
    log = tmp_path / "calls"
    stub = tmp_path / "crawler"
    stub.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", variable: value}
    entry = str(REPO / "deploy/docker-entrypoint.sh")
    run = subprocess.run(
        ["sh", entry, "crawler", "run"], env=env, capture_output=True, text=True, timeout=30,
        check=False,
    )  # fmt: skip
    assert run.returncode == 78
    assert "placeholder" in run.stderr and "set" in run.stderr and "in .env" in run.stderr
    assert not log.exists()  # neither migrated nor started
    # the placeholders are the ones .env.example ships, and a real password passes
    example = (REPO / ".env.example").read_text()
    assert "change-me-postgres" in example and "change-me-grafana" in example
    env[variable] = value.replace("change-me-postgres", "s3cret").replace("change-me-grafana", "x")
    subprocess.run(["sh", entry, "crawler", "run"], env=env, check=True, timeout=30)
    assert log.read_text().splitlines() == ["db upgrade", "run"]


def test_deploy_files_say_what_they_mean() -> None:
    for name in ("docker-compose.yml", ".env.example"):
        text = (REPO / name).read_text()
        assert "CONTRACTS" not in text, name  # a file not in the repository
        assert "docs/settings.md" in text, name
    deploy = (REPO / "docs/deploy.md").read_text()
    assert "git pull && docker compose pull && docker compose up -d --build" in deploy
    assert "pg_restore" in deploy and "**Restore**" in deploy
    assert "CRAWLER_DEFAULT_MIN_INTERVAL_S" in deploy and "--min-interval 6h" in deploy
