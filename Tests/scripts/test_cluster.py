"""`make cluster` keeps serving when an instance dies, and `make cluster BROKER=nats` when a NATS node dies
(`make scripts-test`, part of `make test`; about 70 s).

scripts/run.sh as `make cluster` starts it (FLARE_INSTANCES=2: a throwaway PostgreSQL, the broker, flared A and B),
on free loopback ports with its own FLARE_DATA_DIR. Each instance in turn is killed with SIGKILL: the other must
still answer /healthz and the demo share's link (the page and the view JSON, with new fixes arriving), the death must
be reported ("flared A (pid N) died (signal 9); restarting in 1 s") and the dead one must come back and serve the link
again. An instance that exits with status 0 (SIGTERM to it alone) is not restarted, and the command printed for
starting it by hand works. A second quick failure waits longer (2 s), and SIGTERM to run.sh during that pause stops
everything and starts nothing more; Ctrl-C (SIGINT to the process group) stops everything too. Bounded in time
(each test on its own), everything started is stopped on failure too (conftest.py). Uses the built binaries in
.build/debug and .build/broker (run `make build plugin` first).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request

import pytest

from scripts.flarestack import HOST, ROOT, free_span, http_status, port_open

from runsh import Instance, processes_of


def last_fix_time(url: str) -> int | None:
    """The `tst` of the view JSON's last fix, or None."""
    with urllib.request.urlopen(url, timeout=3) as response:
        last = json.load(response).get("last")
    return last and last["tst"]


class Cluster(Instance):
    """run.sh with FLARE_INSTANCES=2; instance A on http_port, B on the next port."""

    def __init__(self, root: str, name: str, broker: str = "mosquitto") -> None:
        pg_port = free_span()
        env = {"FLARE_INSTANCES": "2", "FLARE_PG_PORT": str(pg_port), "FLARE_DEMO_INTERVAL": "1", "FLARE_BROKER": broker}
        other_ports = [pg_port]
        if broker == "nats":
            # The three nodes take their ports from here (client, MQTT, monitoring, route each).
            nats_port = free_span(12)
            env["FLARE_NATS_PORT"] = str(nats_port)
            other_ports += [nats_port + n for n in range(12)]
        super().__init__(root, name, free_span(2), http_room=1, other_ports=other_ports, extra_env=env)
        self.ports = {"A": self.http_port, "B": self.http_port + 1}

    def url(self, which, path):
        return f"http://{HOST}:{self.ports[which]}{path}"

    def wait_until_running(self):
        for which in self.ports:
            self.wait_for(lambda: http_status(self.url(which, "/healthz")) == 200, 45, f"/healthz 200 on {which}")
        self.wait_for(lambda: "Ctrl-C stops everything." in self.output(), 15, "the banner")
        with open(os.path.join(self.data_dir, "demo-share.json")) as f:
            self.token = json.load(f)["share_url"].rsplit("/s/", 1)[1]
        for which, port in self.ports.items():
            if f"flared-{which.lower()}  http://{HOST}:{port}/s/{self.token}" not in self.output():
                self.fail(f"the banner does not give {which}'s link to the demo share")
        if "is restarted after 1 s" not in self.output():
            self.fail("the banner does not say that a failed instance is restarted")
        self.check_metrics(re.findall(r"^\s+flared-[ab]  http://127\.0\.0\.1:(\d+)/metrics$", self.output(), re.M),
                           list(self.ports.values()))
        for which in self.ports:
            self.check_serving(which)

    def flared_pid(self, which):
        """The pid of the flared process listening for instance `which` (from its FLARE_HTTP_ADDR)."""
        address = f"FLARE_HTTP_ADDR={HOST}:{self.ports[which]}".encode()
        for pid in processes_of(self.data_dir):
            try:
                if os.path.basename(os.readlink(f"/proc/{pid}/exe")) != "flared":
                    continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if address in f.read().split(b"\0"):
                        return pid
            except OSError:
                continue
        self.fail(f"no flared process for instance {which}")

    def check_serving(self, which, seconds=10):
        """/healthz, the demo share's page and view JSON answer 200 on `which`, and a new fix arrives there."""
        for path in ("/healthz", f"/s/{self.token}", f"/api/v1/view/{self.token}"):
            status = http_status(self.url(which, path))
            if status != 200:
                self.fail(f"{which} answered {status} to {path}")
        view = self.url(which, f"/api/v1/view/{self.token}")
        before = last_fix_time(view)
        self.wait_for(lambda: (last_fix_time(view) or 0) > (before or 0), seconds, f"a new demo fix on {which}")

    def wait_for_line(self, pattern, seconds, what):
        found = []

        def check():
            match = re.search(pattern, self.output(), re.M)
            if match:
                found.append(match)
            return bool(match)

        self.wait_for(check, seconds, what)
        return found[0]

    def kill_and_see_it_restarted(self, which, other, delay):
        pid = self.flared_pid(which)
        os.kill(pid, signal.SIGKILL)
        # The other keeps serving while this one is dead (the restart waits `delay` s).
        status = http_status(self.url(other, "/healthz"))
        if status != 200:
            self.fail(f"with {which} killed, {other} answered /healthz with {status}")
        self.wait_for_line(rf"^flare: flared {which} \(pid {pid}\) died \(signal 9\); restarting in {delay} s$", 5,
                           f"the report of {which}'s death (restart in {delay} s)")
        self.check_serving(other)
        match = self.wait_for_line(rf"^flare: flared {which} restarted \(pid (\d+)\)$", delay + 5,
                                   f"the report of {which}'s restart")
        self.wait_for(lambda: http_status(self.url(which, "/healthz")) == 200, 30, f"/healthz 200 on {which} again")
        if self.flared_pid(which) != int(match.group(1)):
            self.fail(f"the restarted {which} is not the pid the report names")
        self.check_serving(which)


