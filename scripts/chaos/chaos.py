"""Flare's fault tests (`make chaos`; `--quick` is the bounded subset that `make test` runs).

Each case starts its own mosquitto and flared (debug build unless --release) on free loopback ports in a temp
directory, breaks something on purpose, and checks what Flare promises. Traffic goes to 127.0.0.x only,
every loop is bounded in count and time, and everything started is stopped. Prints "N passed, N failed".
From the repository root: `/usr/bin/python3 -m scripts.chaos.chaos [--quick] [--only NAME,…] [--release]`.
"""
import argparse
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from scripts.chaos import attacks, natscases
from scripts.flarestack import DEBUG_BIN, HOST, RELEASE_BIN, ROOT, LiveViewer, Stack, stop_processes, wait_until

BIN = DEBUG_BIN  # --release: RELEASE_BIN


def new_stack(work: str, **options) -> Stack:
    """A Stack of the build the run tests (`options`: Stack's: broker, store, instances, data, env)."""
    return Stack(work, bin_dir=BIN, **options)


def bench_publish(stack, share_ids, count, rate, offset):
    path = os.path.join(stack.work, f"shares-{offset}.txt")
    with open(path, "w") as f:
        f.write("".join(s + "\n" for s in share_ids))
    return subprocess.Popen([os.path.join(stack.bin, "flare"), "bench", "publish", "--mqtt-url", f"mqtt://{HOST}:{stack.mqtt_port}",
                             "--shares-file", path, "--count", str(count), "--rate", str(rate), "--offset", str(offset),
                             "--qos", "1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=stack.env)


def stored_once_settled(stack, expected, seconds=30):
    """How many fixes are stored once ingest has settled: waits up to `seconds` for `expected`, then one more
    second, so that a fix stored twice would show. The caller asserts on the count (a shortfall is a loss)."""

    def count():
        return stack.rows("SELECT count(*) FROM fixes")[0][0]
    try:
        wait_until(lambda: count() >= expected, seconds, "every fix stored")
    except AssertionError:
        pass
    time.sleep(1.0)
    return count()


# --- the cases ------------------------------------------------------------------------------------------------

def case_kill9(work, quick):
    """kill -9 flared repeatedly while fixes stream at 1,000/s, QoS 1: each fix stored exactly once, none lost.

    The bridge acknowledges a message to the broker only once its fix is committed, so the in-flight window (a fix
    acknowledged but not yet stored) is empty: what a killed flared had read but not stored, the broker delivers
    again to its persistent session."""
    stack = new_stack(work)
    try:
        shares = [stack.create_share()["share_id"] for _ in range(10)]
        seconds = 6 if quick else 20
        kills = 2 if quick else 5
        total = 1000 * seconds
        pub = bench_publish(stack, shares, total, 1000, 0)
        for k in range(kills):
            time.sleep(seconds / (kills + 1))
            stack.flared.send_signal(signal.SIGKILL)
            stack.flared.wait()
            time.sleep(0.3)  # the broker queues for the bridge's persistent session meanwhile
            stack.start_flared()
        out, _ = pub.communicate(timeout=seconds + 60)
        published = json.loads(out.strip().splitlines()[-1])["published"]
        assert published == total, f"publisher handed over {published} of {total}"
        stored = stored_once_settled(stack, total)
        distinct = stack.rows("SELECT count(*) FROM (SELECT DISTINCT share, lat, lon FROM fixes)")[0][0]
        assert stored == distinct, f"{stored - distinct} fixes stored twice"
        lost = total - stored
        assert lost == 0, f"lost {lost} of {total} fixes"
        return (f"{kills} x kill -9 during {total} QoS 1 fixes at 1,000/s: stored {stored}, duplicates 0, lost {lost}",
                {"kills": kills, "published": total, "stored": stored, "lost": lost})
    finally:
        stack.stop()


def case_kill9_burst(work, quick):
    """kill -9 flared in the middle of a full-speed QoS 1 burst, with thousands of fixes read and not yet stored.

    None of those was acknowledged to the broker (the bridge acknowledges only what is committed), so the broker
    delivers them again after the restart and nothing is lost."""
    stack = new_stack(work)
    try:
        shares = [stack.create_share()["share_id"] for _ in range(100)]
        total = 40000
        pub = bench_publish(stack, shares, total, 0, 0)
        wait_until(lambda: stack.metric("flare_fixes_accepted_total") >= 5000, 30, "burst under way")
        depth = int(stack.metric("flare_ingest_queue_depth"))
        stack.flared.send_signal(signal.SIGKILL)
        stack.flared.wait()
        stack.start_flared()
        pub.communicate(timeout=120)
        stored = stored_once_settled(stack, total)
        lost = total - stored
        assert lost == 0, f"lost {lost} of {total} fixes"
        return (f"kill -9 mid-burst ({total} fixes, no pacing): lost {lost}; {depth} fixes were read and not yet stored "
                f"just before the kill, unacknowledged, so the broker delivered them again"), {
                    "published": total, "stored": stored, "lost": lost, "queue_depth_at_kill": depth}
    finally:
        stack.stop()


def case_broker_restart(work, quick):
    """Broker restart mid-stream: flared and `flare track` reconnect; retained status survives; nothing twice."""
    stack = new_stack(work)
    try:
        share = stack.create_share()
        share_file = os.path.join(work, "share.json")
        with open(share_file, "w") as f:
            json.dump(share, f)
        count = 150 if quick else 600
        track = subprocess.Popen([os.path.join(stack.bin, "flare"), "track", "--share-file", share_file, "--interval", "0.02",
                                  "--speed", "100", "--count", str(count), "--quiet"], stdout=subprocess.DEVNULL,
                                 stderr=open(os.path.join(work, "track.log"), "w"), env=stack.env)
        time.sleep(1.0)
        stack.broker.terminate()  # an orderly stop: mosquitto writes its persistence file
        stack.broker.wait(20)
        time.sleep(1.0)
        stack.start_broker()
        wait_until(lambda: stack.status("/healthz") == 200, 30, "flared reconnected (healthz 200)")
        assert track.wait(120) == 0, "flare track failed"
        with open(os.path.join(work, "track.log")) as f:
            log = f.read()
        assert "reconnecting" in log or "not acknowledged" in log, "the tracker never saw the broker go"
        wait_until(lambda: stack.rows("SELECT count(*) FROM fixes")[0][0] >= count, 30, "every acknowledged fix stored")
        stored = stack.rows("SELECT count(*) FROM fixes")[0][0]
        distinct = stack.rows("SELECT count(*) FROM (SELECT DISTINCT share, lat, lon FROM fixes)")[0][0]
        # A fix whose PUBACK was lost in the restart is sent again by the tracker (a new message, maybe a new
        # tst); those are the only repeats allowed. QoS 1 redelivery of the same message never adds a row.
        retries = log.count("not acknowledged")
        assert distinct >= count, f"only {distinct} of {count} acknowledged positions stored"
        assert stored - distinct <= retries, f"{stored - distinct} positions stored twice with only {retries} tracker retries"
        # Retained status and last position survive the restart.
        # Read as an integrator would: with a watch token for this share (the broker admits no one anonymously).
        status, _, body = stack.request("POST", f"/api/v1/shares/{share['share_id']}/watch-tokens",
                                        headers={"Authorization": f"Bearer {stack.owner_key}"})
        assert status == 201, (status, body[:200])
        watch_token = json.loads(body)["watch_token"]
        retained = subprocess.run(["mosquitto_sub", "-h", HOST, "-p", str(stack.mqtt_port), "-t", f"flare/v1/shares/{share['share_id']}/#",
                                   "-u", share["share_id"], "-P", watch_token, "-i", f"flare-{share['share_id']}-watch-chaos",
                                   "-C", "2", "-W", "5", "-v"],
                                  capture_output=True, text=True).stdout
        assert '"state":"active"' in retained, "retained status lost"
        assert "/location" in retained, "retained last position lost"
        status, _, body = stack.request("GET", f"/api/v1/shares/{share['share_id']}", headers={"Authorization": f"Bearer {stack.owner_key}"})
        assert status == 200 and json.loads(body)["expires_at"] == share["expires_at"], "expiry changed"
        return (f"broker restarted mid-stream: all {count} acknowledged tracker fixes stored ({stored - distinct} re-sent by the "
                f"tracker after a lost PUBACK), retained status and position kept, expiry unchanged"), {
                    "fixes": count, "stored": stored, "resent": stored - distinct}
    finally:
        stack.stop()


def stored_once_settled_for(stack, share, expected, seconds=5):
    """How many fixes one share has once ingest has settled (see `stored_once_settled`)."""

    def count():
        return stack.rows(f"SELECT count(*) FROM fixes WHERE share = (SELECT id FROM shares WHERE share_id = '{share['share_id']}')")[0][0]
    try:
        wait_until(lambda: count() >= expected, seconds, "every fix stored")
    except AssertionError:
        pass
    time.sleep(1.0)
    return count()


def retained_state(stack):
    """Every retained status and location on the broker, as the read-only `admin` service account sees them:
    {topic: payload}. An empty payload never shows (it clears)."""
    with open(os.path.join(stack.broker_dir, "admin.password")) as f:
        password = f.read().strip()
    out = subprocess.run(["mosquitto_sub", "-h", HOST, "-p", str(stack.mqtt_port), "-u", "admin", "-P", password,
                          "-t", "flare/v1/shares/+/status", "-t", "flare/v1/shares/+/location", "-t", "flare/v1/epoch",
                          "--retained-only", "-W", "2", "-v"], capture_output=True, text=True).stdout
    state = {}
    for line in out.splitlines():
        topic, _, payload = line.partition(" ")
        state[topic] = payload
    return state


def case_broker_crash(work, quick):
    """kill -9 of the broker mid-stream, with no save since the shares were made, while flared is paused (SIGSTOP),
    so that the broker holds acknowledged fixes it has not handed on: what a crash can cost.

    Checked: flared notices from its epoch mark that the broker lost retained messages and publishes every live
    share's status and last position again; a share stopped just before the crash stays ended (no position) and its
    device token stays refused (the auth plugin syncs its revocation list to disk); every fix answered 202 (HTTP
    ingest) and every fix `flare track` was told is stored is stored exactly once. A burst from a publisher that is
    done at PUBACK (as the OwnTracks apps are) while flared is paused shows what such a tracker can lose."""
    attacks.make_admin_account(work)
    stack = new_stack(work)
    trackers = []
    try:
        count = 600 if quick else 2400

        def start_tracker(name, extra):
            share = stack.create_share()
            share_file = os.path.join(work, f"{name}.json")
            with open(share_file, "w") as f:
                json.dump(share, f)
            process = subprocess.Popen([os.path.join(stack.bin, "flare"), "track", "--share-file", share_file, "--interval", "0.01",
                                        "--speed", "100", "--count", str(count), "--quiet", "--status-every", "1"] + extra,
                                       stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"{name}.log"), "w"), env=stack.env)
            trackers.append(process)
            return share, process

        confirming, confirming_track = start_tracker("confirming", [])
        acked = stack.create_share()
        quiet = [stack.create_share() for _ in range(5)]
        now = int(time.time())
        for n, share in enumerate(quiet):
            body = json.dumps({"lat": 48.1 + n / 100, "lon": 11.5, "tst": now - 5})
            status, _, reply = stack.request("POST", f"/api/v1/shares/{share['share_id']}/locations", body,
                                             {"Authorization": f"Bearer {share['device_token']}", "Content-Type": "application/json"})
            assert status == 202, (status, reply[:200])
        stopped = stack.create_share()
        status, _, _ = stack.request("POST", f"/api/v1/shares/{stopped['share_id']}/stop",
                                     headers={"Authorization": f"Bearer {stack.owner_key}"})
        assert status == 200, status
        live = [confirming, acked] + quiet
        wait_until(lambda: all(f"flare/v1/shares/{s['share_id']}/location" in retained_state(stack) for s in live if s is not acked), 15,
                   "every live share's position retained before the crash")
        # The mark goes up every second from flared's start; the store knows one the broker acknowledged.
        wait_until(lambda: stack.metric("flare_broker_epoch") >= 2, 15, "flared's epoch mark on the broker")
        # flared stops reading: the broker acknowledges the trackers' fixes and queues them for flared's session.
        stack.flared.send_signal(signal.SIGSTOP)
        burst = 3000
        pub = bench_publish(stack, [acked["share_id"]], burst, 0, 0)
        out, _ = pub.communicate(timeout=60)
        acknowledged = json.loads(out.strip().splitlines()[-1])["published"]
        time.sleep(max(0.0, 1.0))
        stack.broker.send_signal(signal.SIGKILL)
        stack.broker.wait(20)
        stack.start_broker()
        broker_back = time.monotonic()
        stack.flared.send_signal(signal.SIGCONT)

        def restored():
            state = retained_state(stack)
            for share in live:
                if '"state":"active"' not in state.get(f"flare/v1/shares/{share['share_id']}/status", ""):
                    return False
                if f"flare/v1/shares/{share['share_id']}/location" not in state:
                    return False
            return '"state":"ended"' in state.get(f"flare/v1/shares/{stopped['share_id']}/status", "")
        wait_until(restored, 30, lambda: f"every live share's retained status and position back (have {sorted(retained_state(stack))})")
        restore_seconds = time.monotonic() - broker_back
        state = retained_state(stack)
        assert f"flare/v1/shares/{stopped['share_id']}/location" not in state, "the stopped share got a position back"
        assert stack.metric("flare_broker_restores_total") == 1, "flared did not count one restore"
        # The stopped share's device token is still refused by the restarted broker.
        # The phone's own client id: refused for the revocation alone.
        refused = subprocess.run(["mosquitto_pub", "-h", HOST, "-p", str(stack.mqtt_port), "-u", stopped["share_id"],
                                  "-P", stopped["device_token"], "-i", f"flare-{stopped['share_id']}", "-t", f"flare/v1/shares/{stopped['share_id']}/location",
                                  "-m", json.dumps({"_type": "location", "lat": 1, "lon": 2, "tst": now}), "-q", "1"],
                                 capture_output=True, text=True)
        assert refused.returncode != 0, "the stopped share's device token works again after the crash"

        def stored_of(share):
            row = f"(SELECT id FROM shares WHERE share_id = '{share['share_id']}')"
            total = stack.rows(f"SELECT count(*) FROM fixes WHERE share = {row}")[0][0]
            distinct = stack.rows(f"SELECT count(*) FROM (SELECT DISTINCT tst, lat, lon FROM fixes WHERE share = {row})")[0][0]
            return total, distinct
        assert confirming_track.wait(120) == 0, "the confirming tracker did not have every fix confirmed"
        with open(os.path.join(work, "confirming.log")) as f:
            log = f.read()
        assert f"sent {count} fixes, all confirmed stored by Flare" in log, log[-2000:]
        resent = sum(int(n) for n in re.findall(r"sending again (\d+) fixes", log))
        total, distinct = stored_of(confirming)
        assert total == distinct == count, f"confirming tracker: {count} confirmed, {total} stored ({distinct} distinct)"
        http_stored = stack.rows("SELECT count(*) FROM fixes WHERE share IN (SELECT id FROM shares WHERE share_id IN (%s))"
                                 % ",".join(f"'{s['share_id']}'" for s in quiet))[0][0]
        assert http_stored == len(quiet), f"{http_stored} of {len(quiet)} fixes answered 202 stored"
        acked_stored = stored_once_settled_for(stack, acked, acknowledged)
        lost = acknowledged - acked_stored
        return (f"broker kill -9 with flared paused: every live share's retained status and position back "
                f"{restore_seconds:.1f} s after the broker restarted; the stopped share stays ended and refused; "
                f"{len(quiet)}/{len(quiet)} HTTP fixes stored once; flare track: {count}/{count} fixes confirmed and "
                f"stored once ({resent} sent again after the crash); of {acknowledged} fixes the broker acknowledged to a "
                f"PUBACK-only publisher while flared was paused, {lost} were lost with the broker's memory"), {
                    "restore_seconds": round(restore_seconds, 2), "tracker_fixes": count, "confirming_stored": total,
                    "confirming_resent": resent, "puback_only_acknowledged": acknowledged, "puback_only_stored": acked_stored,
                    "puback_only_lost": lost,
                    "http_fixes": len(quiet), "http_stored": http_stored}
    finally:
        if stack.flared:
            try:
                stack.flared.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
        stop_processes(*trackers)
        stack.stop()


