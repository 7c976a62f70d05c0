"""The push rows of `make bench` (`--only push`): Web Push notifications encrypted, signed and delivered per second to a
push service on loopback, and an SOS press to the contact's push, p50/p99.

The push service here only counts: it answers 201 to every POST and notes when each arrived, so that it is not what is
measured (Tests/scripts/test_push.py checks what flared sends, with a receiver that verifies and decrypts each
message). The reference, measured in the same run on the same receiver, is what a plain client gets through to it:
`REFERENCE_THREADS` keep-alive connections posting a 300-byte body as fast as the receiver answers. The ratio says how
close flared comes to the receiver's own limit while it encrypts (ECDH and AES-GCM per message), signs and pins each.
"""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import os
import threading
import time

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from scripts.flarestack import HOST, free_span, wait_until

REFERENCE_THREADS = 4
# flared's settings for these rows: push on, its push service on this machine.
ENV = {"FLARE_VAPID_SUBJECT": "mailto:bench@example.org", "FLARE_PUSH_ALLOW_LOOPBACK": "1"}


class CountingPushService:
    """Answers 201 to every POST /push/<name>, noting the moment (time.monotonic) each arrived, by name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.arrivals: dict[str, list[float]] = {}
        self.port = free_span(1)
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                name = self.path.rsplit("/", 1)[-1]
                with service.lock:
                    service.arrivals.setdefault(name, []).append(time.monotonic())
                self.send_response(201)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((HOST, self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def subscription(self, name: str) -> dict:
        key = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
        b64 = lambda data: base64.urlsafe_b64encode(data).rstrip(b"=").decode()  # noqa: E731
        return {"endpoint": f"http://{HOST}:{self.port}/push/{name}", "keys": {"p256dh": b64(key), "auth": b64(os.urandom(16))}}

    def count(self) -> int:
        with self.lock:
            return sum(len(times) for times in self.arrivals.values())

    def first(self, name: str) -> float | None:
        with self.lock:
            times = self.arrivals.get(name)
            return times[0] if times else None

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def reference_rate(service: CountingPushService, total: int) -> float:
    """Posts/s a plain client gets through to `service` on REFERENCE_THREADS keep-alive connections."""
    body = os.urandom(300)
    per = total // REFERENCE_THREADS

    def worker(slot: int) -> None:
        conn = http.client.HTTPConnection(HOST, service.port, timeout=30)
        for n in range(per):
            conn.request("POST", f"/push/ref-{slot}-{n % 50}", body=body, headers={"Content-Encoding": "aes128gcm", "TTL": "60"})
            conn.getresponse().read()
        conn.close()

    before = service.count()
    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(slot,)) for slot in range(REFERENCE_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - started
    assert service.count() - before == per * REFERENCE_THREADS
    return per * REFERENCE_THREADS / took


_calls = 0


def call(stack, method: str, path: str, body=None, bearer: str | None = None) -> tuple[int, dict | None]:
    """One request, from one of 200 loopback addresses in turn: a family's browsers subscribe from their own addresses,
    and flared limits subscriptions per address (20 at once)."""
    global _calls
    _calls += 1
    headers = {"Content-Type": "application/json"}
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    conn = http.client.HTTPConnection(HOST, stack.http_port, timeout=30, source_address=(f"127.0.1.{2 + _calls % 200}", 0))
    try:
        conn.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=headers)
        response = conn.getresponse()
        answer = response.read()
        return response.status, json.loads(answer) if answer else None
    finally:
        conn.close()


def bench_push_throughput(stack, devices: int) -> dict:
    """`devices` devices, each with 20 contacts (the most a device has), each contact's alerts subscribed in 5 browsers
    (the most they take): 100 subscriptions a press. Every device presses SOS at once; timed from the first press to the
    last notification the push service took. The presses take a few milliseconds: what is timed is the delivery."""
    service = CountingPushService()
    try:
        secrets = []
        for d in range(devices):
            status, made = call(stack, "POST", "/api/v1/keys", {"label": f"bench push burst {d}"}, stack.owner_key)
            assert status == 201, (status, made)
            key = made["key"]
            contacts = []
            for c in range(20):
                status, contact = call(stack, "POST", "/api/v1/contacts", {"name": f"Contact {d}-{c}"}, key)
                assert status == 201, (status, contact)
                status, link = call(stack, "GET", f"/api/v1/contacts/{contact['id']}/alerts-link", None, key)
                assert status == 200, (status, link)
                secret = link["url"].split("#c=", 1)[1]
                for k in range(5):
                    status, answer = call(stack, "POST", "/api/v1/alerts/push", service.subscription(f"b{d}-{c}-{k}"), secret)
                    assert status == 201, (status, answer)
                contacts.append(contact["id"])
            status, device = call(stack, "POST", "/api/v1/devices", {"name": f"Burst {d}", "contacts": contacts, "escalate_after_s": 0}, key)
            assert status == 201, (status, device)
            secrets.append(device["secret"])
        expected = devices * 100
        reference = reference_rate(service, 4_000)
        before = service.count()
        started = time.monotonic()
        for secret in secrets:
            status, answer = call(stack, "POST", "/api/v1/devices/sos", {}, secret)
            assert status == 201, (status, answer)
        pressed = time.monotonic() - started
        wait_until(lambda: service.count() - before >= expected, 120, f"{expected} notifications")
        with service.lock:
            last = max(times[-1] for name, times in service.arrivals.items() if name.startswith("b"))
        rate = expected / (last - started)
        failed = stack.metric("flare_push_failed_total")
        return {"name": "push: notifications delivered", "notifications": expected, "presses_took_ms": round(pressed * 1000),
                "flare_per_s": round(rate), "reference_per_s": round(reference), "ratio": round(rate / reference, 2), "failed": failed,
                "target": ">= 1,000/s; none failed", "pass": rate >= 1000 and not failed}
    finally:
        service.stop()


def bench_push_latency(stack, presses: int, rate: float) -> dict:
    """`presses` SOS of distinct devices, `rate` a second (POST /api/v1/devices/sos), each device's one contact
    subscribed to alerts in one browser: from the press to the moment the push service took that contact's alert."""
    service = CountingPushService()
    try:
        devices = []
        key = None
        for n in range(presses):
            # A key per 25 devices: a key adds 30 contacts or devices at once, then one every 6 s.
            if n % 25 == 0:
                status, made = call(stack, "POST", "/api/v1/keys", {"label": f"bench push {n // 25}"}, stack.owner_key)
                assert status == 201, (status, made)
                key = made["key"]
            status, contact = call(stack, "POST", "/api/v1/contacts", {"name": f"Contact {n}"}, key)
            assert status == 201, (status, contact)
            status, link = call(stack, "GET", f"/api/v1/contacts/{contact['id']}/alerts-link", None, key)
            assert status == 200, (status, link)
            secret = link["url"].split("#c=", 1)[1]
            status, answer = call(stack, "POST", "/api/v1/alerts/push", service.subscription(f"c{n}"), secret)
            assert status == 201, (status, answer)
            status, device = call(stack, "POST", "/api/v1/devices", {"name": f"Push {n}", "contacts": [contact["id"]], "escalate_after_s": 0}, key)
            assert status == 201, (status, device)
            devices.append(device["secret"])
        sent = {}
        started = time.monotonic()
        for n, secret in enumerate(devices):
            delay = started + n / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sent[f"c{n}"] = time.monotonic()
            status, answer = call(stack, "POST", "/api/v1/devices/sos", {}, secret)
            assert status == 201, (status, answer)
        wait_until(lambda: all(service.first(name) for name in sent), 60, "every SOS pushed")
        latencies = sorted((service.first(name) - at) * 1000 for name, at in sent.items())
        p50, p99 = latencies[len(latencies) // 2], latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
        return {"name": "SOS press -> push", "presses": presses, "rate_per_s": rate, "pushed": len(latencies), "p50_ms": round(p50, 1),
                "p99_ms": round(p99, 1), "max_ms": round(latencies[-1], 1), "target": "every press pushed; p99 <= 1000 ms",
                "pass": len(latencies) == presses and p99 <= 1000}
    finally:
        service.stop()
