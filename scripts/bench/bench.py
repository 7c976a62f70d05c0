"""Flare's benchmark suite (`make bench`, `make bench ARGS=--long`).

Starts its own mosquitto (scripts/broker.sh) and a release-built flared on free loopback ports in a temp
directory, measures each benchmark against a reference taken in the same run, prints a table and writes
bench-results/<time>.json. Every load goes to 127.0.0.1 only, is bounded in count and time, and stops itself.
From the repository root: `/usr/bin/python3 -m scripts.bench.bench [--long] [--only ROWS] [--keep]` (docs/performance.md).
"""
import argparse
import http.client
import json
import os
import resource
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

from scripts.bench import natsbench
from scripts.bench import push as pushbench
from scripts.bench import track as trackbench
from scripts.flarestack import HOST, RELEASE_BIN, ROOT, MailCatcher, Stack, WaitTimeout, cpu_seconds, free_port, port_open, rss_mb, wait_until

RELEASE = RELEASE_BIN  # bursts.py --release-dir and memory.py --heaptrack change it

# The benchmarks measure throughput, not the link rate limits (the fault tests check those); every viewer of the
# benchmarks comes from 127.0.0.1, many of them on one link; a share lives a day.
BENCH_ENV = {"FLARE_LINK_RATE_PER_ADDRESS": "1000000/1000000", "FLARE_LINK_RATE_PER_TOKEN": "1000000/1000000",
             "FLARE_SOS_RATE_PER_ADDRESS": "1000000/1000000",
             "FLARE_LIVE_STREAMS_PER_LINK": "10000", "FLARE_LIVE_STREAMS_PER_ADDRESS": "10000",
             "FLARE_MAX_DURATION_S": "86400", "FLARE_DEFAULT_DURATION_S": "86400"}


def bench_stack(work: str, **options) -> Stack:
    """A broker and a release-built flared as the benchmarks run them, in `work` (`options`: Stack's: store, durable,
    instances, env)."""
    env = dict(BENCH_ENV, **options.pop("env", {}))
    return Stack(work, bin_dir=RELEASE, log_level="warning", env=env, **options)