def case_disk_full(work, quick):
    """The store's filesystem fills up: clear errors, /healthz 503, no crash; recovers when space returns."""
    mount = os.path.join(work, "small")
    os.makedirs(mount)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mount], capture_output=True).returncode != 0:
        return "SKIPPED: cannot mount a small tmpfs here (needs root)", {"skipped": True}
    stack = None
    try:
        # The whole 8 MiB is below the default minimum of free space: 1 MiB here, so that it is healthy until filled.
        # (6 MiB left less than 1 MiB free once the 20,000 fixes, with their battery and connectivity columns, and a
        # WAL grown to the 1,000-page checkpoint were in.)
        stack = new_stack(work, data=os.path.join(mount, "data"), env={"FLARE_STORE_MIN_FREE_MB": "1"})
        shares = [stack.create_share()["share_id"] for _ in range(5)]
        filler = os.path.join(mount, "filler")
        # Unbuffered: a buffered file that hit the full disk would raise again when it is closed.
        with open(filler, "wb", buffering=0) as f:  # fill every free byte
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        # Idle, nothing written yet: the free-space check alone already says so.
        status, _, body = stack.request("GET", "/healthz")
        assert status == 503 and json.loads(body)["store"] == "low_space", body
        pub = bench_publish(stack, shares, 20000, 4000, 0)
        wait_until(lambda: json.loads(stack.request("GET", "/healthz")[2])["store"] == "failing", 30,
                   "/healthz store=failing once writes fail")
        assert stack.flared.poll() is None, "flared exited on a full disk"
        assert stack.status("/healthz") == 503
        with open(os.path.join(work, "flared.log")) as f:
            assert "cannot write" in f.read(), "no clear error in the log"
        os.remove(filler)
        pub.communicate(timeout=60)
        wait_until(lambda: stack.status("/healthz") == 200, 60,
                   lambda: "/healthz healthy after space returned (it says " + stack.request("GET", "/healthz")[2].decode(errors="replace") + ")")
        wait_until(lambda: stack.rows("SELECT count(*) FROM fixes")[0][0] == 20000, 60, "every queued fix written after recovery")
        return ("disk full: /healthz 503 store=low_space while idle, then store=failing, flared kept running, "
                "all 20,000 fixes written once space returned"), {}
    finally:
        if stack:
            stack.stop()
        subprocess.run(["umount", "-l", mount], capture_output=True)


