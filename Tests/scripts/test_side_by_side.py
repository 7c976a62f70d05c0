#!/usr/bin/python3
"""Two `make run` instances side by side (`make scripts-test`, part of `make test`; about 10 s).

Instance A and instance B are scripts/run.sh as `make run` starts it, each given only FLARE_DATA_DIR,
FLARE_HTTP_ADDR and FLARE_MQTT_PORT. Both must come up (/healthz 200), serve their own demo share and not the
other's, and get TLS and WebSockets ports that follow their FLARE_MQTT_PORT (B's FLARE_MQTT_PORT+1 is held by
this test, so B's listeners move up to the next free ports). Ctrl-C (SIGINT to each run.sh's process group)
must then stop everything they started. Also: an explicitly set TLS port that is taken is refused with a
clear message, and Ctrl-C during start-up stops what had started and starts nothing more. Loopback only,
bounded in time (90 s in all), everything started is stopped on failure too. Uses the built binaries in .build/debug and .build/broker (run `make build plugin` first).
Prints "side-by-side: N passed, N failed"; exits non-zero on a failure.
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(ROOT, "scripts", "run.sh")
HOST = "127.0.0.1"
TOTAL_SECONDS = 90

handed_out = set()


class Timeout(Exception):
    pass


def on_alarm(signum, frame):
    raise Timeout(f"the test took longer than {TOTAL_SECONDS} s")


def on_stop(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def port_open(port):
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def bindable(port):
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
            return True
        except OSError:
            return False


def free_port(room=0):
    """A free loopback port with `room` free ports after it, below the ephemeral range (which other tests'
    port-0 binds and outgoing connections use) so nothing else picks it while the instance starts."""
    for _ in range(500):
        port = random.randrange(20000, 32000)
        span = range(port, port + room + 1)
        if any(p in handed_out for p in span) or not all(bindable(p) and not port_open(p) for p in span):
            continue
        handed_out.update(span)
        return port
    raise AssertionError("no free port found")


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def processes_of(data_dir):
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

    def __init__(self, root, name, mqtt_port, extra_env=None):
        self.name = name
        self.data_dir = os.path.join(root, name)
        os.mkdir(self.data_dir)
        self.http_port = free_port()
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

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def fail(self, what):
        tail = "\n".join(self.output().splitlines()[-25:])
        raise AssertionError(f"{self.name}: {what}\n--- {self.name}'s output (last lines) ---\n{tail}")

    def wait_for(self, check, seconds, what):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except OSError:
                pass
            if self.process.poll() is not None:
                self.fail(f"run.sh exited ({self.process.returncode}) before {what}")
            time.sleep(0.1)
        self.fail(f"{what} did not happen within {seconds} s")

    def wait_until_running(self):
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

    def interrupt(self):
        """Ctrl-C: SIGINT to the whole process group, then everything must be gone within 20 s."""
        os.killpg(self.pgid, signal.SIGINT)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.fail("run.sh did not exit within 20 s of SIGINT")
        self.wait_gone(10)

    def wait_gone(self, seconds):
        deadline = time.monotonic() + seconds
        while True:
            left = processes_of(self.data_dir)
            try:
                os.killpg(self.pgid, 0)
                left += [f"process group {self.pgid}"]
            except ProcessLookupError:
                pass
            except PermissionError:
                left += [f"process group {self.pgid}"]
            if not left:
                break
            if time.monotonic() > deadline:
                self.fail(f"still running after it stopped: {left}")
            time.sleep(0.1)
        for port in (self.http_port, self.mqtt_port, self.tls_port, self.ws_port):
            if port and port_open(port):
                self.fail(f"port {port} still accepts connections after it stopped")

    def kill(self):
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
            deadline = time.monotonic() + 5
            while processes_of(self.data_dir) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not processes_of(self.data_dir):
                break
        self.log.close()


def two_instances_side_by_side(root, started):
    a = Instance(root, "a", free_port(room=2))
    started.append(a)
    a.wait_until_running()
    if (a.tls_port, a.ws_port) != (a.mqtt_port + 1, a.mqtt_port + 2):
        a.fail(f"TLS/WebSockets ports {a.tls_port}/{a.ws_port} do not follow FLARE_MQTT_PORT={a.mqtt_port}")

    # B's FLARE_MQTT_PORT+1 is taken (by this test): its listeners move up to the next free ports.
    with socket.socket() as holder:
        mqtt = free_port(room=3)
        holder.bind((HOST, mqtt + 1))
        holder.listen(1)
        b = Instance(root, "b", mqtt)
        started.append(b)
        b.wait_until_running()
        if (b.tls_port, b.ws_port) != (mqtt + 2, mqtt + 3):
            b.fail(f"with port {mqtt + 1} taken, TLS/WebSockets are on {b.tls_port}/{b.ws_port}, "
                   f"not the next free {mqtt + 2}/{mqtt + 3}")
    if {a.tls_port, a.ws_port} & {b.tls_port, b.ws_port}:
        b.fail(f"B's TLS/WebSockets ports {b.tls_port}/{b.ws_port} are A's {a.tls_port}/{a.ws_port}")

    # Each serves its own demo share and not the other's; both still up.
    for this, other in ((a, b), (b, a)):
        if http_status(this.share_url) != 200:
            this.fail(f"its demo share {this.share_url} no longer answers 200 beside the other instance")
        foreign = f"http://{HOST}:{this.http_port}/s/" + other.share_url.rsplit("/s/", 1)[1]
        status = http_status(foreign)
        if status == 200:
            this.fail(f"it serves {other.name}'s demo share ({foreign})")

    # Ctrl-C to each: everything either started is gone, B first while A keeps running.
    b.interrupt()
    if http_status(f"http://{HOST}:{a.http_port}/healthz") != 200 or not port_open(a.tls_port):
        a.fail("stopping B stopped A too")
    a.interrupt()


def an_explicit_taken_port_is_refused(root, started):
    with socket.socket() as holder:
        taken = free_port()
        holder.bind((HOST, taken))
        holder.listen(1)
        c = Instance(root, "c", free_port(room=2), extra_env={"FLARE_MQTT_TLS_PORT": str(taken)})
        started.append(c)
        try:
            c.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            c.fail(f"run.sh kept running with FLARE_MQTT_TLS_PORT={taken} taken")
        if c.process.returncode == 0:
            c.fail("run.sh exited 0 with its TLS port taken")
        message = f"port {taken} is already in use; set FLARE_MQTT_TLS_PORT to a free port"
        if message not in c.output():
            c.fail(f"the output does not say \"{message}\"")
        c.wait_gone(10)


def ctrl_c_during_start_up_stops_everything(root, started):
    # As soon as flared answers, before the demo share and `flare track`: nothing may start after the signal.
    d = Instance(root, "d", free_port(room=2))
    started.append(d)
    d.wait_for(lambda: http_status(f"http://{HOST}:{d.http_port}/healthz") == 200, 30, "/healthz 200")
    d.interrupt()
    if "Flare is running." in d.output():
        return  # start-up had already finished; the stop was checked all the same
    time.sleep(1)  # anything started after the signal would show up now
    d.wait_gone(0)


CASES = [two_instances_side_by_side, an_explicit_taken_port_is_refused, ctrl_c_during_start_up_stops_everything]


def main():
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_stop)
    signal.alarm(TOTAL_SECONDS)
    for path in (RUN, os.path.join(ROOT, ".build", "debug", "flared"), os.path.join(ROOT, ".build", "debug", "flare"),
                 os.path.join(ROOT, ".build", "broker", "flare_auth.so")):
        if not os.path.exists(path):
            print(f"side-by-side: {path} is missing (run `make build plugin`)", file=sys.stderr)
            sys.exit(2)
    root = tempfile.mkdtemp(prefix="flare-side-by-side-")
    passed = failed = 0
    started = []
    try:
        for case in CASES:
            began = time.monotonic()
            try:
                case(root, started)
                passed += 1
                print(f"ok    {case.__name__} ({time.monotonic() - began:.1f} s)", flush=True)
            except (AssertionError, OSError, ValueError, KeyError) as error:
                failed += 1
                print(f"FAIL  {case.__name__}: {error}", flush=True)
            finally:
                while started:
                    started.pop().kill()
    except (Timeout, KeyboardInterrupt) as error:
        failed += 1
        print(f"FAIL  stopped: {error}", flush=True)
    finally:
        signal.alarm(0)
        while started:
            started.pop().kill()
        shutil.rmtree(root, ignore_errors=True)
    print(f"side-by-side: {passed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
