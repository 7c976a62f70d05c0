"""Helpers shared by scripts/bench and scripts/chaos: loopback ports, the broker's `bench` service account, a throwaway
PostgreSQL, and Flare on a three-node NATS cluster."""
import http.client
import json
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.request

HOST = "127.0.0.1"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def free_span(room):
    """The first of `room` + 1 free loopback ports in a row, below the ephemeral range (where outgoing connections and
    port-0 binds would take one between the choice and the bind)."""
    import random
    for _ in range(500):
        port = random.randrange(20000, 32000)
        if all(bindable(p) and not port_open(p) for p in range(port, port + room + 1)):
            return port
    raise RuntimeError("no free span of ports below the ephemeral range")


def bindable(port):
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
            return True
        except OSError:
            return False


def port_open(port):
    try:
        socket.create_connection((HOST, port), timeout=0.2).close()
        return True
    except OSError:
        return False


def write_bench_password(broker_dir):
    """The broker admits no one anonymously: the load tools log in as the `bench` service account, which exists
    only where this file does (scripts/broker.sh adds it to the password file)."""
    os.makedirs(broker_dir, exist_ok=True)
    path = os.path.join(broker_dir, "bench.password")
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    return path


def stop_processes(*procs):
    """SIGTERM each process still running (None is skipped), SIGKILL after 20 s without an exit."""
    for proc in procs:
        if proc and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Postgres:
    """A throwaway PostgreSQL (scripts/postgres.sh) in `directory`, on a free port; `url` names its database."""

    def __init__(self, directory, durable=False):
        self.env = dict(os.environ, FLARE_DATA_DIR=directory, FLARE_PG_PORT=str(free_port()))
        os.makedirs(directory, exist_ok=True)
        # As root the server runs as `postgres`, which must pass through the (private) temp directory above it.
        parent = os.path.dirname(os.path.abspath(directory))
        os.chmod(parent, os.stat(parent).st_mode | 0o001)
        self.url = self._script("start").strip()
        if not durable:
            # Fault tests quote no durability: no fsync. Benchmarks pass durable=True.
            self.sql("ALTER SYSTEM SET fsync = off")
            self.sql("SELECT pg_reload_conf()")

    def _script(self, command):
        result = subprocess.run([os.path.join(ROOT, "scripts", "postgres.sh"), command], env=self.env,
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"postgres.sh {command} failed: {result.stderr.strip()}")
        return result.stdout

    def start(self):
        self._script("start")

    def stop(self):
        self._script("stop")

    def pids(self):
        """The server's processes: the postmaster (first line of postmaster.pid) and its children."""
        with open(os.path.join(self.env["FLARE_DATA_DIR"], "postgres", "data", "postmaster.pid")) as f:
            postmaster = int(f.readline())
        children = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as stat:
                        if int(stat.read().rsplit(")", 1)[1].split()[1]) == postmaster:
                            children.append(int(entry))
                except (OSError, ValueError, IndexError):
                    pass
        return [postmaster] + children

    def pause(self):
        """SIGSTOP to every server process: its sockets stay open and nothing answers, as with a frozen host."""
        for pid in self.pids():
            os.kill(pid, signal.SIGSTOP)

    def resume(self):
        for pid in self.pids():
            os.kill(pid, signal.SIGCONT)

    def program(self, name):
        """The path of one of the server's programs (pgbench, pg_ctl), from where postgres.sh finds them."""
        return os.path.join(self._script("bin").strip(), name)

    def sql(self, statement):
        result = subprocess.run(["psql", self.url, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", statement],
                                capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"psql: {result.stderr.strip()}")
        return result.stdout.strip()


def wait_until(check, seconds, what):
    """Polls `check` until it holds; AssertionError naming `what` (a function: a message of how things stand then)
    when `seconds` passed first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, http.client.HTTPException):
            # Not up yet. HTTPException too: polling a free port in the ephemeral range before its server listens can
            # connect the client to itself (TCP simultaneous open), and it then reads its own request as the answer.
            pass
        time.sleep(0.05)
    raise AssertionError(f"{what() if callable(what) else what} did not happen within {seconds} s")


class NatsStack:
    """Three NATS nodes, HAProxy, and one flared on them, in `work`."""

    def __init__(self, work, bin_dir, extra_env=None):
        self.work = work
        self.bin = bin_dir
        self.data = os.path.join(work, "data")
        os.makedirs(self.data, exist_ok=True)
        self.mqtt_port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.env = dict(os.environ, FLARE_DATA_DIR=self.data, FLARE_MQTT_PORT=str(self.mqtt_port), FLARE_BIN=bin_dir,
                        FLARE_NATS_PORT=str(free_span(12)), FLARE_HTTP_ADDR=f"{HOST}:{self.http_port}",
                        FLARE_METRICS_ADDR=f"{HOST}:{self.metrics_port}", FLARE_LOG_LEVEL="info", **(extra_env or {}))
        self.cluster = None
        self.flared = None
        try:
            self.cluster = subprocess.Popen([os.path.join(ROOT, "scripts", "nats-cluster.sh")], env=self.env,
                                            stdout=open(os.path.join(work, "nats.log"), "a"), stderr=subprocess.STDOUT)
            urls = os.path.join(self.data, "nats", "urls")
            wait_until(lambda: os.path.exists(urls) and os.path.getsize(urls) > 0 and port_open(self.mqtt_port), 60, "the NATS cluster up")
            with open(urls) as f:
                self.env.update(FLARE_BROKER="nats", FLARE_NATS_URLS=f.read().strip())
            self.start_flared()
            with open(os.path.join(self.data, "owner.key")) as f:
                self.owner_key = f.read().strip()
        except BaseException:
            self.stop()
            raise

    def start_flared(self):
        self.flared = subprocess.Popen([os.path.join(self.bin, "flared")], env=self.env,
                                       stdout=open(os.path.join(self.work, "flared.log"), "a"), stderr=subprocess.STDOUT)
        wait_until(lambda: self.status("/healthz") == 200, 60, "flared healthy on NATS")

    def node_pid(self, n):
        with open(os.path.join(self.data, "nats", f"n{n}.pid")) as f:
            return int(f.read())

    def node_port(self, n, kind):
        """A node's port from its configuration: `listen` (client), `http` (monitoring) or the MQTT listener."""
        with open(os.path.join(self.data, "nats", f"n{n}.conf")) as f:
            text = f.read()
        if kind == "mqtt":
            text = text[text.index("mqtt {"):]
        return int(text.split(f"{'listen' if kind in ('client', 'mqtt') else kind}: 127.0.0.1:", 1)[1].split()[0])

    def kill_node(self, n):
        os.kill(self.node_pid(n), signal.SIGKILL)

    def node_of_client(self, mqtt_client_id):
        """The node (1-3) that holds a connection with this MQTT client id, from the nodes' monitoring."""
        for n in (1, 2, 3):
            try:
                with urllib.request.urlopen(f"http://{HOST}:{self.node_port(n, 'http')}/connz?limit=10000", timeout=2) as r:
                    connz = json.load(r)
            except OSError:
                continue
            if any(c.get("mqtt_client") == mqtt_client_id for c in connz.get("connections", [])):
                return n
        return None

    def metric(self, name):
        total = 0.0
        with urllib.request.urlopen(f"http://{HOST}:{self.metrics_port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name) and line[len(name)] in " {":
                    total += float(line.rsplit(" ", 1)[1])
        return total

    def node_rss_mb(self, n):
        with open(f"/proc/{self.node_pid(n)}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection(HOST, self.http_port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def status(self, path):
        return self.request("GET", path)[0]

    def create_share(self, duration=3600):
        status, _, body = self.request("POST", "/api/v1/shares", json.dumps({"duration_s": duration}),
                                       {"Authorization": f"Bearer {self.owner_key}", "Content-Type": "application/json"})
        assert status == 201, (status, body[:200])
        return json.loads(body)

    def view(self, token):
        return json.loads(self.request("GET", f"/api/v1/view/{token}")[2])

    def rows(self, sql):
        db = sqlite3.connect(f"file:{self.data}/flare.db?mode=ro", uri=True, timeout=30)
        try:
            return db.execute(sql).fetchall()
        finally:
            db.close()

    def stop(self):
        stop_processes(self.flared, self.cluster)
