"""One Flare on loopback for a test, a fault test or a benchmark: a broker, a store, and one or more flared.

Everything is in one work directory, every port is free and on 127.0.0.1, every process logs into the work directory
and is stopped by `Stack.stop()` (also when starting fails half-way).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sqlite3
import subprocess
from typing import Any

from .http_calls import metric_total, request
from .nats import NatsNodes
from .ports import HOST, free_port, free_span, port_open
from .postgres import Postgres
from .processes import exited, stop_processes
from .root import DEBUG_BIN, ROOT
from .wait import wait_until

BROKERS = ("mosquitto", "nats")
STORES = ("sqlite", "postgres")


def write_bench_password(broker_dir: str) -> str:
    """The broker admits no one anonymously: the load tools log in as the `bench` service account, which exists
    only where this file does (scripts/broker.sh adds it to the password file). Returns the file's path."""
    os.makedirs(broker_dir, exist_ok=True)
    path = os.path.join(broker_dir, "bench.password")
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    return path


class Flared:
    """One flared of a Stack: its own HTTP and metrics listeners, its environment and its log."""

    def __init__(self, stack: Stack, name: str) -> None:
        self.stack = stack
        self.name = name
        self.http_port = free_port()
        self.metrics_port = free_port()  # /metrics is on its own listener, not on FLARE_HTTP_ADDR
        self.env = dict(stack.env, FLARE_HTTP_ADDR=f"{HOST}:{self.http_port}",
                        FLARE_METRICS_ADDR=f"{HOST}:{self.metrics_port}")
        if stack.store == "postgres":
            # Instances of one store take turns in the broker's shared subscription, each with a session of its own.
            self.env["FLARE_MQTT_CLIENT_ID"] = f"flared-{name}"
        self.log = os.path.join(stack.work, "flared.log" if name == "a" else f"flared-{name}.log")
        self.process: subprocess.Popen | None = None

    def start(self, seconds: float = 60) -> None:
        """Starts flared and waits until it answers /healthz 200."""
        with open(self.log, "a") as log:  # the child has its own copy
            self.process = subprocess.Popen([os.path.join(self.stack.bin, "flared")], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: self.status("/healthz") == 200, seconds, f"flared {self.name} healthy",
                   gone=lambda: exited(self.process, f"flared {self.name} (log: {self.log})"))

    def stop(self) -> None:
        stop_processes(self.process)

    @property
    def owner_key(self) -> str:
        return self.stack.owner_key

    def request(self, method: str, path: str, body: bytes | str | None = None, headers: dict[str, str] | None = None,
                source: str = HOST, port: int | None = None) -> tuple[int, dict[str, str], bytes]:
        return request(port or self.http_port, method, path, body, headers, source)

    def status(self, path: str) -> int:
        return self.request("GET", path)[0]

    def metric(self, name: str) -> float:
        return metric_total(self.request("GET", "/metrics", port=self.metrics_port)[2].decode(), name)

    def create_share(self, duration: int = 3600) -> dict[str, Any]:
        status, _, body = self.request("POST", "/api/v1/shares", json.dumps({"duration_s": duration}),
                                       {"Authorization": f"Bearer {self.stack.owner_key}", "Content-Type": "application/json"})
        assert status == 201, (status, body[:200])
        return json.loads(body)

    def view(self, token: str) -> dict[str, Any]:
        return json.loads(self.request("GET", f"/api/v1/view/{token}")[2])


