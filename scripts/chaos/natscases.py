"""The NATS group of `make chaos`: Flare on three NATS nodes behind HAProxy (scripts/nats-cluster.sh), a node killed.

Each case starts its own cluster and flared (FLARE_BROKER=nats, the SQLite store) on free loopback ports, kills one
node with SIGKILL mid-stream, and checks what Flare promises on NATS: every fix the cluster acknowledged is stored,
once; the retained state is served by the survivors; a live viewer keeps receiving (its longest gap is reported); a
phone whose node died is seen stale, then live once it has reconnected. Everything started is stopped.
"""
import json
import os
import subprocess
import time

from scripts.flarestack import HOST, LiveViewer, free_port, stop_processes, wait_until


def retained_on(stack, node, share_id, watch_token, topic_suffix):
    """The retained message a new subscriber on `node`'s MQTT listener gets for the share's topic (None: nothing)."""
    result = subprocess.run(["mosquitto_sub", "-h", HOST, "-p", str(stack.nats.node_port(node, "mqtt")), "-V", "mqttv311",
                             "-u", share_id, "-P", watch_token, "-i", f"flare-{share_id}-watch-chaos{node}", "-q", "0",
                             "-t", f"flare/v1/shares/{share_id}/{topic_suffix}", "--retained-only", "-C", "1", "-W", "5"],
                            capture_output=True, text=True, timeout=15)
    return result.stdout.strip() or None


