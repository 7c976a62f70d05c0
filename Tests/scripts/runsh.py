"""scripts/run.sh as `make run` and `make cluster` start it, for the script tests (Tests/scripts/test_*.py).

An Instance is one run.sh in its own process group, on free loopback ports (below the ephemeral range, which other
tests' port-0 binds and outgoing connections use, so nothing else picks them while it starts), with its own
FLARE_DATA_DIR and its output in a log file; kill() stops everything it started, whatever happened. Uses the built
binaries in .build/debug and .build/broker (run `make build plugin` first).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.request
from typing import Callable, NoReturn

from scripts.flarestack import HOST, ROOT, WaitTimeout, free_span, http_status, port_open, wait_until

RUN = os.path.join(ROOT, "scripts", "run.sh")


def processes_of(data_dir: str) -> list[int]:
    """Pids of processes whose command line or FLARE_DATA_DIR names data_dir (mosquitto, flared, flare, sed)."""
    found = []
    marker = data_dir.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue  # a zombie holds nothing; its parent reaps it
        except OSError:
            continue
        if marker in cmdline or b"FLARE_DATA_DIR=" + marker in environ:
            found.append(int(entry))
    return found


class Instance:
    """scripts/run.sh in its own process group (as a terminal runs `make run`), its output in a log file."""

    def __init__(self, root: str, name: str, mqtt_port: int, extra_env: dict[str, str] | None = None, http_room: int = 0,
                 other_ports: list[int] | tuple[int, ...] = ()) -> None:
        """http_room: free ports wanted after the HTTP port (`make cluster`'s further instances take them);
        other_ports: ports of its own that must be closed once it stopped (beside HTTP and MQTT)."""
        self.name = name
        self.data_dir = os.path.join(root, name)
        os.mkdir(self.data_dir)
        self.http_port = free_span(http_room)
        self.own_ports = [self.http_port + n for n in range(http_room + 1)] + list(other_ports)
        self.mqtt_port = mqtt_port
        self.log_path = os.path.join(root, name + ".log")
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLARE_")}
        env.update(FLARE_DATA_DIR=self.data_dir, FLARE_HTTP_ADDR=f"{HOST}:{self.http_port}",
                   FLARE_MQTT_PORT=str(self.mqtt_port))
        env.update(extra_env or {})
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen([RUN], cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        self.pgid = self.process.pid
        self.tls_port = self.ws_port = None

    def output(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def fail(self, what: str) -> NoReturn:
        tail = "\n".join(self.output().splitlines()[-25:])
        raise AssertionError(f"{self.name}: {what}\n--- {self.name}'s output (last lines) ---\n{tail}")

    def wait_for(self, check: Callable[[], object], seconds: float, what: str) -> None:
        """wait_until, failing with run.sh's last lines, and at once when run.sh exits."""
        try:
            wait_until(check, seconds, what, interval=0.1,
                       gone=lambda: f"run.sh exited ({self.process.returncode})" if self.process.poll() is not None else None)
        except WaitTimeout as error:
            self.fail(str(error))

    def wait_until_running(self) -> None:
        self.wait_for(lambda: http_status(f"http://{HOST}:{self.http_port}/healthz") == 200, 30, "/healthz 200")
        self.wait_for(lambda: "Ctrl-C stops everything." in self.output(), 10, "the banner")
        banner = re.search(r"broker:\s+mqtt://127\.0\.0\.1:(\d+)\s+mqtts://localhost:(\d+) .*ws://127\.0\.0\.1:(\d+)",
                           self.output())
        if not banner:
            self.fail("the banner does not name the TLS and WebSockets ports")
        mqtt, self.tls_port, self.ws_port = (int(p) for p in banner.groups())
        if mqtt != self.mqtt_port:
            self.fail(f"the banner names MQTT port {mqtt}, not {self.mqtt_port}")
        conf = open(os.path.join(self.data_dir, "broker", "mosquitto.conf")).read()
        for port in (self.tls_port, self.ws_port):
            if not re.search(rf"^listener {port} ", conf, re.M):
                self.fail(f"port {port} from the banner is not a listener in its mosquitto.conf")
            self.wait_for(lambda: port_open(port), 5, f"a listener on port {port}")
        with open(os.path.join(self.data_dir, "demo-share.json")) as f:
            self.share_url = json.load(f)["share_url"]
        if not self.share_url.startswith(f"http://{HOST}:{self.http_port}/s/"):
            self.fail(f"the demo share link {self.share_url} is not on its own HTTP port")
        link = re.search(r"viewer link .*:\s+(\S+)", self.output())
        if not link or link.group(1) != self.share_url:
            self.fail(f"the banner's viewer link is not the demo share {self.share_url}")
        status = http_status(self.share_url)
        if status != 200:
            self.fail(f"its demo share {self.share_url} answered {status}")
        self.check_metrics(re.findall(r"metrics:\s+http://127\.0\.0\.1:(\d+)/metrics", self.output()), [self.http_port])

    def check_metrics(self, banner_ports: list[str], public_ports: list[int]) -> None:
        """The banner's metrics listeners serve /metrics, each its own port; the public listeners answer 404."""
        ports = [int(p) for p in banner_ports]
        if not ports or len(set(ports)) != len(public_ports):
            self.fail(f"the banner names metrics ports {ports}, not one for each of {public_ports}")
        for port in ports:
            with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=3) as response:
                if b"flare_http_requests_total" not in response.read():
                    self.fail(f"http://{HOST}:{port}/metrics does not serve Flare's metrics")
            self.own_ports.append(port)
        for port in public_ports:
            status = http_status(f"http://{HOST}:{port}/metrics")
            if status != 404:
                self.fail(f"the public listener on port {port} answered /metrics with {status}, not 404")

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the whole process group, then everything must be gone within 20 s."""
        os.killpg(self.pgid, signal.SIGINT)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.fail("run.sh did not exit within 20 s of SIGINT")
        self.wait_gone(10)

    def wait_gone(self, seconds: float) -> None:
        """Everything it started is gone within `seconds` (0: now), and none of its ports accepts a connection."""
        left: list[int | str] = []

        def nothing_left() -> bool:
            left[:] = processes_of(self.data_dir)
            try:
                os.killpg(self.pgid, 0)
                left.append(f"process group {self.pgid}")
            except ProcessLookupError:
                pass
            except PermissionError:
                left.append(f"process group {self.pgid}")
            return not left

        try:
            wait_until(nothing_left, seconds, "everything stopped", interval=0.1)
        except WaitTimeout:
            self.fail(f"still running after it stopped: {left}")
        for port in self.own_ports + [self.mqtt_port, self.tls_port, self.ws_port]:
            if port and port_open(port):
                self.fail(f"port {port} still accepts connections after it stopped")

    def kill(self) -> None:
        """Cleanup, whatever happened: TERM then KILL the group and anything else from its data directory."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pgid, sig)
            except OSError:
                pass
            for pid in processes_of(self.data_dir):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            try:
                wait_until(lambda: not processes_of(self.data_dir), 5, "its processes gone", interval=0.1)
                break
            except WaitTimeout:
                pass
        self.log.close()


