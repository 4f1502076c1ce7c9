"""`make dev` stops whole on Ctrl-C or SIGTERM: the real make, dagster dev, webserver, daemon, code servers."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest
import requests

from batch_assets.storage.resource import REPO_ROOT

from .servers import free_port, wait_for_webserver

pytestmark = pytest.mark.e2e  # every test here runs the job, a server or a deployment


def _alive(group: int) -> list[str]:
    """The live (not zombie) processes of a process group."""
    listed = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-g", str(group)], capture_output=True, text=True).stdout
    return [line.strip() for line in listed.splitlines() if line.split() and "Z" not in line.split()[1]]


# SIGINT inherited ignored, as a background job starts: the wrapper's own handler is what stops it, the one a
# terminal's Ctrl-C (SIGINT at its default) reaches too
@pytest.mark.parametrize(("sig", "inherited_sigint"), [(signal.SIGINT, signal.SIG_IGN),
                                                       (signal.SIGTERM, signal.SIG_IGN)])
def test_make_dev_stops_whole_within_15_seconds(tmp_path, sig, inherited_sigint):
    """Ctrl-C (SIGINT to the foreground group) or SIGTERM; also when started as a background job would be,
    with SIGINT ignored, which is how `dagster dev` used to be left running for ever."""
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    port = free_port()
    env = os.environ | {"DAGSTER_HOME": str(home), "BATCH_ASSETS_STORAGE_URL": str(tmp_path / "storage"),
                        "BATCH_ASSETS_LOCK_DIR": str(tmp_path / "locks"), "PYTHONWARNINGS": "ignore"}
    log = (tmp_path / "dev.log").open("w")
    make = subprocess.Popen(["make", "dev", f"DEV_PORT={port}"], cwd=REPO_ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, inherited_sigint))
    try:
        wait_for_webserver(port, make, tmp_path / "dev.log")
        time.sleep(3)  # the daemon and the code server up too
        wrapper_group = make.pid
        sent = time.monotonic()
        os.killpg(wrapper_group, sig)
        make.wait(timeout=60)
        while any(_alive(g) for g in _dagster_groups(tmp_path)) and time.monotonic() - sent < 30:
            time.sleep(0.5)
        stopped = time.monotonic() - sent
        left = [p for g in _dagster_groups(tmp_path) for p in _alive(g)]
        print(f"{signal.Signals(sig).name} (SIGINT inherited {inherited_sigint}): stopped after {stopped:.1f} s")
        assert not left and stopped < 15, (stopped, left)
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/server_info", timeout=2)
    finally:
        for group in [make.pid, *_dagster_groups(tmp_path)]:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()


def _dagster_groups(tmp_path) -> set[int]:
    """Process groups of every process whose environment points at this test's DAGSTER_HOME."""
    groups = set()
    for proc in os.listdir("/proc"):
        if not proc.isdigit():
            continue
        try:
            environ = open(f"/proc/{proc}/environ", "rb").read()
            if f"DAGSTER_HOME={tmp_path / 'home'}".encode() in environ:
                groups.add(os.getpgid(int(proc)))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return groups