def case_read_only(work, quick):
    """The store's filesystem turns read-only mid-stream (ext4 errors=remount-ro, as after an I/O error): clear
    errors, /healthz 503, no crash; a bounded shutdown that says how many fixes it could not write; and after the
    filesystem is repaired, every fix stored, including those (never acknowledged, so the broker kept them)."""
    image, mount = os.path.join(work, "store.img"), os.path.join(work, "ext4")
    os.makedirs(mount)
    ready = (all(shutil.which(tool) for tool in ("truncate", "mkfs.ext4", "e2fsck", "findmnt", "mount"))
             and subprocess.run(["truncate", "-s", "64M", image]).returncode == 0
             and subprocess.run(["mkfs.ext4", "-q", image], capture_output=True).returncode == 0
             and subprocess.run(["mount", "-o", "loop,errors=remount-ro", image, mount], capture_output=True).returncode == 0)
    if not ready:
        return "SKIPPED: cannot loop-mount an ext4 image here (needs root and loop devices)", {"skipped": True}
    device = subprocess.run(["findmnt", "-n", "-o", "SOURCE", mount], capture_output=True, text=True).stdout.strip()
    trigger = f"/sys/fs/ext4/{os.path.basename(device)}/trigger_fs_error"
    if not os.path.exists(trigger):
        subprocess.run(["umount", mount], capture_output=True)
        return "SKIPPED: this kernel has no ext4 trigger_fs_error", {"skipped": True}
    stack = None
    try:
        stack = new_stack(work, data=os.path.join(mount, "data"), env={"FLARE_SHUTDOWN_STORE_GRACE_S": "2", "FLARE_STORE_MIN_FREE_MB": "1"})
        shares = [stack.create_share()["share_id"] for _ in range(5)]
        before = 1000 if quick else 3000
        bench_publish(stack, shares, before, 1000, 0).communicate(timeout=60)
        wait_until(lambda: stack.rows("SELECT count(*) FROM fixes")[0][0] == before, 30, "the first fixes stored")
        # What the OS had not yet written back is gone when a filesystem fails (as at a power loss, and SQLite's
        # synchronous=NORMAL accepts losing the last ~250 ms of commits then); this case is about what flared does
        # next, so everything so far is flushed first.
        os.sync()
        with open(trigger, "w") as f:  # the kernel makes it read-only at once
            f.write("flare chaos: read-only store\n")
        # More than the ingest queue holds, unpaced: the MQTT thread ends up waiting for room that a failing store
        # never makes, which once made the shutdown below hang for ever.
        later = 20000
        pub = bench_publish(stack, shares, later, 0, before)
        wait_until(lambda: json.loads(stack.request("GET", "/healthz")[2])["store"] == "failing", 30, "/healthz store=failing")
        pub.communicate(timeout=60)
        assert stack.flared.poll() is None, "flared exited on a read-only disk"
        stack.flared.terminate()
        code = stack.flared.wait(30)  # bounded: it gives up on the store after FLARE_SHUTDOWN_STORE_GRACE_S
        with open(os.path.join(work, "flared.log")) as f:
            log = f.read()
        assert "writing next to the database fails too: Read-only file system" in log, "the log does not say why"
        lost = re.search(r"(\d+) received fixes could not be written", log)
        assert code == 1 and lost, f"shutdown did not report the unwritten fixes (exit {code})"
        lost = int(lost.group(1))
        # The operator repairs the filesystem and starts flared again: what the broker still held arrives.
        subprocess.run(["umount", mount], check=True)
        subprocess.run(["e2fsck", "-fy", image], capture_output=True)
        subprocess.run(["mount", "-o", "loop", image, mount], check=True)
        stack.start_flared()
        # The unwritten ones were never acknowledged, so the broker kept them too: every fix arrives.
        stored = stored_once_settled(stack, before + later, seconds=60)
        assert stack.rows("PRAGMA integrity_check")[0][0] == "ok"
        assert stored == before + later, f"{stored} stored, expected {before + later}"
        return (f"read-only store: /healthz 503 store=failing, the log names the read-only filesystem, shutdown gave up after "
                f"2 s with {lost} of {later} later fixes read but unwritten; after repair all {stored} stored: the {before} "
                f"from before and the {later} later ones, which the broker had kept for flared's session"), {"unwritten_at_shutdown": lost, "stored": stored}
    finally:
        if stack:
            stack.stop()
        subprocess.run(["umount", "-l", mount], capture_output=True)


