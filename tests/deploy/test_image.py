"""The image, really built and run (scripts/image-check.sh), and the entry point as PID 1.

``test_image_check`` runs the whole script (mmdebstrap, buildah, podman: root and several
minutes), so only when ``CRAWLER_IMAGE_TESTS=1``; CI runs the script itself from .ci/run.
The PID-1 tests need no root: ``unshare --user --map-root-user --pid --fork`` gives the
entry point PID 1 of a new PID namespace, where the kernel drops every signal PID 1 has
no handler for; they use a stand-in ``crawler`` that, like Python while importing, has no
SIGTERM handler for its first seconds.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.deploy._util import REPO

ENTRYPOINT = REPO / "deploy" / "docker-entrypoint.sh"

# `crawler db upgrade` sleeps UPGRADE_S; `crawler run` sleeps IMPORT_S without a handler
# (the window in which PID 1 loses SIGTERM), then handles SIGTERM by exiting 0.
STAND_IN = """#!/usr/bin/env python3
import os, signal, sys, time
if sys.argv[1:] == ["db", "upgrade"]:
    time.sleep(float(os.environ["UPGRADE_S"]))
    sys.exit(0)
time.sleep(float(os.environ["IMPORT_S"]))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("running", file=sys.stderr, flush=True)
while True:
    time.sleep(1)
"""


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--pid", "--fork", "true"],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    return probe.returncode == 0


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _start_as_pid1(tmp_path: Path, upgrade_s: float, import_s: float) -> subprocess.Popen[str]:
    stub = tmp_path / "crawler"
    stub.write_text(STAND_IN)
    stub.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
        "UPGRADE_S": str(upgrade_s),
        "IMPORT_S": str(import_s),
    }
    return subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--pid", "--fork",
         "sh", str(ENTRYPOINT), "crawler", "run"],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _pid1_of(proc: subprocess.Popen[str]) -> int:
    """The host PID of the namespace's PID 1 (unshare's forked child: the entry point)."""
    for _ in range(100):
        kids = _children(proc.pid)
        if kids:
            return kids[0]
        time.sleep(0.05)
    raise AssertionError("unshare did not start the entry point")


def _in_phase(pid1: int, stub: Path, phase: str) -> None:
    """Wait until PID 1 forwards SIGTERM (its shell's trap is set: SIGTERM is among the
    signals it catches) to a stand-in running the phase (``db upgrade`` for the migrations,
    ``run`` for the imports). The entry point sets the trap just after starting each phase's
    child, and clears it between the two: seen together, both are the phase's."""
    wanted = ["db", "upgrade"] if phase == "migrations" else ["run"]
    for _ in range(1000):  # 10 s and more
        caught = 0
        with open(f"/proc/{pid1}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    caught = int(line.split()[1], 16)
        for kid in _children(pid1):
            try:
                argv = Path(f"/proc/{kid}/cmdline").read_bytes().decode().split("\0")[:-1]
            except OSError:  # it ended meanwhile
                continue
            if caught & (1 << (signal.SIGTERM - 1)) and argv[-len(wanted) - 1 :] == [
                str(stub),
                *wanted,
            ]:
                return
        time.sleep(0.01)
    raise AssertionError(f"the entry point did not reach the {phase} with SIGTERM forwarded")


needs_unshare = pytest.mark.skipif(
    not _unshare_works(), reason="unprivileged user+PID namespaces are not available here"
)


@needs_unshare
@pytest.mark.parametrize(
    ("upgrade_s", "import_s", "phase"),
    [(30.0, 0.0, "migrations"), (0.0, 30.0, "imports")],
)
def test_sigterm_reaches_the_service_while_it_starts(
    tmp_path: Path, upgrade_s: float, import_s: float, phase: str
) -> None:
    proc = _start_as_pid1(tmp_path, upgrade_s, import_s)
    try:
        pid1 = _pid1_of(proc)
        # inside the phase that has no SIGTERM handler (30 s of it): as soon as PID 1 passes
        # the signal on (a fixed 1.5 s wait did the same, 1.5 s later)
        _in_phase(pid1, tmp_path / "crawler", phase)
        t0 = time.monotonic()
        os.kill(pid1, signal.SIGTERM)
        proc.wait(timeout=10)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert took < 5, f"SIGTERM during the {phase} took {took:.1f} s"
    # the child died of the SIGTERM itself: 128 + 15, passed on as the entry point's status
    assert proc.returncode == 143, (proc.returncode, proc.stderr.read() if proc.stderr else "")


@needs_unshare
def test_sigterm_to_the_running_service_exits_0(tmp_path: Path) -> None:
    proc = _start_as_pid1(tmp_path, 0.0, 0.0)
    try:
        pid1 = _pid1_of(proc)
        assert proc.stderr is not None
        line = proc.stderr.readline()
        while line and "running" not in line:
            line = proc.stderr.readline()
        assert "running" in line
        os.kill(pid1, signal.SIGTERM)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("CRAWLER_IMAGE_TESTS") != "1",
    reason="builds and runs the image (root, buildah, podman, minutes): CRAWLER_IMAGE_TESTS=1",
)
def test_image_check() -> None:
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "image-check.sh"), "single"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    for expected in (
        "migrations ran",
        "/healthz answered 200",
        "HEALTHCHECK command from the image config exits 0",
        "no process in the container runs as root",
        "running service: SIGTERM -> exit 0",
        "starting service (SIGTERM 2 s after start): SIGTERM -> exit",
    ):
        assert expected in out, f"{expected!r} missing:\n{out[-5000:]}"
