"""Three NATS nodes behind HAProxy (scripts/nats-cluster.sh): where each node is, and killing one."""

from __future__ import annotations

import json
import os
import signal
import urllib.request

from .ports import HOST


class NatsNodes:
    """The nodes scripts/nats-cluster.sh started in `data`/nats: their pids, ports and monitoring."""

    def __init__(self, data: str) -> None:
        self.directory = os.path.join(data, "nats")

    def urls_file(self) -> str:
        """The nodes' client URLs, one line (FLARE_NATS_URLS), once the cluster is up."""
        return os.path.join(self.directory, "urls")

    def node_pid(self, n: int) -> int:
        with open(os.path.join(self.directory, f"n{n}.pid")) as f:
            return int(f.read())

    def node_port(self, n: int, kind: str) -> int:
        """A node's port from its configuration: `client`, `mqtt` or `http` (monitoring)."""
        with open(os.path.join(self.directory, f"n{n}.conf")) as f:
            text = f.read()
        if kind == "mqtt":
            text = text[text.index("mqtt {"):]
        return int(text.split(f"{'listen' if kind in ('client', 'mqtt') else kind}: 127.0.0.1:", 1)[1].split()[0])

    def kill_node(self, n: int) -> None:
        os.kill(self.node_pid(n), signal.SIGKILL)

    def mqtt_clients(self, n: int) -> list[str]:
        """The MQTT client ids connected to node `n` (its monitoring's connz); [] when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.node_port(n, 'http')}/connz?limit=10000", timeout=2) as r:
                return [c.get("mqtt_client", "") for c in json.load(r).get("connections", [])]
        except OSError:
            return []

    def node_of_client(self, mqtt_client_id: str) -> int | None:
        """The node (1-3) that holds a connection with this MQTT client id."""
        return next((n for n in (1, 2, 3) if mqtt_client_id in self.mqtt_clients(n)), None)

    def node_rss_mb(self, n: int) -> float:
        with open(f"/proc/{self.node_pid(n)}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