def raw(stack, data, read_timeout=5, source=HOST):
    s = socket.create_connection((HOST, stack.http_port), timeout=read_timeout, source_address=(source, 0))
    try:
        s.sendall(data)
        chunks = b""
        while b"\r\n\r\n" not in chunks:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks += chunk
        return chunks
    except OSError as error:
        return str(error).encode()
    finally:
        s.close()


def status_of(response):
    try:
        return int(response.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def case_bad_http(work, quick):
    """Malformed HTTP against the live gateway: every case a 4xx (or a closed connection), process healthy after."""
    stack = new_stack(work)
    try:
        share = stack.create_share()
        token = share["share_url"].rsplit("/", 1)[1]
        auth = f"Authorization: Bearer {stack.owner_key}\r\n".encode()

        def post(path, headers, body):
            return (f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode() + headers
                    + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        json_type = b"Content-Type: application/json\r\n"
        ingest = f"/api/v1/shares/{share['share_id']}/locations"
        device = f"Authorization: Bearer {share['device_token']}\r\n".encode()
        cases = {
            "huge header": b"GET /api/v1/view/x HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n",
            "many headers": b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(3000)) + b"\r\n",
            "bad method": b"BREW /api/v1/shares HTTP/1.1\r\nHost: x\r\n\r\n",
            "DELETE on view": f"DELETE /api/v1/view/{token} HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
            "garbage request line": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
            "bad JSON": post("/api/v1/shares", auth + json_type, b'{"durat:'),
            "JSON not an object": post("/api/v1/shares", auth + json_type, b"[1,2,3]"),
            "deeply nested JSON": post("/api/v1/shares", auth + json_type, b"[" * 5000 + b"]" * 5000),
            "wrong content type": post("/api/v1/shares", auth + b"Content-Type: text/plain\r\n", b"hi"),
            "body too large": b"POST /api/v1/shares HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Type: application/json\r\nContent-Length: 10000000\r\n\r\n{",
            "negative duration": post("/api/v1/shares", auth + json_type, b'{"duration_s":-5}'),
            "duration not a number": post("/api/v1/shares", auth + json_type, b'{"duration_s":"soon"}'),
            "unicode token (page)": "GET /s/%E2%98%83%F0%9F%94%A5 HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
            "raw UTF-8 token": "GET /api/v1/view/☃🔥 HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
            "NUL in path": b"GET /api/v1/view/ab%00cd HTTP/1.1\r\nHost: x\r\n\r\n",
            "dot-dot asset": b"GET /viewer/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
            "no auth on create": post("/api/v1/shares", json_type, b"{}"),
            "wrong owner key": post("/api/v1/shares", b"Authorization: Bearer flare_ok_nope\r\n" + json_type, b"{}"),
            "ingest without token": post(ingest, json_type, b'{"lat":1,"lon":2}'),
            "ingest bad payload": post(ingest, device + json_type, b'{"lat":999,"lon":2}'),
            "ingest not JSON": post(ingest, device + json_type, b"\xff\xfe\x00garbage"),
        }
        failures = []
        for name, data in cases.items():
            response = raw(stack, data)
            code = status_of(response)
            # A request libmicrohttpd cannot parse may be closed without an answer; never a 2xx or 5xx.
            if not (400 <= code < 500 or (code == 0 and name in ("garbage request line", "huge header", "many headers"))):
                failures.append(f"{name}: {response[:80]!r}")
        # Slow clients: each sends a header a byte at a time (bounded: 8 clients x 3 s) while others are served.
        slow = []
        for i in range(8):
            s = socket.create_connection((HOST, stack.http_port), timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHo")
            slow.append(s)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3:
            for s in slow:
                try:
                    s.sendall(b"s")
                except OSError:
                    pass
            if stack.status("/healthz") != 200:
                failures.append("healthz failed while slow clients dribbled")
                break
            time.sleep(0.2)
        for s in slow:
            s.close()
        assert stack.flared.poll() is None, "flared died"
        assert stack.status("/healthz") == 200, "flared unhealthy after the bad input"
        assert not failures, "; ".join(failures)
        return f"{len(cases)} malformed requests answered 4xx (or closed), 8 slow clients did not block others, healthy after", {"cases": len(cases)}
    finally:
        stack.stop()


def case_link_abuse(work, quick):
    """Brute-forcing tokens and hammering one link: 429 + Retry-After per address and per token; other links fine."""
    stack = new_stack(work, env={"FLARE_LINK_RATE_PER_ADDRESS": "5/60", "FLARE_LINK_RATE_PER_TOKEN": "20/120"})
    try:
        a = stack.create_share()["share_url"].rsplit("/", 1)[1]
        b = stack.create_share()["share_url"].rsplit("/", 1)[1]
        # Brute force from 127.0.0.2: unknown tokens cost more, so the address is cut off quickly. Each 429 is
        # checked as it comes (a later request could find a refilled bucket).
        codes, retry_after = [], []
        for i in range(40):
            status, headers, _ = stack.request("GET", f"/api/v1/view/{'A' * 22}{i:04d}", source="127.0.0.2")
            codes.append(status)
            if status == 429:
                retry_after.append(int(headers.get("Retry-After", "0")))
        assert 429 in codes and codes.index(429) <= 15, f"brute force not limited soon enough: {codes[:15]}"
        assert min(retry_after) >= 1, "a 429 without Retry-After for the limited address"
        # The limited address does not hurt anyone else's access to link A.
        assert stack.request("GET", f"/api/v1/view/{a}", source="127.0.0.3")[0] == 200, "another address was hurt"
        # Hammering link B from many addresses trips the per-token limit; link A stays reachable.
        token_codes, retry_after = [], []
        for i in range(200):
            status, headers, _ = stack.request("GET", f"/api/v1/view/{b}", source=f"127.0.{1 + i // 50}.{10 + i % 50}")
            token_codes.append(status)
            if status == 429:
                retry_after.append(int(headers.get("Retry-After", "0")))
        assert 429 in token_codes, "per-token limit never applied"
        assert min(retry_after) >= 1, "a 429 without Retry-After for the hammered token"
        assert stack.request("GET", f"/api/v1/view/{a}", source="127.0.9.9")[0] == 200, "the hammered token hurt another link"
        assert stack.metric("flare_http_rate_limited_total") > 0
        return (f"brute force cut off after {codes.index(429)} tries; hammered link 429 after {token_codes.index(429)} requests; "
                "other links and addresses unaffected"), {}
    finally:
        stack.stop()


def case_cluster_kill9(work, quick):
    """Two instances share the stream; kill -9 of A several times during 1,000 QoS 1 fixes/s: every fix stored exactly
    once, and B's live viewers keep receiving fixes (the largest gap is reported).

    A's persistent session in the shared subscription keeps A's turn while it is down; A restarts with the same
    client id and drains it, so nothing it had read and not stored is lost."""
    cluster = new_stack(work, store="postgres", instances=2)
    viewer = None
    try:
        created = [cluster.a.create_share() for _ in range(10)]
        shares = [share["share_id"] for share in created]
        viewer = LiveViewer(cluster.b.http_port, created[0]["share_url"].rsplit("/", 1)[1])
        seconds = 6 if quick else 20
        kills = 2 if quick else 5
        total = 1000 * seconds
        pub = bench_publish(cluster, shares, total, 1000, 0)
        for _ in range(kills):
            time.sleep(seconds / (kills + 1))
            cluster.a.process.send_signal(signal.SIGKILL)
            cluster.a.process.wait()
            time.sleep(0.3)
            cluster.a.start()
        out, _ = pub.communicate(timeout=seconds + 60)
        published = json.loads(out.strip().splitlines()[-1])["published"]
        assert published == total, f"publisher handed over {published} of {total}"

        def count():
            return cluster.count("SELECT count(*) FROM fixes")
        try:
            wait_until(lambda: count() >= total, 60, "every fix stored")
        except AssertionError:
            pass
        time.sleep(1.0)
        stored = count()
        distinct = cluster.count("SELECT count(*) FROM (SELECT DISTINCT share, lat, lon FROM fixes) d")
        assert stored == distinct, f"{stored - distinct} fixes stored twice"
        assert stored == total, f"lost {total - stored} of {total} fixes"
        received = len(viewer.arrivals)
        # One share of ten gets a tenth of the stream: 100 fixes/s. Most of them must reach B's viewer live.
        assert received >= seconds * 100 * 0.5, f"B's live viewer received only {received} fixes"
        gap = viewer.largest_gap()
        return (f"{kills} x kill -9 of A during {total} QoS 1 fixes at 1,000/s shared with B: stored {stored}, duplicates 0, "
                f"lost 0; B's live viewer of one share received {received} fixes, largest gap {gap:.2f} s"), {
                    "kills": kills, "published": total, "stored": stored, "viewer_fixes": received, "largest_gap_s": round(gap, 3)}
    finally:
        if viewer:
            viewer.close()
        cluster.stop()


def case_cluster_postgres_restart(work, quick):
    """PostgreSQL restarted mid-stream: /healthz says so on both instances meanwhile; nothing lost afterwards."""
    cluster = new_stack(work, store="postgres", instances=2)
    try:
        shares = [cluster.a.create_share()["share_id"] for _ in range(10)]
        total = 4000 if quick else 20000
        pub = bench_publish(cluster, shares, total, 1000, 0)
        time.sleep(1.0)
        cluster.postgres.stop()
        down = time.monotonic()
        for stack in (cluster.a, cluster.b):
            wait_until(lambda: json.loads(stack.request("GET", "/healthz")[2])["store"] == "failing", 30,
                       "/healthz store=failing while PostgreSQL is down")
            assert stack.status("/healthz") == 503
        time.sleep(max(0.0, 3.0 - (time.monotonic() - down)))
        cluster.postgres.start()
        for stack in (cluster.a, cluster.b):
            wait_until(lambda: stack.status("/healthz") == 200, 60, "/healthz healthy once PostgreSQL is back")
        pub.communicate(timeout=120)
        wait_until(lambda: cluster.count("SELECT count(*) FROM fixes") >= total, 60, "every fix stored after the restart")
        time.sleep(1.0)
        stored = cluster.count("SELECT count(*) FROM fixes")
        assert stored == total, f"stored {stored} of {total}"
        return (f"PostgreSQL down for {time.monotonic() - down:.0f} s mid-stream: both instances /healthz 503 store=failing "
                f"meanwhile, 200 after; all {total} fixes stored once"), {"published": total, "stored": stored}
    finally:
        cluster.stop()


def case_cluster_postgres_pause(work, quick):
    """PostgreSQL paused (SIGSTOP: its sockets stay open, nothing answers): the instance that has not seen a share
    answers its link, and an owner key it has not seen, 503 with Retry-After within seconds (never 401, 404 or no
    answer at all), and serves both within a moment of SIGCONT."""
    cluster = new_stack(work, store="postgres", instances=2)
    paused = False
    try:
        admin = {"Authorization": f"Bearer {cluster.a.owner_key}", "Content-Type": "application/json"}
        status, _, body = cluster.a.request("POST", "/api/v1/keys", json.dumps({"label": "chaos"}), admin)
        assert status == 201, (status, body[:200])
        new_key = {"Authorization": f"Bearer {json.loads(body)['key']}"}
        # B is stopped while A makes the share, so that B's change feed cannot have read it before the pause.
        cluster.b.process.send_signal(signal.SIGSTOP)
        try:
            token = cluster.a.create_share()["share_url"].rsplit("/", 1)[1]
            cluster.postgres.pause()
            paused = True
        finally:
            cluster.b.process.send_signal(signal.SIGCONT)
        waits = {}
        for what, path, headers in [("link", f"/api/v1/view/{token}", {}), ("owner key", "/api/v1/shares", new_key)]:
            started = time.monotonic()
            status, answer_headers, body = cluster.b.request("GET", path, headers=headers)
            waits[what] = time.monotonic() - started
            assert status == 503 and "Retry-After" in answer_headers, f"{what} answered {status} while PostgreSQL was paused: {body[:200]}"
            assert json.loads(body)["error"] == "store_unavailable", body[:200]
            assert waits[what] < 8, f"the {what} took {waits[what]:.1f} s to be answered while PostgreSQL was paused"
        cluster.postgres.resume()
        paused = False
        resumed = time.monotonic()
        wait_until(lambda: cluster.b.status(f"/api/v1/view/{token}") == 200, 15, "B serving the link after SIGCONT")
        back = time.monotonic() - resumed
        status = cluster.b.request("GET", "/api/v1/shares", headers=new_key)[0]
        assert status == 200, f"the owner key answered {status} after SIGCONT"
        return (f"PostgreSQL paused: B answered a link it had not seen in {waits['link']:.2f} s and an owner key in "
                f"{waits['owner key']:.2f} s, both 503 store_unavailable with Retry-After; the link served {back:.2f} s "
                f"after SIGCONT"), {"link_503_s": round(waits["link"], 3), "key_503_s": round(waits["owner key"], 3),
                                     "served_after_resume_s": round(back, 3)}
    finally:
        if paused:
            cluster.postgres.resume()
        cluster.stop()


# The attack group (scripts/chaos/attacks.py): each against a real plugin broker and flared.
ATTACKS = [(name, functools.partial(case, new_stack)) for name, case in attacks.CASES]

# The NATS group (scripts/chaos/natscases.py): three nodes behind HAProxy, one killed.
NATS = [(name, functools.partial(case, new_stack)) for name, case in natscases.CASES]

CASES = ATTACKS + NATS + [("cluster: kill -9 of one instance", case_cluster_kill9), ("cluster: PostgreSQL restart", case_cluster_postgres_restart),
         ("cluster: PostgreSQL paused", case_cluster_postgres_pause),
         ("kill -9 during ingest", case_kill9), ("kill -9 mid-burst", case_kill9_burst), ("broker restart", case_broker_restart),
         ("broker crash", case_broker_crash), ("disk full", case_disk_full), ("read-only disk", case_read_only),
         ("malformed HTTP", case_bad_http), ("link abuse", case_link_abuse)]


def main():
    global BIN
    parser = argparse.ArgumentParser(prog="python3 -m scripts.chaos.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter streams (the subset for make test)")
    parser.add_argument("--release", action="store_true", help="use the release build")
    parser.add_argument("--only", default="", help="comma-separated case-name substrings")
    args = parser.parse_args()
    if args.release:
        BIN = RELEASE_BIN
    passed = failed = 0
    report = []
    for name, case in CASES:
        if args.only and not any(part in name for part in args.only.split(",")):
            continue
        work = tempfile.mkdtemp(prefix="flare-chaos-")
        started = time.monotonic()
        try:
            summary, figures = case(work, args.quick)
            passed += 1
            print(f"PASS {name} ({time.monotonic() - started:.1f} s): {summary}", flush=True)
            report.append({"case": name, "pass": True, "summary": summary, **figures})
        except Exception as error:  # noqa: BLE001 - a failed case is reported, the rest still run
            failed += 1
            print(f"FAIL {name} ({time.monotonic() - started:.1f} s): {error}  [logs in {work}]", flush=True)
            report.append({"case": name, "pass": False, "error": str(error)})
            continue
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(ROOT, "bench-results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench-results", "chaos-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + ".json"), "w") as f:
        json.dump(report, f, indent=2)
    print(f"chaos: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