def case_node_kill9(new_stack, work, quick):
    """kill -9 of one NATS node during 1,000 QoS 1 fixes/s from a publisher that reconnects through HAProxy: every
    fix the cluster acknowledged is stored once; the survivors serve the retained state; a live viewer's longest gap
    is measured."""
    stack = new_stack(work, broker="nats")
    viewer = None
    try:
        created = [stack.create_share() for _ in range(10)]
        shares = [s["share_id"] for s in created]
        token = created[0]["share_url"].rsplit("/", 1)[1]
        viewer = LiveViewer(stack.http_port, token)
        seconds = 6 if quick else 20
        total = 1000 * seconds
        path = os.path.join(work, "shares.txt")
        with open(path, "w") as f:
            f.write("".join(s + "\n" for s in shares))
        acked_path = os.path.join(work, "acked.txt")
        pub = subprocess.Popen([os.path.join(stack.bin, "flare"), "bench", "publish", "--mqtt311", "--data-dir", stack.data,
                                "--mqtt-url", f"mqtt://{HOST}:{stack.mqtt_port}", "--shares-file", path, "--count", str(total),
                                "--rate", "1000", "--qos", "1", "--inflight", "200", "--acked", acked_path],
                               stdout=subprocess.PIPE, stderr=open(os.path.join(work, "publish.log"), "a"), text=True, env=stack.env)
        time.sleep(seconds / 3)
        victim = 1
        stack.nats.kill_node(victim)
        out, _ = pub.communicate(timeout=seconds + 180)
        result = json.loads(out.strip().splitlines()[-1])
        with open(acked_path) as f:
            acked = [int(line) for line in f if line.strip()]
        assert len(acked) >= total * 0.5, f"the cluster acknowledged only {len(acked)} of {total}"
        # Fix k went to share k mod 10 with latitude 47 + (k div 10) * 1e-6.
        expected = {(shares[k % len(shares)], round(47.0 + (k // len(shares)) * 1e-6, 7)) for k in acked}

        def count():
            return stack.rows("SELECT count(*) FROM fixes")[0][0]
        try:
            wait_until(lambda: count() >= len(expected), 60, "every acknowledged fix stored")
        except AssertionError:
            pass
        time.sleep(1.0)
        rows = stack.rows("SELECT s.share_id, f.lat FROM fixes f JOIN shares s ON s.id = f.share")
        stored = {(share, round(lat, 7)) for share, lat in rows}
        missing = expected - stored
        assert not missing, f"{len(missing)} acknowledged fixes not stored (of {len(expected)})"
        assert len(rows) == len(stored), f"{len(rows) - len(stored)} fixes stored twice"
        # The survivors serve the share's retained status and last position.
        issued = stack.request("POST", f"/api/v1/shares/{shares[0]}/watch-tokens",
                               headers={"Authorization": f"Bearer {stack.owner_key}"})
        watch = json.loads(issued[2])["watch_token"]
        for node in (2, 3):
            wait_until(lambda: retained_on(stack, node, shares[0], watch, "status") is not None, 30, f"node {node} serving the retained status")
            wait_until(lambda: retained_on(stack, node, shares[0], watch, "location") is not None, 30, f"node {node} serving the retained position")
        received = len(viewer.arrivals)
        gap = viewer.largest_gap()
        assert received >= seconds * 100 * 0.5, f"the live viewer received only {received} fixes"
        return (f"kill -9 of node n{victim} during {total} QoS 1 fixes at 1,000/s through HAProxy: {len(acked)} acknowledged, all "
                f"stored once ({len(rows)} rows); survivors serve the retained state; a live viewer of one share received "
                f"{received} fixes, longest gap {gap:.2f} s"), {
                    "published": result["published"], "acked": len(acked), "stored": len(rows), "viewer_fixes": received,
                    "largest_gap_s": round(gap, 3)}
    finally:
        if viewer:
            viewer.close()
        stack.stop()


def case_phone_node_kill9(new_stack, work, quick):
    """kill -9 of the node a phone is connected to: its last will dies with the node, so the page turns the tracker
    stale once no fix came for FLARE_STALE_AFTER_S; it is live again once the phone has reconnected (through HAProxy,
    to a survivor) and sent its next fix."""
    stack = new_stack(work, broker="nats", env={"FLARE_STALE_AFTER_S": "3"})
    tracker = None
    try:
        share = stack.create_share()
        share_file = os.path.join(work, "share.json")
        with open(share_file, "w") as f:
            json.dump(share, f)
        token = share["share_url"].rsplit("/", 1)[1]
        tracker = subprocess.Popen([os.path.join(stack.bin, "flare"), "track", "--share-file", share_file, "--interval", "1",
                                    "--quiet", "--mqtt311"], env=stack.env,
                                   stdout=open(os.path.join(work, "track.log"), "a"), stderr=subprocess.STDOUT)

        def state():
            return stack.view(token).get("tracker", {}).get("state")
        wait_until(lambda: stack.view(token).get("last") is not None and state() == "live", 30, "the tracker live")

        def phone_node():
            ids = [c for n in (1, 2, 3) for c in stack.nats.mqtt_clients(n) if c.startswith(f"flare-{share['share_id']}-track-")]
            return stack.nats.node_of_client(ids[0]) if ids else None
        node = wait_until(phone_node, 10, "the phone's node found", interval=0.2)
        stack.nats.kill_node(node)
        killed = time.monotonic()
        wait_until(lambda: state() == "stale", 60, "the tracker seen stale")
        stale_after = time.monotonic() - killed
        wait_until(lambda: state() == "live", 90, "the tracker live again")
        live_after = time.monotonic() - killed
        return (f"kill -9 of the phone's node n{node}: tracker stale after {stale_after:.1f} s (FLARE_STALE_AFTER_S=3; the "
                f"last will died with the node), live again after {live_after:.1f} s"), {
                    "stale_after_s": round(stale_after, 2), "live_after_s": round(live_after, 2)}
    finally:
        stop_processes(tracker)
        stack.stop()


def case_logins(new_stack, work, quick):
    """The cluster's doors (trust, second round, 5): phones over TLS only, checked against the certificate; plain MQTT
    on loopback for flared; three passwords for flared's three logins; someone guessing flared's full-access password
    from one address is slowed down, and cannot lock flared out."""
    tls_port = free_port()
    stack = new_stack(work, broker="nats", env={"FLARE_MQTT_TLS_PORT": str(tls_port)})
    try:
        share = stack.create_share()
        cert = os.path.join(stack.data, "nats", "tls", "cert.pem")
        fix = json.dumps({"_type": "location", "lat": 47.61, "lon": 11.2, "tst": int(time.time())})
        sent = subprocess.run(["mosquitto_pub", "-h", "localhost", "-p", str(tls_port), "--cafile", cert, "-V", "mqttv311", "-q", "1",
                               "-u", share["share_id"], "-P", share["device_token"], "-i", f"flare-{share['share_id']}-tls",
                               "-t", f"flare/v1/shares/{share['share_id']}/location", "-m", fix], capture_output=True, text=True, timeout=30)
        assert sent.returncode == 0, f"a phone over TLS: {sent.stderr.strip()}"
        wait_until(lambda: stack.rows("SELECT count(*) FROM fixes WHERE lat = 47.61")[0][0] == 1, 15, "the fix sent over TLS stored")
        with open(os.path.join(stack.data, "nats", "haproxy.cfg")) as f:
            config = f.read()
        assert f"bind 127.0.0.1:{stack.mqtt_port}\n" in config, "plain MQTT is not on loopback only"
        secrets = []
        for name in ("password", "callout.password", "system.password"):
            with open(os.path.join(stack.data, "nats", name)) as f:
                secrets.append(f.read().strip())
        assert len(set(secrets)) == 3, "flared's three NATS logins share a password"

        def login(password):
            result = subprocess.run(["mosquitto_sub", "-h", HOST, "-p", str(stack.mqtt_port), "-V", "mqttv311", "-u", "flared", "-P", password,
                                     "-i", f"chaos-guess-{time.monotonic_ns()}", "-t", "chaos/none", "-W", "5"],
                                    capture_output=True, text=True, timeout=20)
            return "refused" not in result.stderr.lower() and "not authori" not in result.stderr.lower()
        assert login(secrets[0]), "flared's own password does not log in"
        for guess in range(10):
            assert not login(f"guess-{guess}"), "a wrong password logged in"
        started = time.monotonic()
        assert not login("one more guess"), "a wrong password logged in"
        slowed = time.monotonic() - started
        assert slowed >= 2, f"the eleventh wrong guess was answered in {slowed:.2f} s"
        assert login(secrets[0]), "flared's own password was locked out by someone else's guesses"
        return (f"a phone over TLS (certificate checked) stored; plain MQTT on loopback only; three distinct passwords; "
                f"past ten wrong guesses of flared's password from one address each further one took {slowed:.1f} s, and the "
                "right one still logs in"), {"slowed_guess_s": round(slowed, 2)}
    finally:
        stack.stop()


CASES = [("nats: kill -9 of one node", case_node_kill9), ("nats: kill -9 of the phone's node", case_phone_node_kill9),
         ("nats: attacks on the cluster's logins", case_logins)]
