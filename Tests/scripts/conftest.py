"""What the script tests share (`make scripts-test`: `/usr/bin/python3 -m pytest Tests/scripts` from the repository root).

- `work`: a temp directory of the test's own, removed after it (reachable by the `postgres` user, which runs the
  throwaway PostgreSQL when the tests run as root);
- `started`: the run.sh instances a test started (Tests/scripts/runsh.py), every one killed after the test, whatever
  happened;
- `built`: fails at once when the binaries the tests run are not built;
- `mail`: a real SMTP server on loopback (aiosmtpd, scripts/flarestack/mail.py) that a test's flared mails through;
- a bound on every test's time (`@pytest.mark.bounded(seconds)`, 120 s unless marked): a hang fails the test, and
  its instances are still killed. SIGTERM to pytest stops the tests the same way as Ctrl-C.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from scripts.flarestack import ROOT, MailCatcher

from runsh import RUN, Instance

DEFAULT_SECONDS = 120


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "bounded(seconds): fail the test once it has run this long (default 120)")

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)


@pytest.fixture(autouse=True)
def bounded(request: pytest.FixtureRequest) -> Iterator[None]:
    marker = request.node.get_closest_marker("bounded")
    seconds = int(marker.args[0]) if marker else DEFAULT_SECONDS

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"{request.node.name} took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def built() -> None:
    missing = [path for path in (RUN, os.path.join(ROOT, ".build", "debug", "flared"), os.path.join(ROOT, ".build", "debug", "flare"),
                                 os.path.join(ROOT, ".build", "broker", "flare_auth.so")) if not os.path.exists(path)]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run `make build plugin`", pytrace=False)


@pytest.fixture
def work(request: pytest.FixtureRequest) -> Iterator[str]:
    root = tempfile.mkdtemp(prefix=f"flare-{request.node.name[:40]}-")
    os.chmod(root, 0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def started(built: None, work: str) -> Iterator[list[Instance]]:
    instances: list[Instance] = []
    try:
        yield instances
    finally:
        while instances:
            instances.pop().kill()


@pytest.fixture
def mail() -> Iterator[MailCatcher]:
    catcher = MailCatcher()
    try:
        yield catcher
    finally:
        catcher.stop()