def create_shares(stack, count, threads=4):
    """POST /api/v1/shares `count` times on `threads` keep-alive connections. Returns (shares, seconds)."""
    results = [[] for _ in range(threads)]
    body = json.dumps({"duration_s": 86400}).encode()
    headers = {"Authorization": f"Bearer {stack.owner_key}", "Content-Type": "application/json"}

    def worker(slot, n):
        conn = http.client.HTTPConnection(HOST, stack.http_port, timeout=30)
        for _ in range(n):
            conn.request("POST", "/api/v1/shares", body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            if response.status != 201:
                raise SystemExit(f"bench: share create answered {response.status}: {data[:200]!r}")
            doc = json.loads(data)
            results[slot].append((doc["share_id"], doc["share_url"].rsplit("/", 1)[1]))
        conn.close()

    started = time.monotonic()
    pool = [threading.Thread(target=worker, args=(i, count // threads + (1 if i < count % threads else 0))) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return [s for r in results for s in r], time.monotonic() - started


# wrk's script for share creation: POST with the owner key, every answer's status checked, until `limit` answers
# (the script's argument). It says when it got there, so the rate is timed to that moment, not to wrk's -d. The key
# comes from the environment, so it is never written to a file or a command line.
CREATE_SCRIPT = r"""
wrk.method = "POST"
wrk.body = '{"duration_s": 86400}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("FLARE_BENCH_KEY")
-- Globals, not locals: done() runs in the main state and reads each thread's counts with thread:get().
threads = {}
created, refused, limit = 0, 0, 0
function setup(thread) table.insert(threads, thread) end
function init(args) limit = tonumber(args[1]) end
function response(status, headers, body)
  if status == 201 then created = created + 1 else refused = refused + 1 end
  if created + refused == limit then
    io.write("flare-create-reached\n")
    io.flush()
    wrk.thread:stop()
  end
end
function done(summary, latency, requests)
  local c, r = 0, 0
  for _, t in ipairs(threads) do c = c + t:get("created"); r = r + t:get("refused") end
  io.write(string.format("flare-create %d %d %d %d %d\n", c, r, summary.errors.connect + summary.errors.read
    + summary.errors.write + summary.errors.timeout, latency:percentile(50), latency:percentile(99)))
end
"""


def at_level(stack):
    """What a scale row reads at its level, before the creation burst: (flared's RSS in MB, the row's fields: live
    shares and both processes' memory)."""
    flared_mb = rss_mb(stack.flared.pid)
    return flared_mb, {"live_shares": int(stack.metric("flare_shares_active")), "flared_rss_mb": round(flared_mb, 1),
                       "mosquitto_rss_mb": round(rss_mb(stack.broker.pid), 1)}


def creation_at(stack, level):
    """The creation burst with `level` live shares (a tenth more, 500 to 5,000): (created per s, the row's fields)."""
    rate, p50, p99 = create_burst(stack, max(500, min(5000, level // 10)))
    return rate, {"create_per_s": round(rate), "create_p50_ms": round(p50, 2), "create_p99_ms": round(p99, 2)}


def wal_file_mb(stack):
    """The size of SQLite's WAL file in MB (None on PostgreSQL). The file keeps its largest size until SQLite truncates
    it: how far checkpoints have let the WAL grow so far."""
    wal = os.path.join(stack.data, "flare.db-wal")
    return round(os.path.getsize(wal) / 1e6, 1) if os.path.exists(wal) else None


def create_burst(stack, count, connections=8):
    """Creates `count` shares with wrk (a C client, on one thread: the Python client's own CPU, on the same two cores,
    cost about a quarter of the machine per creation). Returns (created per s, p50 ms, p99 ms); any answer but 201
    fails the run."""
    script = os.path.join(stack.work, "create.lua")
    with open(script, "w") as f:
        f.write(CREATE_SCRIPT)
    bound = max(30, count // 200)
    wrk = subprocess.Popen(["wrk", "-t1", f"-c{connections}", f"-d{bound}s", "-s", script,
                            f"http://{HOST}:{stack.http_port}/api/v1/shares", "--", str(count)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(stack.env, FLARE_BENCH_KEY=stack.owner_key))
    started = time.monotonic()
    took = None
    for line in wrk.stdout:
        if line.startswith("flare-create-reached"):
            took = time.monotonic() - started
            break
    wrk.send_signal(signal.SIGINT)  # wrk then stops and prints its summary
    out, err = wrk.communicate(timeout=30)
    summary = next((line for line in out.splitlines() if line.startswith("flare-create ")), None)
    if took is None or summary is None:
        raise SystemExit(f"bench: wrk share creation did not finish: {err.strip()[-300:]}")
    created, refused, errors, p50_us, p99_us = (int(x) for x in summary.split()[1:])
    if refused or errors or created < count:
        raise SystemExit(f"bench: wrk share creation: {created} created, {refused} refused, {errors} socket errors")
    return count / took, p50_us / 1000, p99_us / 1000


# The database alone doing what one share creation asks of it: the statement PostgresShareStore.insert sends (the share,
# its share.started event and the event's delivery, in one transaction; keep the two alike), with random ids. Its
# delivery is due in the far future, so flared's deliverer never picks it up.
REFERENCE_CREATE_SQL = """
WITH share AS (INSERT INTO shares (share_id, view_token_hash, name, created_at, expires_at, owner_key)
               VALUES (left(md5(random()::text), 22), sha256(random()::text::bytea), '', 1764000000000, 1864000000000,
                       (SELECT min(id) FROM owner_keys)) RETURNING id, owner_key),
event AS (INSERT INTO events (event_id, share, type, at, body)
          SELECT md5(random()::text), share.id, 'share.started', 1764000000000,
                 '{"id":"0123456789abcdef0123456789abcdef","type":"share.started","share_id":"0123456789abcdef012345","at":"2026-12-01T00:00:00Z","name":""}'
          FROM share RETURNING id),
deliveries AS (
    INSERT INTO event_deliveries (event, destination, next_at)
    SELECT event.id, destination, 9000000000000000 FROM event, unnest('{mqtt}'::text[]) destination
    UNION ALL
    SELECT event.id, 'key:' || k.id, 9000000000000000 FROM event, share, owner_keys k
    WHERE k.id = share.owner_key AND k.webhook_url IS NOT NULL AND k.revoked_at IS NULL AND 'key:' || k.id <> ALL ('{mqtt}'::text[]))
SELECT id FROM share;
"""


def reference_creations(work, postgres, seconds=3, clients=8):
    """pgbench (C) running REFERENCE_CREATE_SQL on `clients` connections: creations per s of the database alone."""
    script = os.path.join(work, "reference-create.sql")
    with open(script, "w") as f:
        f.write(REFERENCE_CREATE_SQL)
    out = subprocess.run([postgres.program("pgbench"), "-n", "-M", "prepared", "-c", str(clients), "-j", "1", "-T", str(seconds), "-f", script, postgres.url],
                         capture_output=True, text=True, timeout=seconds + 60)
    tps = next((float(line.split()[2]) for line in out.stdout.splitlines() if line.startswith("tps = ")), None)
    if out.returncode != 0 or tps is None:
        raise SystemExit(f"bench: pgbench reference failed: {out.stderr.strip()[-300:]}")
    return tps


def reference_store_creations(stack, level, count):
    """`flare bench store-create`: SQLiteShareStore alone, in one process, making `count` shares with their events on a
    new file that holds `level` shares already: creations per s of the store alone (the SQLite rows' reference)."""
    directory = os.path.join(stack.work, f"store-reference-{level}")
    out = subprocess.run([os.path.join(RELEASE, "flare"), "bench", "store-create", "--store-dir", directory, "--live", str(level),
                          "--count", str(count)], capture_output=True, text=True, timeout=600)
    shutil.rmtree(directory, ignore_errors=True)
    if out.returncode != 0:
        raise SystemExit(f"bench: flare bench store-create failed: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def flare_cli(stack, *args, timeout=600):
    out = subprocess.run([os.path.join(RELEASE, "flare"), "bench", *args, "--mqtt-url", f"mqtt://{HOST}:{stack.mqtt_port}"],
                         capture_output=True, text=True, timeout=timeout, env=stack.env)
    if out.returncode != 0:
        raise SystemExit(f"bench: flare bench {args[0]} failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def shares_file(stack, shares, name):
    path = os.path.join(stack.work, name)
    with open(path, "w") as f:
        f.write("".join(s[0] + "\n" for s in shares))
    return path


def reference_delivery(stack, path, total, qos, burst):
    """The same stream to a bare libmosquitto subscriber on a topic tree flared does not read: (received, per s).

    The stream goes in bursts of `burst` fixes, each sent as fast as the broker takes it once the previous one
    has arrived: mosquitto 2.0 disconnects a publisher ("out of memory") when a subscriber's queue reaches
    max_queued_bytes, so an unpaced 200,000-fix burst measures that limit, not delivery.
    """
    bursts = (total + burst - 1) // burst
    prefix = f"bench/q{qos}"
    counter = subprocess.Popen([os.path.join(RELEASE, "flare"), "bench", "count", "--mqtt-url", f"mqtt://{HOST}:{stack.mqtt_port}",
                                "--pattern", f"{prefix}/+/location", "--qos", str(qos), "--expect", str(total),
                                "--report-every", str(burst), "--timeout", "60" if qos else "10"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=stack.env)
    assert counter.stderr.readline().strip() == "ready"
    start_ns = None
    received, end_ns = 0, 0
    final_line = None
    for b in range(bursts):
        n = min(burst, total - b * burst)
        pub = flare_cli(stack, "publish", "--shares-file", path, "--prefix", prefix, "--count", str(n), "--qos", str(qos), "--offset", str(b * burst))
        start_ns = start_ns or pub["start_ns"]
        # QoS 0 may drop: then the progress line never comes and the counter's own timeout ends the run.
        if select.select([counter.stdout], [], [], 30 if qos else 3)[0]:
            line = counter.stdout.readline()
            if line:
                line = json.loads(line)
                if "at_ns" not in line:  # the counter's final line: it ended (timeout) before this burst arrived
                    final_line = line
                    break
                received, end_ns = line["received"], line["at_ns"]
    out = counter.stdout.read()  # not communicate(): it would skip what readline() already buffered
    err = counter.stderr.read()
    counter.wait(320)
    lines = [json.loads(x) for x in out.strip().splitlines() if x.strip()]
    if final_line:
        lines.append(final_line)
    finals = [x for x in lines if "last_ns" in x]
    if not finals:
        raise SystemExit(f"bench: the reference subscriber failed ({counter.returncode}): {err.strip()[-300:]}")
    if finals[-1]["received"] > received:
        received, end_ns = finals[-1]["received"], finals[-1]["last_ns"]
    return received, received / max(1e-9, (end_ns - start_ns) / 1e9)


def flare_ingest(stack, path, total, qos, burst, offset):
    """The same stream to Flare's topics, timed until flared has stored it: (accepted, new rows, per s)."""
    bursts = (total + burst - 1) // burst
    accepted0 = stack.metric("flare_fixes_accepted_total")
    rows0 = stack.stored_fixes()

    def wait_accepted(target, seconds=120):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = stack.metric("flare_fixes_accepted_total") - accepted0
            if value >= target:
                return value, time.time_ns()
            time.sleep(0.005)
        return stack.metric("flare_fixes_accepted_total") - accepted0, None

    start_ns = None
    accepted, end_ns = 0, None
    for b in range(bursts):
        n = min(burst, total - b * burst)
        pub = flare_cli(stack, "publish", "--shares-file", path, "--count", str(n), "--qos", str(qos), "--offset", str(offset + b * burst))
        start_ns = start_ns or pub["start_ns"]
        accepted, end_ns = wait_accepted(b * burst + n, 120 if qos else 3)
        if end_ns is None:
            end_ns = time.time_ns()
            if qos:
                break
    return int(accepted), stack.stored_fixes() - rows0, accepted / max(1e-9, (end_ns - start_ns) / 1e9)


def bench_ingest(stack, shares, total, qos, burst, rounds):
    """`rounds` times: the reference, then Flare, each with the whole stream. On a two-core machine the broker, the
    publisher and the subscriber share the CPUs, and one pair measured minutes apart differed by ±15 %; the
    median of alternating pairs is what a change can be judged by."""
    path = shares_file(stack, shares, "ingest-shares.txt")
    pairs = []
    for r in range(rounds):
        ref_received, ref_rate = reference_delivery(stack, path, total, qos, burst)
        accepted, rows, flare_rate = flare_ingest(stack, path, total, qos, burst, offset=10 * total * (r + 1))  # new rows
        pairs.append({"reference_received": ref_received, "reference_per_s": round(ref_rate), "flare_accepted": accepted,
                      "flare_rows": rows, "flare_per_s": round(flare_rate), "ratio": round(flare_rate / ref_rate, 3)})
    median = sorted(pairs, key=lambda p: p["ratio"])[len(pairs) // 2]
    stored_all = all(p["flare_rows"] >= total for p in pairs)
    return {"name": f"ingest QoS {qos}", "fixes": total, "shares": len(shares), "burst": burst, "rounds": rounds,
            **median, "ratios": [p["ratio"] for p in pairs], "target": ">= 0.8",
            "pass": median["ratio"] >= 0.8 and (stored_all if qos else True)}


class SSEViewers:
    """Many Server-Sent-Events connections on one selector thread; records (receive ns, fix lat) per event."""

    def __init__(self, stack, tokens):
        self.sel = selectors.DefaultSelector()
        self.events = []
        self.errors = 0
        self.open = 0
        self.stop = False
        for token in tokens:
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex((HOST, stack.http_port))
            request = f"GET /api/v1/view/{token}/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode()
            self.sel.register(s, selectors.EVENT_WRITE, {"buf": b"", "req": request, "hdr": False})
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop:
            for key, mask in self.sel.select(timeout=0.1):
                s, st = key.fileobj, key.data
                if mask & selectors.EVENT_WRITE:
                    try:
                        s.send(st["req"])
                        self.sel.modify(s, selectors.EVENT_READ, st)
                    except OSError:
                        self.errors += 1
                        self.sel.unregister(s)
                        s.close()
                    continue
                try:
                    chunk = s.recv(65536)
                except OSError:
                    chunk = b""
                now = time.time_ns()
                if not chunk:
                    self.sel.unregister(s)
                    s.close()
                    self.open -= 1 if st["hdr"] else 0
                    continue
                st["buf"] += chunk
                if not st["hdr"]:
                    if b"\r\n\r\n" not in st["buf"]:
                        continue
                    head, st["buf"] = st["buf"].split(b"\r\n\r\n", 1)
                    if not head.startswith(b"HTTP/1.1 200"):
                        self.errors += 1
                    st["hdr"] = True
                    self.open += 1
                while b"\n\n" in st["buf"]:
                    block, st["buf"] = st["buf"].split(b"\n\n", 1)
                    if b"event: fix" in block:
                        for line in block.split(b"\n"):
                            if line.startswith(b"data: "):
                                try:
                                    self.events.append((now, json.loads(line[6:])["lat"]))
                                except ValueError:
                                    pass

    def close(self):
        self.stop = True
        self.thread.join()
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()


def paho_publisher(stack):
    import paho.mqtt.client as mqtt
    client = mqtt.Client(client_id=f"flare-bench-lat-{os.getpid()}", protocol=mqtt.MQTTv311)
    client.max_inflight_messages_set(1000)
    with open(stack.env["FLARE_BENCH_PASSWORD_FILE"]) as f:
        client.username_pw_set("bench", f.read().strip())
    client.connect(HOST, stack.mqtt_port)
    client.loop_start()
    return client


def steady_publish(client, shares, rate, seconds, lat_base):
    """Publishes `rate` fixes/s for `seconds` round-robin over `shares`; returns {lat: send ns}.

    `client` comes from paho_publisher(), made before the viewers' sockets: paho 1.6 waits with select(),
    which cannot watch a descriptor numbered 1024 or higher."""
    sent = {}
    total = int(rate * seconds)
    start = time.monotonic()
    tst = int(time.time())
    for i in range(total):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        lat = round(lat_base + i * 1e-6, 6)
        payload = json.dumps({"_type": "location", "lat": lat, "lon": 8.5, "tst": tst, "acc": 5})
        sent[lat] = time.time_ns()
        client.publish(f"flare/v1/shares/{shares[i % len(shares)][0]}/location", payload, qos=1, retain=True)
    time.sleep(1.0)
    client.loop_stop()
    client.disconnect()
    return sent


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(round(p / 100 * (len(sorted_values) - 1))))]


def bench_latency(stack, shares, rate, seconds):
    publisher = paho_publisher(stack)
    viewers = SSEViewers(stack, [s[1] for s in shares])
    wait_until(lambda: viewers.open + viewers.errors >= len(shares), 30, "SSE viewers")
    sent = steady_publish(publisher, shares, rate, seconds, 48.0)
    time.sleep(0.5)
    viewers.close()
    lat_ms = sorted((ns - sent[round(lat, 6)]) / 1e6 for ns, lat in viewers.events if round(lat, 6) in sent)
    p99 = percentile(lat_ms, 99)
    return {"name": "latency publish->SSE", "rate_per_s": rate, "seconds": seconds, "viewers": len(shares),
            "sent": len(sent), "received": len(lat_ms), "p50_ms": round(percentile(lat_ms, 50), 2),
            "p99_ms": round(p99, 2), "max_ms": round(lat_ms[-1], 2) if lat_ms else None,
            "target": "p99 <= 25 ms", "pass": p99 <= 25 and len(lat_ms) == len(sent)}


def bench_tail(stack, shares, level, rate, seconds):
    """The latency row again with `level` live shares, each with a retained status and a retained position: the broker
    writes them all to disk every FLARE_MQTT_AUTOSAVE (5 s) in its one thread and holds every delivery meanwhile, so
    the `seconds` span several saves and the p99 and max say what a save costs a viewer."""
    missing = level - int(stack.metric("flare_shares_active"))
    if missing > 0:
        shares.extend(create_shares_with_positions(stack, missing, offset=9)[0])
    row = bench_latency(stack, shares[:100], rate, seconds)
    live = int(stack.metric("flare_shares_active"))
    row.update({"name": f"latency across saves, {live} shares", "live_shares": live, "target": "p99 <= 2 ms, max <= 10 ms",
                "pass": row["p99_ms"] <= 2 and (row["max_ms"] or 1e9) <= 10 and row["received"] == row["sent"]})
    return row


def wrk(url, seconds, connections):
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", url],
                         capture_output=True, text=True, timeout=seconds + 30).stdout
    rps = 0.0
    non2xx = 0
    for line in out.splitlines():
        if line.startswith("Requests/sec:"):
            rps = float(line.split()[1])
        if "Non-2xx" in line:
            non2xx = int(line.split()[-1])
    return rps, non2xx


def bench_view(stack, share, seconds, rounds):
    """wrk on the view JSON and the viewer page, then on nginx serving files of the same sizes."""
    token = share[1]
    view_body = stack.request("GET", f"/api/v1/view/{token}")[2]
    page_body = stack.request("GET", f"/s/{token}")[2]
    root = os.path.join(stack.work, "nginx")
    os.makedirs(os.path.join(root, "www"))
    with open(os.path.join(root, "www", "view.json"), "wb") as f:
        f.write(view_body)
    with open(os.path.join(root, "www", "page.html"), "wb") as f:
        f.write(page_body)
    port = free_port()
    conf = os.path.join(root, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 2;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {root}/tmp; proxy_temp_path {root}/tmp; fastcgi_temp_path {root}/tmp;
  uwsgi_temp_path {root}/tmp; scgi_temp_path {root}/tmp;
  keepalive_requests 1000000;
  server {{ listen {HOST}:{port}; root {root}/www; }}
}}
""")
    nginx = subprocess.Popen(["nginx", "-c", conf, "-g", "daemon off;"], stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: port_open(port), 10, "nginx")
        rows = []
        for label, flare_path, static in (("view JSON", f"/api/v1/view/{token}", "/view.json"), ("viewer page", f"/s/{token}", "/page.html")):
            # Alternating pairs, median ratio: wrk, nginx and flared share two cores, and one pair swings ±20 %.
            pairs = []
            for _ in range(rounds):
                flare_rps, flare_bad = wrk(f"http://{HOST}:{stack.http_port}{flare_path}", seconds, 50)
                nginx_rps, _ = wrk(f"http://{HOST}:{port}{static}", seconds, 50)
                pairs.append((flare_rps / nginx_rps if nginx_rps else 0, flare_rps, nginx_rps, flare_bad))
            ratio, flare_rps, nginx_rps, _ = sorted(pairs)[len(pairs) // 2]
            flare_bad = sum(p[3] for p in pairs)
            rows.append({"name": f"view endpoint: {label}", "bytes": len(view_body if static == "/view.json" else page_body),
                         "flare_rps": round(flare_rps), "flare_non_2xx": flare_bad, "nginx_rps": round(nginx_rps),
                         "ratio": round(ratio, 3), "ratios": [round(p[0], 3) for p in pairs], "target": ">= 0.5",
                         "pass": ratio >= 0.5 and flare_bad == 0})
        return rows
    finally:
        nginx.terminate()
        nginx.wait()


class RoundTripProbe:
    """MQTT round trips through the broker every 5 ms while something else runs: shows whether that stalls the
    broker (dynamic-security stalled all traffic for seconds while clients were added; Flare adds nothing there)."""

    def __init__(self, stack):
        import paho.mqtt.client as mqtt
        self.times = []
        self.sent = {}
        self.lock = threading.Lock()
        self.client = mqtt.Client(client_id=f"flare-bench-probe-{os.getpid()}", protocol=mqtt.MQTTv311)
        with open(stack.env["FLARE_BENCH_PASSWORD_FILE"]) as f:
            self.client.username_pw_set("bench", f.read().strip())
        self.client.on_message = self._received
        self.client.connect(HOST, stack.mqtt_port)
        self.client.subscribe("bench/probe", qos=0)
        self.client.loop_start()
        time.sleep(0.3)
        self.running = True
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()

    def _received(self, client, userdata, message):
        now = time.monotonic()
        with self.lock:
            sent = self.sent.pop(message.payload.decode(), None)
            if sent is not None:
                self.times.append((now - sent) * 1000)

    def _send(self):
        n = 0
        while self.running:
            n += 1
            with self.lock:
                self.sent[str(n)] = time.monotonic()
            self.client.publish("bench/probe", str(n), qos=0)
            time.sleep(0.005)

    def stop(self):
        self.running = False
        self.thread.join()
        time.sleep(0.5)
        self.client.loop_stop()
        self.client.disconnect()
        with self.lock:
            times = sorted(self.times)
            lost = len(self.sent)
        if not times:
            return {"probe_round_trips": 0, "probe_lost": lost}
        return {"probe_round_trips": len(times), "probe_lost": lost,
                "probe_p99_ms": round(times[int(len(times) * 0.99) - 1], 2), "probe_max_ms": round(times[-1], 2)}


def create_shares_with_positions(stack, count, offset):
    """`count` new shares, each given a last position (QoS 1, retained): in publishes of 40,000 at most (see
    bench_ingest: a larger unpaced burst gets the publisher disconnected), each waited for. Returns (shares, seconds
    the creations took)."""
    new, took = create_shares(stack, count)
    for start in range(0, len(new), 40_000):
        chunk = new[start:start + 40_000]
        path = shares_file(stack, chunk, "positioned-shares.txt")
        before = stack.metric("flare_fixes_accepted_total")
        flare_cli(stack, "publish", "--shares-file", path, "--count", str(len(chunk)), "--qos", "1", "--offset", str(offset))
        wait_until(lambda: stack.metric("flare_fixes_accepted_total") - before >= len(chunk), 120, "last positions")
    return new, took


def bench_scale(stack, shares, levels, viewer_count, rate, seconds):
    """Grows to each level of live shares, each with a last position; RSS and share-creation rate at each."""
    rows = []
    for level in levels:
        # Counted by flared: the creation bursts' shares (wrk's) are live too, and not in `shares`.
        missing = level - int(stack.metric("flare_shares_active"))
        created_rate = None
        if missing > 0:
            new, took = create_shares_with_positions(stack, missing, offset=7)
            shares.extend(new)
            created_rate = missing / took
        # Memory with `level` live shares, then the creation rate with them present: a short burst measured on its own.
        flared_mb, state = at_level(stack)
        probe = RoundTripProbe(stack)
        rate_created, creation = creation_at(stack, level)
        stall = probe.stop()
        reference = reference_store_creations(stack, level, max(500, min(5000, level // 10)))
        wal_mb = wal_file_mb(stack)
        rows.append({"name": f"scale {level} shares", **state, **creation, **({"wal_file_mb": wal_mb} if wal_mb is not None else {}),
                     "bulk_create_per_s": round(created_rate) if created_rate else None,
                     "store_alone_per_s": reference["creations_per_s"],
                     "ratio_to_store_alone": round(rate_created / reference["creations_per_s"], 2),
                     **stall,
                     "target": "flared <= 300 MB at 100k; create >= 2000/s; MQTT round trip < 100 ms while creating",
                     "pass": (flared_mb <= 300 or level < 100_000) and rate_created >= 2000
                             and stall.get("probe_max_ms", 1e9) < 100})
    if viewer_count:
        publisher = paho_publisher(stack)
        viewers = SSEViewers(stack, [s[1] for s in shares[:viewer_count]])
        wait_until(lambda: viewers.open + viewers.errors >= viewer_count, 120, f"{viewer_count} SSE viewers")
        opened = viewers.open
        before = len(viewers.events)
        sent = steady_publish(publisher, shares[:viewer_count], rate, seconds, 49.0)
        time.sleep(1)
        got = sum(1 for _, lat in viewers.events[before:] if round(lat, 6) in sent)
        rows.append({"name": f"{viewer_count} SSE viewers", "open": opened, "errors": viewers.errors,
                     "sse_clients_metric": int(stack.metric("flare_sse_clients")),
                     "fixes_sent": len(sent), "events_received": got,
                     "flared_rss_mb": round(rss_mb(stack.flared.pid), 1), "mosquitto_rss_mb": round(rss_mb(stack.broker.pid), 1),
                     "target": "all open, every fix delivered", "pass": opened == viewer_count and got == len(sent)})
        viewers.close()
    return rows


def bench_postgres(work, cfg, only, rows):
    """The same ingest benchmarks with the PostgreSQL store (durable: fsync on), share creation with many live shares
    on it, and two instances sharing the stream. Two cores run the broker, the publisher, both flared and the database,
    so two instances show correctness and cost, not a speed-up."""
    stack = None
    try:
        stack = bench_stack(os.path.join(work, "pg-stack"), store="postgres", durable=True)
        total, share_count = cfg["ingest"]
        shares, _ = create_shares(stack, share_count)
        if "pg-ingest" in only:
            for qos in (1, 0):
                row = bench_ingest(stack, shares, total, qos, 40_000, cfg["rounds"])
                row["name"] += " (PostgreSQL)"
                rows.append(row)
                print_row(row)
        if "pg-scale" in only:
            level = cfg["levels"][-1]
            new, took = create_shares(stack, level - int(stack.metric("flare_shares_active")))
            shares.extend(new)
            _, state = at_level(stack)
            rate_created, creation = creation_at(stack, level)
            reference = reference_creations(stack.work, stack.postgres)
            rows.append({"name": f"scale {level} shares (PostgreSQL)", **state, **creation,
                         "bulk_create_per_s": round(len(new) / took), "database_alone_per_s": round(reference),
                         "ratio_to_database_alone": round(rate_created / reference, 2),
                         "target": "create >= 2000/s", "pass": rate_created >= 2000})
            print_row(rows[-1])
        if "cluster" in only:
            port_b = stack.add_instance().http_port
            row = bench_ingest(stack, shares[:share_count], total // 2, 1, 40_000, 1)
            row["name"] = "ingest QoS 1, two instances"
            row["target"] = ">= 0.5 (correctness and cost)"
            row["pass"] = row["ratio"] >= 0.5
            rows.append(row)
            print_row(row)
            rows.append(bench_create_to_other(stack, port_b, 200))
            print_row(rows[-1])
    finally:
        if stack:
            stack.stop()


def bench_create_to_other(stack, port_b, count):
    """Create on A, then ask B for the link until it answers 200: how long until the other instance knows a share."""
    latencies = []
    headers = {"Authorization": f"Bearer {stack.owner_key}", "Content-Type": "application/json"}
    conn_b = http.client.HTTPConnection(HOST, port_b, timeout=10)
    for _ in range(count):
        status, _, body = stack.request("POST", "/api/v1/shares", json.dumps({"duration_s": 600}).encode(), headers)
        assert status == 201, status
        token = json.loads(body)["share_url"].rsplit("/", 1)[1]
        started = time.monotonic()
        while True:
            conn_b.request("GET", f"/api/v1/view/{token}")
            response = conn_b.getresponse()
            response.read()
            if response.status == 200:
                break
            if time.monotonic() - started > 5:
                raise SystemExit("bench: instance B did not know a share 5 s after A created it")
        latencies.append((time.monotonic() - started) * 1000)
    conn_b.close()
    latencies.sort()
    return {"name": "create on A, answered by B", "shares": count, "p50_ms": round(percentile(latencies, 50), 2),
            "p99_ms": round(percentile(latencies, 99), 2), "max_ms": round(latencies[-1], 2), "target": "p99 < 1000 ms",
            "pass": percentile(latencies, 99) < 1000}


# --- devices: the SOS and the OsmAnd protocol ----------------------------------------------------------------

# Devices one key is given here: the API takes 30 devices from a key at once, then one every 6 s (a family's, not a
# script's), and keeps 50 a key.
DEVICES_PER_KEY = 25


def bench_call(stack, method, path, body=None, key=None):
    """A JSON request with a bearer (the owner key unless `key`): (status, JSON answer)."""
    status, _, answer = stack.request(method, path, json.dumps(body) if body is not None else None,
                                      {"Authorization": f"Bearer {key or stack.owner_key}", "Content-Type": "application/json"})
    return status, json.loads(answer) if answer else None


def make_devices(stack, count, label):
    """`count` devices named "<label> N", each with one contact (an address of its key's): in keys of DEVICES_PER_KEY,
    made by the owner key. Returns [{"name", "device_id", "secret", "contact"}]."""
    devices = []
    for first in range(0, count, DEVICES_PER_KEY):
        status, made = bench_call(stack, "POST", "/api/v1/keys", {"label": f"bench {label} {first // DEVICES_PER_KEY}"})
        if status != 201:
            raise SystemExit(f"bench: key create answered {status}: {made}")
        key = made["key"]
        address = f"{label.lower()}-{first // DEVICES_PER_KEY}@example.org"
        status, contact = bench_call(stack, "POST", "/api/v1/contacts", {"name": "Contact", "email": address}, key)
        if status != 201:
            raise SystemExit(f"bench: contact create answered {status}: {contact}")
        for n in range(first, min(count, first + DEVICES_PER_KEY)):
            status, device = bench_call(stack, "POST", "/api/v1/devices", {"name": f"{label} {n}", "contacts": [contact["id"]]}, key)
            if status != 201:
                raise SystemExit(f"bench: device create answered {status}: {device}")
            devices.append({"name": device["name"], "device_id": device["device_id"], "secret": device["secret"], "contact": address})
    return devices


def bench_sos(stack, mail, presses, rate):
    """`presses` SOS of distinct devices, `rate` a second, each as Traccar Client's SOS shortcut sends it (a POST to
    /api/v1/osmand with its position and alarm=sos, no body), with the shares of the run (1,000) live: each timed from
    the moment its POST is sent to the moment the SMTP server (aiosmtpd on loopback, in this process) accepted the
    mail to its contact. The answer's own time (200, the share started) is reported beside it."""
    live = int(stack.metric("flare_shares_active"))
    devices = make_devices(stack, presses, "SOS")
    sent = {}
    answered = []
    tst = int(time.time())
    started = time.monotonic()
    for n, device in enumerate(devices):
        delay = started + n / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        query = urllib.parse.urlencode({"id": device["secret"], "timestamp": tst, "lat": f"{47 + n * 1e-4:.6f}", "lon": "8.5",
                                        "accuracy": "0.0", "batt": "80.0", "alarm": "sos"})
        at = time.monotonic()
        status, _, body = stack.request("POST", f"/api/v1/osmand?{query}")
        answered.append((time.monotonic() - at) * 1000)
        if status != 200:
            raise SystemExit(f"bench: an SOS press answered {status}: {body[:200]!r}")
        sent[f"SOS: {device['name']} needs help"] = at
    arrived = {}

    def all_mailed():
        for mail_ in mail.mails(lambda m: m.subject in sent):
            arrived.setdefault(mail_.subject, mail_.at)
        return len(arrived) == len(sent)

    try:
        wait_until(all_mailed, 60, "every SOS mail")
    except WaitTimeout:
        pass  # the row says how many arrived
    latencies = sorted((arrived[subject] - at) * 1000 for subject, at in sent.items() if subject in arrived)
    answered.sort()
    p99 = percentile(latencies, 99)
    return {"name": "SOS press -> mail", "presses": presses, "rate_per_s": rate, "live_shares": live, "mailed": len(latencies),
            "p50_ms": round(percentile(latencies, 50), 1), "p99_ms": round(p99, 1), "max_ms": round(latencies[-1], 1) if latencies else None,
            "answer_p50_ms": round(percentile(answered, 50), 1), "answer_p99_ms": round(percentile(answered, 99), 1),
            "target": "every press mailed; p99 <= 1000 ms", "pass": len(latencies) == presses and p99 <= 1000}


# wrk's script for the device ingest rows: `limit` positions (the script's arguments: mode, limit, first tst, salt),
# round robin over the devices listed in the file FLARE_BENCH_DEVICES_FILE names ("secret share_id device_token" a line;
# mode 0600 in the run's directory, never a command line). `osmand`: GET /api/v1/osmand/<secret>?lat&lon&timestamp, as GPSLogger and OsmAnd
# send a position (200, empty); `http`: POST /api/v1/shares/{id}/locations with the share's device token and an
# OwnTracks location (202). Each device's k-th position has its own place and a later time than its (k-1)-th. It says
# when the answers reached `limit`, so the rate is timed to that moment.
DEVICE_INGEST_SCRIPT = r"""
threads = {}
ok, refused, limit = 0, 0, 0
local mode, first_tst, salt
local devices, sent = {}, 0
function setup(thread) table.insert(threads, thread) end
function init(args)
  mode, limit, first_tst, salt = args[1], tonumber(args[2]), tonumber(args[3]), tonumber(args[4])
  local file = io.open(os.getenv("FLARE_BENCH_DEVICES_FILE"), "r")
  for secret, share, token in string.gmatch(file:read("*a"), "(%S+) (%S+) (%S+)") do
    table.insert(devices, {secret = secret, share = share, token = token})
  end
  file:close()
end
function request()
  local device = devices[sent % #devices + 1]
  local k = math.floor(sent / #devices)
  sent = sent + 1
  local lat = string.format("%.6f", 10 + salt * 0.01 + k * 0.0001)
  local lon = string.format("%.6f", 20 + (sent % #devices) * 0.0001)
  if mode == "osmand" then
    return wrk.format("GET", "/api/v1/osmand/" .. device.secret .. "?lat=" .. lat .. "&lon=" .. lon .. "&timestamp=" .. (first_tst + k))
  end
  return wrk.format("POST", "/api/v1/shares/" .. device.share .. "/locations",
    {["Authorization"] = "Bearer " .. device.token, ["Content-Type"] = "application/json"},
    '{"_type":"location","lat":' .. lat .. ',"lon":' .. lon .. ',"tst":' .. (first_tst + k) .. '}')
end
function response(status, headers, body)
  if (mode == "osmand" and status == 200) or (mode == "http" and status == 202) then ok = ok + 1 else refused = refused + 1 end
  if ok + refused == limit then
    io.write("flare-ingest-reached\n")
    io.flush()
    wrk.thread:stop()
  end
end
function done(summary, latency, requests)
  local o, r = 0, 0
  for _, t in ipairs(threads) do o = o + t:get("ok"); r = r + t:get("refused") end
  io.write(string.format("flare-ingest %d %d %d %d %d\n", o, r, summary.errors.connect + summary.errors.read
    + summary.errors.write + summary.errors.timeout, latency:percentile(50), latency:percentile(99)))
end
"""


def device_ingest(stack, devices, mode, count, connections, first_tst, salt):
    """wrk (one thread, `connections` connections) sending `count` positions of `devices` by `mode` (osmand or http):
    (accepted, new rows, per s, p99 ms)."""
    script = os.path.join(stack.work, "device-ingest.lua")
    with open(script, "w") as f:
        f.write(DEVICE_INGEST_SCRIPT)
    # The credentials in a file only this user reads, in the run's own directory (removed with it): hundreds of
    # devices' are more than one environment variable may hold.
    credentials = os.path.join(stack.work, "device-credentials")
    fd = os.open(credentials, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{d['secret']} {d['share_id']} {d['device_token']}\n" for d in devices))
    rows_before = stack.stored_fixes()
    wrk = subprocess.Popen(["wrk", "-t1", f"-c{connections}", f"-d{max(30, count // 200)}s", "-s", script, f"http://{HOST}:{stack.http_port}",
                            "--", mode, str(count), str(first_tst), str(salt)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(stack.env, FLARE_BENCH_DEVICES_FILE=credentials))
    started = time.monotonic()
    took = None
    for line in wrk.stdout:
        if line.startswith("flare-ingest-reached"):
            took = time.monotonic() - started
            break
    wrk.send_signal(signal.SIGINT)
    out, err = wrk.communicate(timeout=30)
    summary = next((line for line in out.splitlines() if line.startswith("flare-ingest ")), None)
    if took is None or summary is None:
        raise SystemExit(f"bench: wrk {mode} ingest did not finish: {err.strip()[-300:]}")
    accepted, refused, errors, _, p99_us = (int(x) for x in summary.split()[1:])
    if refused or errors:
        raise SystemExit(f"bench: wrk {mode} ingest: {accepted} accepted, {refused} refused, {errors} socket errors")
    return accepted, stack.stored_fixes() - rows_before, count / took, p99_us / 1000


def bench_osmand(stack, device_count, per_device, connections, rounds):
    """OsmAnd ingest against today's HTTP ingest, in the same run at the same concurrency: `device_count` devices, each
    with its SOS live (started through Flare's API, whose answer names the share and its device token), then `rounds`
    alternating pairs of `per_device` positions a device, first by POST /api/v1/shares/{id}/locations with the device
    token (the reference), then by GET /api/v1/osmand/<secret>. Requests with a device's secret are limited to 120 at
    once and 5 a second after: the row sends rounds x per_device of them a device, under 120."""
    devices = make_devices(stack, device_count, "OsmAnd")
    for device in devices:
        status, sos = bench_call(stack, "POST", "/api/v1/devices/sos", key=device["secret"])
        if status != 201:
            raise SystemExit(f"bench: an SOS start answered {status}: {sos}")
        device.update(share_id=sos["share_id"], device_token=sos["device_token"])
    count = device_count * per_device
    first_tst = int(time.time()) - 2 * rounds * per_device - 30  # each pass's positions later than the last's, none ahead of now
    pairs = []
    for r in range(rounds):
        ref_ok, ref_rows, ref_rate, ref_p99 = device_ingest(stack, devices, "http", count, connections, first_tst + 2 * r * per_device, 2 * r)
        ok, rows, rate, p99 = device_ingest(stack, devices, "osmand", count, connections, first_tst + (2 * r + 1) * per_device, 2 * r + 1)
        pairs.append({"reference_accepted": ref_ok, "reference_rows": ref_rows, "reference_per_s": round(ref_rate), "reference_p99_ms": round(ref_p99, 2),
                      "flare_accepted": ok, "flare_rows": rows, "flare_per_s": round(rate), "flare_p99_ms": round(p99, 2),
                      "ratio": round(rate / ref_rate, 3)})
    median = sorted(pairs, key=lambda p: p["ratio"])[len(pairs) // 2]
    # wrk may send a request a connection more than `count` before it stops: every one answered is stored.
    stored_all = all(p["flare_rows"] >= p["flare_accepted"] >= count and p["reference_rows"] >= p["reference_accepted"] >= count for p in pairs)
    return {"name": "ingest OsmAnd vs HTTP", "fixes": count, "devices": device_count, "connections": connections, "rounds": rounds,
            **median, "ratios": [p["ratio"] for p in pairs], "target": ">= 0.9", "pass": median["ratio"] >= 0.9 and stored_all}


def bench_restore(stack, shares, target, rate, seconds):
    """The broker loses everything (kill -9, and its persistence file gone) with `target` live shares, each with a
    retained status and position: how long until flared has put them all back, and whether ingest keeps up meanwhile
    (a `rate` fixes/s QoS 1 stream on 100 other shares, against that rate)."""
    missing = target - len(shares)
    if missing > 0:
        new, _ = create_shares(stack, missing)
        shares.extend(new)
        for start in range(0, len(new), 40_000):
            chunk = new[start:start + 40_000]
            path = shares_file(stack, chunk, "restore-shares.txt")
            before = stack.metric("flare_fixes_accepted_total")
            flare_cli(stack, "publish", "--shares-file", path, "--count", str(len(chunk)), "--qos", "1", "--offset", "11")
            wait_until(lambda: stack.metric("flare_fixes_accepted_total") - before >= len(chunk), 120, "last positions")
    live = int(stack.metric("flare_shares_active"))
    with_position = stack.count("SELECT count(DISTINCT share) FROM fixes")
    wait_until(lambda: stack.metric("flare_broker_epoch") >= 2, 30, "flared's epoch mark")
    restores_before = stack.metric("flare_broker_restores_total")
    messages_before = stack.metric("flare_broker_restored_messages_total")
    stack.broker.kill()
    stack.broker.wait()
    database = os.path.join(stack.broker_dir, "mosquitto.db")
    if os.path.exists(database):
        os.remove(database)
    stack.start_broker()
    back = time.monotonic()
    stream = shares_file(stack, shares[:100], "restore-stream.txt")
    publisher = subprocess.Popen([os.path.join(RELEASE, "flare"), "bench", "publish", "--mqtt-url", f"mqtt://{HOST}:{stack.mqtt_port}",
                                  "--shares-file", stream, "--count", str(rate * seconds), "--rate", str(rate), "--qos", "1",
                                  "--offset", "13"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=stack.env)
    samples = []  # (time, accepted, restores)
    deadline = back + seconds + 60
    while time.monotonic() < deadline:
        samples.append((time.monotonic(), stack.metric("flare_fixes_accepted_total"), stack.metric("flare_broker_restores_total")))
        if publisher.poll() is not None and samples[-1][2] > restores_before:
            break
        time.sleep(0.25)
    publisher.communicate(timeout=60)
    done = next((t for t, _, r in samples if r > restores_before), None)
    restored = stack.metric("flare_broker_restored_messages_total") - messages_before
    # Ingest while the restore ran: from the first fix stored after the broker came back to the restore's end.
    started = next((i for i, (_, a, _) in enumerate(samples) if a > samples[0][1]), None)
    ended = next((i for i, (_, _, r) in enumerate(samples) if r > restores_before), None)
    if started is not None and ended is not None and ended > started:
        accepted = samples[ended][1] - samples[started][1]
        ingest_ratio = accepted / (rate * (samples[ended][0] - samples[started][0]))
    else:
        ingest_ratio = None  # the restore was over before the stream's first fix was stored
    row = {"name": f"restore {live:,} shares", "live_shares": live, "restored_messages": int(restored),
           "restore_s": round(done - back, 1) if done else None,
           "restored_per_s": round(restored / (done - back)) if done else None,
           "ingest_ratio_during_restore": round(ingest_ratio, 2) if ingest_ratio is not None else None, "stream_rate": rate,
           "target": "all restored; ingest >= 0.9 of the stream meanwhile",
           "pass": done is not None and restored >= live + with_position and (ingest_ratio is None or ingest_ratio >= 0.9)}
    print_row(row)
    return row


# --- broker persistence ---------------------------------------------------------------------------------------

def bench_persistence(work, seconds, rates=(1_000, 20_000), topics=10_000):
    """What mosquitto's persistence settings cost the broker, against no persistence in the same run.

    A stream of `rate` retained QoS 1 fixes/s over `topics` share topics (each already holding a retained position,
    the state every save writes) to one QoS 1 subscriber, as the bridge takes them, for `seconds`; the broker's CPU
    time per fix compared with `FLARE_MQTT_AUTOSAVE=off`. The window is what a crash can lose: the interval, or N
    changes at about one change per fix (each retained position replaced)."""
    settings = [("off", None), ("30", 30.0), ("5", 5.0), ("changes:1000", 1000), ("changes:10000", 10_000)]
    ids = [f"p{n:021d}" for n in range(topics)]
    rows = []
    for rate in rates:
        total = rate * seconds
        reference = None
        for setting, window in settings:
            run = os.path.join(work, f"persist-{rate}-{setting.replace(':', '-')}")
            os.makedirs(run)
            path = os.path.join(run, "topics.txt")
            with open(path, "w") as f:
                f.write("".join(i + "\n" for i in ids))
            broker = bench_stack(run, instances=0, env={"FLARE_MQTT_AUTOSAVE": setting})  # scripts/broker.sh alone
            try:
                # The subscriber first, then every topic's retained position (the state each save writes): the
                # stream is timed from when the subscriber has them all.
                counter = subprocess.Popen([os.path.join(RELEASE, "flare"), "bench", "count", "--mqtt-url", f"mqtt://{HOST}:{broker.mqtt_port}",
                                            "--pattern", "bench/p/+/location", "--qos", "1", "--expect", str(total + topics),
                                            "--report-every", str(topics), "--timeout", str(seconds + 120)],
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=broker.env)
                assert counter.stderr.readline().strip() == "ready"
                flare_cli(broker, "publish", "--shares-file", path, "--prefix", "bench/p", "--count", str(topics), "--rate", "10000", "--qos", "1")
                assert select.select([counter.stdout], [], [], 120)[0], "the subscriber did not get the retained positions"
                assert json.loads(counter.stdout.readline())["received"] == topics
                cpu_before, started = cpu_seconds(broker.broker.pid), time.monotonic()
                pub = flare_cli(broker, "publish", "--shares-file", path, "--prefix", "bench/p", "--count", str(total),
                                "--rate", str(rate), "--qos", "1", timeout=seconds + 120)
                out = counter.stdout.read()
                counter.wait(seconds + 90)
                elapsed = time.monotonic() - started
                cpu = cpu_seconds(broker.broker.pid) - cpu_before
                received = json.loads(out.strip().splitlines()[-1])["received"] - topics
                database = os.path.join(broker.broker_dir, "mosquitto.db")
                database_mb = os.path.getsize(database) / 1_048_576 if os.path.exists(database) else 0.0
            finally:
                broker.stop()
            per_fix_us = cpu / max(1, pub["published"]) * 1e6
            if reference is None:
                reference = per_fix_us
            window_s = None if window is None else (window if isinstance(window, float) else window / rate)
            row = {"name": f"persistence {setting} @ {rate:,}/s", "setting": setting, "rate": rate,
                   "delivered_per_s": round(received / elapsed), "broker_cpu_percent": round(100 * cpu / elapsed, 1),
                   "cpu_us_per_fix": round(per_fix_us, 2), "cost_ratio": round(per_fix_us / reference, 2),
                   "crash_window_s": None if window_s is None else round(window_s, 2), "database_mb": round(database_mb, 1),
                   "target": "measured (no target)", "pass": received >= total * 0.99}
            rows.append(row)
            print_row(row)
    return rows


def main():
    parser = argparse.ArgumentParser(prog="python3 -m scripts.bench.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help="bigger counts and longer runs")
    parser.add_argument("--only", default="ingest,latency,view,sos,osmand,scale,restore,tail,pg-ingest,pg-scale,cluster,persistence,nats",
                        help="comma-separated subset of ingest (or ingest-qos1, ingest-qos0), latency, view, "
                             "sos (SOS press to the contact's mail), push (notifications delivered a second, SOS press to push), "
                             "track (100,000 positions as GPX, flared's memory meanwhile), "
                             "osmand (OsmAnd ingest against HTTP ingest), scale, restore, "
                             "tail (the latency row with many retained shares, across the broker's saves), "
                             "pg-ingest, pg-scale, cluster (these three on PostgreSQL), persistence (the broker alone), "
                             "nats (ingest through a three-node NATS cluster, and its nodes' memory per retained position)")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory (logs, database)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes for the rows that have them (sos, osmand): checks that they run; "
                                                             "their figures say little")
    args = parser.parse_args()
    only = set(args.only.split(","))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))  # 10,000 viewers, inherited by flared
    if args.long:
        cfg = dict(nats=(50_000, 100_000), ingest=(1_000_000, 1_000), rounds=3, latency=(1000, 60), tail_shares=100_000, view_s=15,
                   levels=(1_000, 10_000, 100_000), viewers=10_000, viewer_s=20, persist_s=60, persist_topics=100_000,
                   sos=(200, 10), osmand=(1_500, 30, 16), push=(50, 200, 10))
    else:
        cfg = dict(nats=(20_000, 10_000), ingest=(200_000, 1_000), rounds=3, latency=(1000, 15), tail_shares=20_000, view_s=5,
                   levels=(1_000, 10_000), viewers=2_000, viewer_s=5, persist_s=10, persist_topics=10_000,
                   sos=(50, 10), osmand=(800, 30, 16), push=(20, 50, 10))
    if args.smoke:
        cfg.update(sos=(10, 10), osmand=(20, 20, 4), push=(2, 5, 5))
    for tool in ("wrk", "nginx"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            raise SystemExit(f"bench: {tool} is missing (scripts/deps.sh --bench installs it)")
    work = tempfile.mkdtemp(prefix="flare-bench-")
    stack = None
    results = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "long": args.long, "cpus": os.cpu_count(),
               "mosquitto": subprocess.run(["mosquitto", "-h"], capture_output=True, text=True).stdout.splitlines()[0:1], "rows": []}
    rows = results["rows"]
    # The SOS row's contacts are mailed through a real SMTP server here, which notes when each mail arrived.
    mail = MailCatcher() if "sos" in only else None
    try:
        env = dict(mail.env(), FLARE_MAIL_PER_KEY_PER_HOUR="100000") if mail else {}
        if "push" in only:
            env.update(pushbench.ENV, FLARE_LINK_RATE_PER_ADDRESS="100000/100000")
        stack = bench_stack(work, env=env)
        total, share_count = cfg["ingest"]
        shares, took = create_shares(stack, share_count)
        for qos in (1, 0):
            if "ingest" in only or f"ingest-qos{qos}" in only:
                rows.append(bench_ingest(stack, shares, total, qos, 40_000, cfg["rounds"]))
                print_row(rows[-1])
        if "latency" in only:
            rows.append(bench_latency(stack, shares[:100], *cfg["latency"]))
            print_row(rows[-1])
        if "view" in only:
            for row in bench_view(stack, shares[0], cfg["view_s"], cfg["rounds"]):
                rows.append(row)
                print_row(row)
        if "sos" in only:
            rows.append(bench_sos(stack, mail, *cfg["sos"]))
            print_row(rows[-1])
        if "push" in only:
            rows.append(pushbench.bench_push_throughput(stack, cfg["push"][0]))
            print_row(rows[-1])
            rows.append(pushbench.bench_push_latency(stack, *cfg["push"][1:]))
            print_row(rows[-1])
        if "track" in only:
            rows.append(trackbench.bench_track(stack, 100_000))
            print_row(rows[-1])
        if "osmand" in only:
            rows.append(bench_osmand(stack, *cfg["osmand"], 1 if args.smoke else cfg["rounds"]))
            print_row(rows[-1])
        if "scale" in only:
            for row in bench_scale(stack, shares, cfg["levels"], cfg["viewers"], 1000, cfg["viewer_s"]):
                rows.append(row)
                print_row(row)
        if "restore" in only:
            rows.append(bench_restore(stack, shares, 100_000, 1000, 20))
        if "tail" in only:
            rows.append(bench_tail(stack, shares, cfg["tail_shares"], *cfg["latency"]))
            print_row(rows[-1])
        stack.stop()
        stack = None
        if only & {"pg-ingest", "pg-scale", "cluster"}:
            bench_postgres(work, cfg, only, rows)
        if "persistence" in only:
            rows.extend(bench_persistence(work, cfg["persist_s"], topics=cfg["persist_topics"]))
        if "nats" in only:
            nats_work = os.path.join(work, "nats")
            os.makedirs(nats_work)
            for row in natsbench.bench_nats(nats_work, RELEASE, cfg["nats"][0], cfg["rounds"], cfg["nats"][1]):
                rows.append(row)
                print_row(row)
    except WaitTimeout as error:
        raise SystemExit(f"bench: {error}") from None
    finally:
        if stack:
            stack.stop()
        if mail:
            mail.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"bench: kept {work}", file=sys.stderr)
    os.makedirs(os.path.join(ROOT, "bench-results"), exist_ok=True)
    out = os.path.join(ROOT, "bench-results", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + ("-long" if args.long else "") + ".json")
    with open(out, "w") as f:
        json.dump(results, f, indent=2)
    print()
    print_table(rows)
    print(f"\nwritten to {os.path.relpath(out, ROOT)}")
    return 0


def print_row(row):
    print("bench: " + json.dumps(row), flush=True)


def print_table(rows):
    print(f"{'benchmark':34} {'Flare':>14} {'reference':>14} {'ratio / figure':>26}  {'target':>34}  ok")
    for r in rows:
        name = r["name"]
        if name.startswith("ingest"):
            cells = (f"{r['flare_per_s']:,}/s", f"{r['reference_per_s']:,}/s", f"{r['ratio']} (median of {r['ratios']})")
        elif name.startswith("latency"):
            cells = (f"p99 {r['p99_ms']} ms", "-", f"p50 {r['p50_ms']} / max {r['max_ms']} ms")
        elif name.startswith("view"):
            cells = (f"{r['flare_rps']:,} req/s", f"{r['nginx_rps']:,} req/s", f"{r['ratio']} (median of {r['ratios']})")
        elif name.startswith("track"):
            cells = (f"+{r['growth_mb']} MB", f"{r['points']:,} points", f"{r['points_per_s']:,}/s, {r['bytes']:,} B")
        elif name.startswith("push"):
            cells = (f"{r['flare_per_s']:,}/s", f"{r['reference_per_s']:,}/s", f"{r['ratio']} ({r['notifications']:,} sent)")
        elif name.startswith("SOS press -> push"):
            cells = (f"p99 {r['p99_ms']} ms", f"{r['pushed']}/{r['presses']} pushed", f"p50 {r['p50_ms']} / max {r['max_ms']} ms")
        elif name.startswith("SOS"):
            cells = (f"p99 {r['p99_ms']} ms", f"{r['mailed']}/{r['presses']} mailed", f"p50 {r['p50_ms']} / max {r['max_ms']} ms")
        elif name.startswith("create on A"):
            cells = (f"p99 {r['p99_ms']} ms", "-", f"p50 {r['p50_ms']} / max {r['max_ms']} ms")
        elif name.startswith("NATS node memory"):
            cells = (f"{max(r['nodes_rss_mb'])} MB", f"+{max(r['growth_mb'])} MB", f"{r['bytes_per_retained']:,} B / retained")
        elif name.startswith("restore"):
            cells = (f"{r['restore_s']} s", f"{r['restored_messages']:,} msgs", f"ingest x{r['ingest_ratio_during_restore']} meanwhile")
        elif name.startswith("persistence"):
            window = "no save" if r["crash_window_s"] is None else f"window {r['crash_window_s']} s"
            cells = (f"{r['cpu_us_per_fix']} us/fix", f"{r['broker_cpu_percent']}% CPU", f"x{r['cost_ratio']}, {window}")
        elif name.startswith("scale") and "database_alone_per_s" in r:
            cells = (f"{r['flared_rss_mb']} MB", f"db alone {r['database_alone_per_s']:,}/s",
                     f"create {r['create_per_s']:,}/s (x{r['ratio_to_database_alone']}, p99 {r['create_p99_ms']} ms)")
        elif name.startswith("scale"):
            cells = (f"{r['flared_rss_mb']} MB", f"store alone {r['store_alone_per_s']:,}/s",
                     f"create {r['create_per_s']:,}/s (x{r['ratio_to_store_alone']}, p99 {r['create_p99_ms']} ms), "
                     f"MQTT rtt max {r.get('probe_max_ms', '-')} ms")
        else:
            cells = (f"{r['open']:,} open", f"{r['events_received']}/{r['fixes_sent']}", f"RSS {r['flared_rss_mb']} MB")
        print(f"{name:34} {cells[0]:>14} {cells[1]:>14} {cells[2]:>26}  {r['target']:>34}  {'yes' if r['pass'] else 'NO'}")


if __name__ == "__main__":
    sys.exit(main())