@pytest.mark.bounded(100)
def test_either_instance_can_be_killed(work: str, started: list[Instance]) -> None:
    cluster = Cluster(work, "cluster")
    started.append(cluster)
    cluster.wait_until_running()
    cluster.kill_and_see_it_restarted("A", "B", delay=1)
    cluster.kill_and_see_it_restarted("B", "A", delay=1)

    # A stopped on purpose (exit status 0) stays stopped; the command printed for it starts it again.
    pid = cluster.flared_pid("A")
    os.kill(pid, signal.SIGTERM)
    match = cluster.wait_for_line(rf"^flare: flared A \(pid {pid}\) exited \(status 0\); not restarting it\..*"
                                  r"to start it again \(outside Ctrl-C's reach\): (.+)$", 35, "the report of A's exit")
    time.sleep(1.5)  # a restart would have begun by now
    if port_open(cluster.ports["A"]):
        cluster.fail("A was restarted after it exited with status 0")
    cluster.check_serving("B")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLARE_")}
    by_hand = subprocess.Popen(["env"] + match.group(1).split(), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        cluster.wait_for(lambda: http_status(cluster.url("A", "/healthz")) == 200, 30, "/healthz 200 on A started by hand")
        cluster.check_serving("A")
    finally:
        by_hand.terminate()
        by_hand.wait(timeout=35)

    # B's second failure within a minute of its start waits 2 s; SIGTERM to run.sh alone (not its process group, as
    # a service manager stops it) during that pause stops everything, and nothing starts after it.
    pid = cluster.flared_pid("B")
    os.kill(pid, signal.SIGKILL)
    cluster.wait_for_line(rf"^flare: flared B \(pid {pid}\) died \(signal 9\); restarting in 2 s$", 5,
                          "the report of B's second death (restart in 2 s)")
    cluster.process.send_signal(signal.SIGTERM)
    try:
        cluster.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        cluster.fail("run.sh did not exit within 30 s of SIGTERM")
    # run.sh waited for what it stopped, and the pause's sleep is stopped too, not left to run out.
    time.sleep(0.5)
    left = processes_of(cluster.data_dir)
    if left:
        cluster.fail(f"still running once run.sh exited: {left}")
    cluster.wait_gone(10)
    time.sleep(2.5)  # past the pause: a restart scheduled before the signal would show now
    cluster.wait_gone(0)
    if "restarted" in cluster.output().rsplit("restarting in 2 s", 1)[1]:
        cluster.fail("B was restarted after SIGTERM")


@pytest.mark.bounded(120)
def test_a_nats_node_can_be_killed(work: str, started: list[Instance]) -> None:
    """`make cluster BROKER=nats`: kill -9 of one of the three NATS nodes; both instances keep serving the demo share,
    whose tracker reconnects through HAProxy to a survivor (new fixes arrive after the failover's pause); Ctrl-C
    stops everything, the nodes and HAProxy too."""
    cluster = Cluster(work, "nats", broker="nats")
    started.append(cluster)
    cluster.wait_until_running()
    if "NATS, three nodes" not in cluster.output():
        cluster.fail("the banner does not name the NATS cluster")
    # Phones over TLS through HAProxy, checking its certificate (self-signed for localhost here).
    found = re.search(r"mqtts://localhost:(\d+)", cluster.output())
    if not found:
        cluster.fail("the banner does not give the cluster's MQTT-over-TLS address")
    with open(os.path.join(cluster.data_dir, "demo-share.json")) as f:
        demo = json.load(f)
    fix = json.dumps({"_type": "location", "lat": 47.5, "lon": 11.25, "tst": int(time.time())})
    sent = subprocess.run(["mosquitto_pub", "-h", "localhost", "-p", found.group(1), "--cafile",
                           os.path.join(cluster.data_dir, "nats", "tls", "cert.pem"), "-V", "mqttv311", "-q", "1",
                           "-u", demo["share_id"], "-P", demo["device_token"], "-i", f"flare-{demo['share_id']}-tls",
                           "-t", f"flare/v1/shares/{demo['share_id']}/location", "-m", fix], capture_output=True, text=True, timeout=30)
    if sent.returncode != 0:
        cluster.fail(f"a phone over TLS could not publish: {sent.stderr.strip()}")

    def sent_over_tls_is_stored():
        with urllib.request.urlopen(cluster.url("A", f"/api/v1/view/{cluster.token}"), timeout=3) as response:
            view = json.load(response)
        return any(point.get("lat") == 47.5 for point in view.get("trail", []) + [view.get("last") or {}])
    cluster.wait_for(sent_over_tls_is_stored, 15, "the fix sent over TLS in the demo share")
    with open(os.path.join(cluster.data_dir, "nats", "n1.pid")) as f:
        os.kill(int(f.read()), signal.SIGKILL)
    # An instance whose MQTT connection was on the dead node says so on /healthz (503) until it has logged in again
    # through HAProxy; the link pages never stop answering.
    for which in cluster.ports:
        if http_status(cluster.url(which, f"/api/v1/view/{cluster.token}")) != 200:
            cluster.fail(f"with a NATS node killed, {which} stopped answering the demo share's link")
    for which in cluster.ports:
        cluster.wait_for(lambda: http_status(cluster.url(which, "/healthz")) == 200, 45, f"/healthz 200 on {which} after the node's death")
        cluster.check_serving(which, seconds=45)
    cluster.interrupt()


@pytest.mark.bounded(60)
def test_ctrl_c_stops_the_cluster(work: str, started: list[Instance]) -> None:
    cluster = Cluster(work, "ctrl-c")
    started.append(cluster)
    cluster.wait_until_running()
    cluster.interrupt()
