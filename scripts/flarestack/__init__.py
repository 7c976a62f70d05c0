"""What Flare's Python harnesses share (scripts/bench, scripts/chaos, Tests/scripts, Tests/browser).

- `Stack`: a broker (mosquitto or NATS), a store (SQLite or PostgreSQL) and flared instances on loopback;
- `wait_until`: the one way to wait for something, bounded, naming what did not happen;
- ports (`free_port`, `free_span`, `port_open`), HTTP (`request`, `http_status`, `metric_total`, `LiveViewer`),
  processes (`stop_processes`, `rss_mb`, `cpu_seconds`), a throwaway `Postgres`, the NATS nodes (`NatsNodes`), an SMTP
  server that keeps what flared mails (`MailCatcher`).

Import it as `scripts.flarestack`, running from the repository root (`python3 -m scripts.…`, `python3 -m pytest`).
"""

from .http_calls import LiveViewer, http_status, metric_total, request
from .mail import Mail, MailCatcher
from .nats import NatsNodes
from .ports import HOST, bindable, free_port, free_span, port_open
from .postgres import Postgres
from .processes import cpu_seconds, exited, rss_mb, stop_processes
from .root import DEBUG_BIN, RELEASE_BIN, ROOT
from .stack import Flared, Stack, write_bench_password
from .wait import WaitTimeout, wait_until

__all__ = [
    "DEBUG_BIN", "HOST", "RELEASE_BIN", "ROOT", "Flared", "LiveViewer", "Mail", "MailCatcher", "NatsNodes", "Postgres", "Stack", "WaitTimeout",
    "bindable", "cpu_seconds", "exited", "free_port", "free_span", "http_status", "metric_total", "port_open", "request",
    "rss_mb", "stop_processes", "wait_until", "write_bench_password",
]
