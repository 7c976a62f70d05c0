"""The one way Flare's scripts wait: poll a check until it holds, within a bound, and say what did not happen."""

from __future__ import annotations

import http.client
import time
from typing import Callable, TypeVar

T = TypeVar("T")

# What a check raises while what it polls is not up yet. HTTPException too: polling a free port in the ephemeral range
# before its server listens can connect the client to itself (TCP simultaneous open), and it then reads its own request
# as the answer.
NOT_YET: tuple[type[BaseException], ...] = (OSError, http.client.HTTPException)


class WaitTimeout(AssertionError):
    """What was waited for did not happen in time (an AssertionError, so a test fails with its message)."""


def wait_until(check: Callable[[], T], seconds: float, what: str | Callable[[], str], *,
               interval: float = 0.05, ignoring: tuple[type[BaseException], ...] = NOT_YET,
               gone: Callable[[], str | None] | None = None) -> T:
    """Polls `check` every `interval` s until it returns something true, and returns that.

    `what` names what is awaited (a function: a message of how things stand when the time is up). An exception in
    `ignoring` counts as "not yet". `gone`, when given, is asked at each poll and ends the wait at once with the reason
    it returns (a process that died: waiting on is pointless). Raises WaitTimeout after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            result = check()
            if result:
                return result
        except ignoring:
            pass
        if gone is not None:
            reason = gone()
            if reason:
                raise WaitTimeout(f"{_text(what)}: {reason}")
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"{_text(what)} did not happen within {seconds} s")
        time.sleep(interval)


def _text(what: str | Callable[[], str]) -> str:
    return what() if callable(what) else what
