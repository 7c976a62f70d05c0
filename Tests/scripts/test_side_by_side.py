"""Two `make run` instances side by side (`make scripts-test`, part of `make test`; about 10 s).

Instance A and instance B are scripts/run.sh as `make run` starts it, each given only FLARE_DATA_DIR,
FLARE_HTTP_ADDR and FLARE_MQTT_PORT. Both must come up (/healthz 200), serve their own demo share and not the
other's, and get TLS and WebSockets ports that follow their FLARE_MQTT_PORT (B's FLARE_MQTT_PORT+1 is held by
this test, so B's listeners move up to the next free ports). Ctrl-C (SIGINT to each run.sh's process group)
must then stop everything they started. Also: an explicitly set TLS port that is taken is refused with a
clear message, and Ctrl-C during start-up stops what had started and starts nothing more. Loopback only,
each test bounded in time, everything started is stopped on failure too (conftest.py). Uses the built binaries in
.build/debug and .build/broker (run `make build plugin` first).
"""

import socket
import subprocess
import time

import pytest

from scripts.flarestack import HOST, free_span, http_status, port_open

from runsh import Instance


@pytest.mark.bounded(60)
def test_two_instances_side_by_side(work: str, started: list[Instance]) -> None:
    a = Instance(work, "a", free_span(2))
    started.append(a)
    a.wait_until_running()
    if (a.tls_port, a.ws_port) != (a.mqtt_port + 1, a.mqtt_port + 2):
        a.fail(f"TLS/WebSockets ports {a.tls_port}/{a.ws_port} do not follow FLARE_MQTT_PORT={a.mqtt_port}")

    # B's FLARE_MQTT_PORT+1 is taken (by this test): its listeners move up to the next free ports.
    with socket.socket() as holder:
        mqtt = free_span(3)
        holder.bind((HOST, mqtt + 1))
        holder.listen(1)
        b = Instance(work, "b", mqtt)
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


@pytest.mark.bounded(40)
def test_an_explicit_taken_port_is_refused(work: str, started: list[Instance]) -> None:
    with socket.socket() as holder:
        taken = free_span()
        holder.bind((HOST, taken))
        holder.listen(1)
        c = Instance(work, "c", free_span(2), extra_env={"FLARE_MQTT_TLS_PORT": str(taken)})
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


@pytest.mark.bounded(60)
def test_ctrl_c_during_start_up_stops_everything(work: str, started: list[Instance]) -> None:
    # As soon as flared answers, before the demo share and `flare track`: nothing may start after the signal.
    d = Instance(work, "d", free_span(2))
    started.append(d)
    d.wait_for(lambda: http_status(f"http://{HOST}:{d.http_port}/healthz") == 200, 30, "/healthz 200")
    d.interrupt()
    if "Flare is running." in d.output():
        return  # start-up had already finished; the stop was checked all the same
    time.sleep(1)  # anything started after the signal would show up now
    d.wait_gone(0)