class Stack:
    """A broker (`mosquitto`: scripts/broker.sh with Flare's auth plugin; `nats`: three NATS nodes behind HAProxy,
    scripts/nats-cluster.sh), a store (`sqlite` in the data directory, or `postgres`: a throwaway server in the work
    directory), and `instances` flared (A, B, …; more than one needs PostgreSQL, as `make cluster` runs them; 0 runs
    the broker alone).

    What a single-instance caller needs is here directly (`stack.http_port`, `stack.request`, `stack.flared`, …: the
    first instance's); `stack.instances` (or `stack.a`, `stack.b`) has each one.
    """

    def __init__(self, work: str, *, broker: str = "mosquitto", store: str = "sqlite", instances: int = 1,
                 bin_dir: str = DEBUG_BIN, data: str | None = None, env: dict[str, str] | None = None,
                 durable: bool = False, log_level: str = "info") -> None:
        if broker not in BROKERS or store not in STORES:
            raise ValueError(f"broker is one of {BROKERS}, store one of {STORES}")
        if instances > 1 and store != "postgres":
            raise ValueError("several flared instances share a PostgreSQL store")
        self.work = work
        self.broker_kind = broker
        self.store = store
        self.bin = bin_dir
        self.data = data or os.path.join(work, "data")
        os.makedirs(self.data, exist_ok=True)
        self.mqtt_port = free_port()
        self.env = dict(os.environ, FLARE_DATA_DIR=self.data, FLARE_MQTT_PORT=str(self.mqtt_port), FLARE_LOG_LEVEL=log_level)
        self.env.update(env or {})
        # mosquitto's files stay outside a data directory that a fault test fills up; the NATS nodes' are in it.
        self.broker_dir = os.path.join(work, "broker-data", "broker") if broker == "mosquitto" else os.path.join(self.data, "nats")
        self.nats = NatsNodes(self.data)
        self.broker: subprocess.Popen | None = None
        self.postgres: Postgres | None = None
        self.instances: list[Flared] = []
        self._owner_key: str | None = None
        try:
            if store == "postgres":
                self.postgres = Postgres(os.path.join(work, "pg"), durable=durable)
                self.env["FLARE_STORE_URL"] = self.postgres.url
            self.start_broker()
            for _ in range(instances):
                self.add_instance()
        except BaseException:
            self.stop()  # a caller that fails here gets no Stack to stop: leave no process behind
            raise

    # --- the broker ---------------------------------------------------------------------------------------------

    def start_broker(self) -> None:
        """Starts the broker (again, after a test stopped or killed it) and waits until it listens."""
        if self.broker_kind == "nats":
            self._start_nats()
            return
        broker_data = os.path.dirname(self.broker_dir)
        self.env["FLARE_BENCH_PASSWORD_FILE"] = write_bench_password(self.broker_dir)
        with open(os.path.join(self.work, "broker.log"), "a") as log:
            self.broker = subprocess.Popen([os.path.join(ROOT, "scripts", "broker.sh")], env=dict(self.env, FLARE_DATA_DIR=broker_data),
                                           stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: port_open(self.mqtt_port), 10, "mosquitto listening", gone=lambda: exited(self.broker, "scripts/broker.sh"))
        # flared and the broker share the token key and flared's service-account password.
        self.env["FLARE_MQTT_PASSWORD_FILE"] = os.path.join(self.broker_dir, "flared.password")
        token_key = os.path.join(self.data, "token.key")
        if not os.path.exists(token_key):
            shutil.copyfile(os.path.join(broker_data, "token.key"), token_key)
            os.chmod(token_key, 0o600)

    def _start_nats(self) -> None:
        self.env.update(FLARE_BIN=self.bin, FLARE_NATS_PORT=str(free_span(12)))
        with open(os.path.join(self.work, "nats.log"), "a") as log:
            self.broker = subprocess.Popen([os.path.join(ROOT, "scripts", "nats-cluster.sh")], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        urls = self.nats.urls_file()
        wait_until(lambda: os.path.exists(urls) and os.path.getsize(urls) > 0 and port_open(self.mqtt_port), 60,
                   "the NATS cluster up", gone=lambda: exited(self.broker, "scripts/nats-cluster.sh"))
        with open(urls) as f:
            self.env.update(FLARE_BROKER="nats", FLARE_NATS_URLS=f.read().strip())

    # --- flared -------------------------------------------------------------------------------------------------

    def add_instance(self) -> Flared:
        """Starts one more flared on the same store and broker (B after A, …)."""
        if self.instances and self.store != "postgres":
            raise ValueError("several flared instances share a PostgreSQL store")
        instance = Flared(self, "abcdefghi"[len(self.instances)])
        self.instances.append(instance)
        instance.start()
        return instance

    @property
    def a(self) -> Flared:
        return self.instances[0]

    @property
    def b(self) -> Flared:
        return self.instances[1]

    @property
    def flared(self) -> subprocess.Popen | None:
        """The first instance's process."""
        return self.a.process

    def start_flared(self) -> None:
        """Starts the first instance again (after a test stopped or killed it)."""
        self.a.start()

    @property
    def http_port(self) -> int:
        return self.a.http_port

    @property
    def metrics_port(self) -> int:
        return self.a.metrics_port

    @property
    def owner_key(self) -> str:
        """The owner key the first flared made in the data directory."""
        if self._owner_key is None:
            with open(os.path.join(self.data, "owner.key")) as f:
                self._owner_key = f.read().strip()
        return self._owner_key

    def request(self, method: str, path: str, body: bytes | str | None = None, headers: dict[str, str] | None = None,
                source: str = HOST, port: int | None = None) -> tuple[int, dict[str, str], bytes]:
        """A request to the first instance (or to `port`): (status, headers, body)."""
        return self.a.request(method, path, body, headers, source, port)

    def status(self, path: str) -> int:
        return self.a.status(path)

    def create_share(self, duration: int = 3600) -> dict[str, Any]:
        return self.a.create_share(duration)

    def view(self, token: str) -> dict[str, Any]:
        return self.a.view(token)

    def metric(self, name: str) -> float:
        """A metric summed over the running instances (with two, each stores part of the stream)."""
        return sum(i.metric(name) for i in self.instances if i.process and i.process.poll() is None)

    # --- the store ----------------------------------------------------------------------------------------------

    def rows(self, sql: str) -> list[tuple]:
        """The rows of a query on the SQLite store, read-only."""
        if self.store != "sqlite":
            raise ValueError("rows() reads the SQLite store; count() reads either")
        db = sqlite3.connect(f"file:{self.data}/flare.db?mode=ro", uri=True, timeout=30)
        try:
            return db.execute(sql).fetchall()
        finally:
            db.close()

    def count(self, sql: str) -> int:
        """The first column of the first row of a query (a count), on either store."""
        if self.postgres:
            return int(self.postgres.sql(sql) or 0)
        return int(self.rows(sql)[0][0])

    def stored_fixes(self) -> int:
        return self.count("SELECT count(*) FROM fixes")

    # --- stopping -----------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stops every flared, the broker and the database, in that order."""
        stop_processes(*(i.process for i in reversed(self.instances)), self.broker)
        if self.postgres:
            self.postgres.stop()
