"""`make bench` on NATS (the `nats` row): Flare on three NATS nodes behind HAProxy (scripts/nats-cluster.sh).

- ingest: QoS 1 fixes through the cluster into flared's store, against the cluster's own delivery of the same stream
  to a bare MQTT 3.1.1 subscriber (`flare bench count`) in the same run: the ratio says what flared's side costs. The
  cluster delivers QoS 1 to an MQTT subscriber more slowly than it takes it in (one JetStream consumer per
  subscription, acknowledged one by one), and flared reads the stream itself in batches: a ratio above 1 is that;
- memory: each node's resident memory with N retained positions (one per share, as phones leave them), less what it
  held before they came, per node and per position.
"""
import json
import os
import subprocess
import time

from scripts.flarestack import HOST, Stack, WaitTimeout, wait_until


def _bench(stack, *args, timeout=600):
    out = subprocess.run([os.path.join(stack.bin, "flare"), "bench", *args, "--mqtt311", "--data-dir", stack.data,
                          "--mqtt-url", f"mqtt://{HOST}:{stack.mqtt_port}"],
                         capture_output=True, text=True, timeout=timeout, env=stack.env)
    if out.returncode != 0:
        raise SystemExit(f"bench: flare bench {args[0]} on NATS failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ids_file(stack, ids, name):
    path = os.path.join(stack.work, name)
    with open(path, "w") as f:
        f.write("".join(i + "\n" for i in ids))
    return path


def reference(stack, path, total):
    """The stream to a bare subscriber on a topic tree flared does not read: fixes per second as delivered."""
    counter = subprocess.Popen([os.path.join(stack.bin, "flare"), "bench", "count", "--mqtt311", "--data-dir", stack.data,
                                "--mqtt-url", f"mqtt://{HOST}:{stack.mqtt_port}", "--pattern", "bench/n1/+/location",
                                "--qos", "1", "--expect", str(total), "--timeout", str(max(120, total // 200))],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=stack.env)
    assert counter.stderr.readline().strip() == "ready"
    pub = _bench(stack, "publish", "--shares-file", path, "--prefix", "bench/n1", "--count", str(total), "--qos", "1")
    out, _ = counter.communicate(timeout=max(180, total // 200 + 60))
    final = json.loads(out.strip().splitlines()[-1])
    return final["received"], final["received"] / max(1e-9, (final["last_ns"] - pub["start_ns"]) / 1e9)


def ingest(stack, path, total, offset):
    """The same stream to Flare's topics, timed until flared has accepted every fix."""
    accepted0 = stack.metric("flare_fixes_accepted_total")
    pub = _bench(stack, "publish", "--shares-file", path, "--count", str(total), "--qos", "1", "--offset", str(offset))
    try:
        wait_until(lambda: stack.metric("flare_fixes_accepted_total") - accepted0 >= pub["acked"], 180, "every acknowledged fix accepted",
                   interval=0.02)
    except WaitTimeout:
        pass  # the row says how many were accepted
    end_ns = time.time_ns()
    accepted = stack.metric("flare_fixes_accepted_total") - accepted0
    return int(accepted), pub["acked"], accepted / max(1e-9, (end_ns - pub["start_ns"]) / 1e9)


def bench_nats(work, bin_dir, total, rounds, retained):
    stack = Stack(work, broker="nats", bin_dir=bin_dir)
    rows = []
    try:
        shares = []
        for _ in range(100):
            shares.append(stack.create_share()["share_id"])
        path = _ids_file(stack, shares, "nats-shares.txt")
        pairs = []
        for r in range(rounds):
            ref_received, ref_rate = reference(stack, path, total)
            accepted, acked, rate = ingest(stack, path, total, offset=10 * total * (r + 1))
            pairs.append({"reference_received": ref_received, "reference_per_s": round(ref_rate), "acknowledged": acked,
                          "flare_accepted": accepted, "flare_per_s": round(rate), "ratio": round(rate / ref_rate, 3)})
        median = sorted(pairs, key=lambda p: p["ratio"])[len(pairs) // 2]
        rows.append({"name": "ingest QoS 1, NATS cluster", "fixes": total, "shares": len(shares), "rounds": rounds, **median,
                     "ratios": [p["ratio"] for p in pairs], "target": ">= 0.8 of the cluster's own delivery",
                     "pass": median["ratio"] >= 0.8 and all(p["flare_accepted"] >= p["acknowledged"] == total for p in pairs)})
        # Memory: N retained positions on N topics, as N phones leave them.
        before = [stack.nats.node_rss_mb(n) for n in (1, 2, 3)]
        ids = [f"r{i:07d}" for i in range(retained)]
        _bench(stack, "publish", "--shares-file", _ids_file(stack, ids, "retained.txt"), "--prefix", "bench/retained",
               "--count", str(retained), "--qos", "1", timeout=1800)
        time.sleep(3)  # replicas catch up
        after = [stack.nats.node_rss_mb(n) for n in (1, 2, 3)]
        growth = [a - b for a, b in zip(after, before)]
        per_position = max(growth) * 1024 * 1024 / retained
        rows.append({"name": f"NATS node memory, {retained:,} retained", "nodes_rss_mb": [round(a, 1) for a in after],
                     "growth_mb": [round(g, 1) for g in growth], "bytes_per_retained": round(per_position),
                     "target": "stated (no target)", "pass": True})
        return rows
    finally:
        stack.stop()
