"""HTTP to a flared on loopback: one request, a status, the metrics, and a live viewer's event stream."""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.request

from .ports import HOST


def request(port: int, method: str, path: str, body: bytes | str | None = None, headers: dict[str, str] | None = None,
            source: str = HOST, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """One request on its own connection from `source` (any 127.0.0.x): (status, headers, body)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def http_status(url: str, timeout: float = 3) -> int:
    """The status a GET of `url` answers (a 4xx or 5xx too); OSError when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def metric_total(text: str, name: str) -> float:
    """The sum of a metric family's samples (every label set) in Prometheus text."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


class LiveViewer:
    """Reads a link's Server-Sent Events on a thread and notes when each `fix` event arrived."""

    def __init__(self, http_port: int, token: str) -> None:
        self.arrivals: list[float] = []
        self.connection = http.client.HTTPConnection(HOST, http_port, timeout=120)
        self.connection.request("GET", f"/api/v1/view/{token}/events")
        self.response = self.connection.getresponse()
        assert self.response.status == 200, self.response.status
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for line in self.response:
                if line.startswith(b"event: fix"):
                    self.arrivals.append(time.monotonic())
        except (OSError, ValueError, AttributeError):  # closed under the reader at the end of the case
            pass

    def largest_gap(self) -> float:
        gaps = [b - a for a, b in zip(self.arrivals, self.arrivals[1:])]
        return max(gaps) if gaps else float("inf")

    def close(self) -> None:
        self.connection.close()
