"""A real SMTP server on loopback (Debian's python3-aiosmtpd) that keeps every mail flared sends: for the script tests
of mail to contacts and for the benchmarks that time it.

flared sends to it with `MailCatcher.env()` (FLARE_SMTP_URL: plain SMTP, which flared allows to a loopback host only).
Each mail is kept with the moment the server accepted it (time.monotonic() of this process, so a caller can time a
request against it), its recipients, its subject and its text, decoded.
"""

from __future__ import annotations

import email
import email.policy
import threading
import time
from dataclasses import dataclass
from typing import Callable

from .ports import HOST, free_span
from .wait import wait_until


@dataclass(frozen=True)
class Mail:
    at: float
    to: tuple[str, ...]
    subject: str
    text: str


class MailCatcher:
    """aiosmtpd on its own thread, on a free loopback port; `stop()` ends it."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self._mails: list[Mail] = []
        self._lock = threading.Lock()
        catcher = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                at = time.monotonic()
                message = email.message_from_bytes(envelope.content, policy=email.policy.default)
                body = message.get_body(preferencelist=("plain",))
                text = body.get_content() if body is not None else ""
                with catcher._lock:
                    catcher._mails.append(Mail(at, tuple(envelope.rcpt_tos), str(message["subject"] or ""), text))
                return "250 Message accepted"

        self.port = free_span()
        self._controller = Controller(Handler(), hostname=HOST, port=self.port)
        self._controller.start()

    def env(self, sender: str = "flare@example.org") -> dict[str, str]:
        """The settings that make flared mail contacts through this server."""
        return {"FLARE_SMTP_URL": f"smtp://{HOST}:{self.port}", "FLARE_SMTP_FROM": sender}

    def mails(self, match: Callable[[Mail], bool] = lambda mail: True) -> list[Mail]:
        """The mails taken so far that `match`, in the order they arrived."""
        with self._lock:
            return [mail for mail in self._mails if match(mail)]

    def wait_for(self, match: Callable[[Mail], bool], count: int, seconds: float, what: str) -> list[Mail]:
        """Waits until at least `count` mails `match`; returns them all."""
        wait_until(lambda: len(self.mails(match)) >= count, seconds,
                   lambda: f"{what}: {len(self.mails(match))} of {count} mails arrived; all subjects: {[m.subject for m in self.mails()]}")
        return self.mails(match)

    def stop(self) -> None:
        self._controller.stop()
