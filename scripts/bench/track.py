"""The track row of `make bench` (`--only track`): a share's whole recorded track of 100,000 positions (a day at one a
second is 86,400) downloaded as GPX through its link, with flared's memory sampled every 20 ms meanwhile.

The positions go straight into the store's fixes table (SQLite, flared running; the writer's path is measured by the
ingest rows, not here). Target: flared's resident memory grows by no more than 8 MB while it sends the track, which is
written a page of 2,000 positions at a time into a bounded send buffer; the whole file would be tens of MB.
"""

from __future__ import annotations

import http.client
import json
import sqlite3
import threading
import time

from scripts.flarestack import HOST, rss_mb


def bench_track(stack, count: int) -> dict:
    status, _, body = stack.request("POST", "/api/v1/shares", json.dumps({"duration_s": 86400, "name": "Track"}),
                                    {"Authorization": f"Bearer {stack.owner_key}", "Content-Type": "application/json"})
    assert status == 201, body
    share = json.loads(body)
    token = share["share_url"].rsplit("/", 1)[1]
    db = sqlite3.connect(f"{stack.data}/flare.db", timeout=30)
    try:
        row = db.execute("SELECT id FROM shares WHERE share_id = ?", (share["share_id"],)).fetchone()[0]
        start = int(time.time()) - count
        with db:
            db.executemany("INSERT INTO fixes (share, tst, lat, lon, acc, alt, vel, batt, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           ((row, start + n, 47 + n * 1e-6, 8.5 + (n % 100) * 1e-6, 8.0, 400.0 + n % 50, 4.0, 80, start + n) for n in range(count)))
    finally:
        db.close()
    pid = stack.flared.pid
    time.sleep(1)
    before = rss_mb(pid)
    peak = [before]
    sampling = True

    def sample() -> None:
        while sampling:
            peak[0] = max(peak[0], rss_mb(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    conn = http.client.HTTPConnection(HOST, stack.http_port, timeout=120)
    conn.request("GET", f"/api/v1/view/{token}/track.gpx")
    response = conn.getresponse()
    received, points, tail = 0, 0, b""
    while chunk := response.read(64 * 1024):
        received += len(chunk)
        # Counted across the reads' boundaries: the last few bytes of one read go before the next.
        joined = tail + chunk
        points += joined.count(b"<trkpt ") - tail.count(b"<trkpt ")
        tail = joined[-6:]
    took = time.monotonic() - started
    conn.close()
    sampling = False
    sampler.join()
    growth = peak[0] - before
    return {"name": "track: 100,000 positions as GPX", "points": points, "bytes": received, "seconds": round(took, 2),
            "points_per_s": round(points / took), "rss_before_mb": round(before, 1), "rss_peak_mb": round(peak[0], 1),
            "growth_mb": round(growth, 1), "target": "every point; growth <= 8 MB", "pass": points == count and growth <= 8}
