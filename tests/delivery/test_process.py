"""The delivery process: started and stopped by its service, and gone with it when the
service is killed -9 (no orphan keeps sending while the next service delivers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crawler.delivery import DeliveryProcess
from crawler.settings import load_settings

PARENT = """
import sys, time
import pytest

from crawler.delivery import DeliveryProcess
from crawler.settings import load_settings
from crawler.store import Store
url = sys.argv[1]
Store(url).upgrade()
delivery = DeliveryProcess(load_settings({"database_url": url}), exclusive_lock=False)
delivery.start()
print(delivery.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in state  # a zombie has exited


def test_stop_ends_the_process(tmp_path: Path) -> None:
    # at the service's priority: niced, its start and stop took 11 s beside a busy test run
    settings = load_settings({"database_url": f"sqlite:///{tmp_path / 'c.db'}", "delivery_nice": 0})
    delivery = DeliveryProcess(settings, exclusive_lock=False)
    delivery.start()
    pid = delivery.pid
    assert pid is not None and alive(pid)
    assert delivery.wait_ready(120)
    delivery.stop(timeout=60)
    assert not alive(pid)
    assert delivery.exitcode == 0  # it stopped when asked, not terminated


@pytest.mark.slow
def test_the_process_dies_with_a_killed_service(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert alive(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 30  # a loaded machine: seconds to be scheduled
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), "the delivery process outlived its service"
    finally:
        parent.kill()
        parent.wait(10)
