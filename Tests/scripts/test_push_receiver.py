"""The tests' Web Push receiver (scripts/flarestack/push.py), without flared (`make scripts-test`; about a second).

The application server is played by code of its own: the message is encrypted with http_ece as a sender (RFC 8291) and
the VAPID token signed with PyJWT (ES256, raw r‖s as RFC 8292 wants), then posted with urllib. The receiver must take a
good message, decrypted, with its headers; refuse a token signed with another key, for another origin or expiring too
late; and answer what a test scripted.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from scripts.flarestack.push import PushReceiver, b64url, load_http_ece, unb64url

http_ece = load_http_ece()


def point(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)


@pytest.fixture
def vapid() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture
def receiver(vapid: ec.EllipticCurvePrivateKey) -> Iterator[PushReceiver]:
    with PushReceiver(server_key=b64url(point(vapid))) as receiver:
        yield receiver


def push(receiver: PushReceiver, subscription: dict[str, Any], payload: Any, vapid: ec.EllipticCurvePrivateKey, *,
         signer: ec.EllipticCurvePrivateKey | None = None, claims: dict[str, Any] | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    """Sends `payload` to `subscription` as an application server would; returns the status and headers answered."""
    body = http_ece.encrypt(json.dumps(payload).encode(), private_key=ec.generate_private_key(ec.SECP256R1()),
                            dh=unb64url(subscription["keys"]["p256dh"], "p256dh"), auth_secret=unb64url(subscription["keys"]["auth"], "auth"),
                            version="aes128gcm")
    token = jwt.encode({"aud": receiver.origin, "exp": int(time.time()) + 12 * 3600, "sub": "mailto:flare@example.org", **(claims or {})},
                       signer or vapid, algorithm="ES256", headers={"typ": "JWT"})
    request = urllib.request.Request(subscription["endpoint"], data=body, method="POST", headers={
        "Content-Encoding": "aes128gcm", "Content-Type": "application/octet-stream", "TTL": "60",
        "Authorization": f"vapid t={token}, k={b64url(point(vapid))}", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


def test_a_good_message_arrives_decrypted_with_its_headers(receiver: PushReceiver, vapid: ec.EllipticCurvePrivateKey) -> None:
    subscription = receiver.subscription("a")
    assert subscription["endpoint"] == f"http://127.0.0.1:{receiver.port}/push/a"
    assert len(unb64url(subscription["keys"]["p256dh"], "p256dh")) == 65 and len(unb64url(subscription["keys"]["auth"], "auth")) == 16
    before = time.monotonic()
    status, headers = push(receiver, subscription, {"kind": "sos", "name": "Ana"}, vapid,
                           headers={"TTL": "3600", "Urgency": "high", "Topic": "sos-Ana_1"})
    assert status == 201 and headers["Location"].startswith(receiver.origin)
    status, _ = push(receiver, subscription, {"kind": "ended"}, vapid)
    assert status == 201
    first, second = receiver.wait_for("a", 2)
    assert first["payload"] == {"kind": "sos", "name": "Ana"} and (first["ttl"], first["urgency"], first["topic"]) == (3600, "high", "sos-Ana_1")
    assert second["payload"] == {"kind": "ended"} and (second["ttl"], second["urgency"], second["topic"]) == (60, None, None)
    assert before <= first["at"] <= second["at"] <= time.monotonic()
    assert receiver.all_messages() == {"a": [first, second]}
    assert [attempt["status"] for attempt in receiver.attempts] == [201, 201]
    assert receiver.errors == []


def test_a_token_signed_with_another_key_is_refused(receiver: PushReceiver, vapid: ec.EllipticCurvePrivateKey) -> None:
    subscription = receiver.subscription("a")
    status, _ = push(receiver, subscription, {"kind": "sos"}, vapid, signer=ec.generate_private_key(ec.SECP256R1()))
    assert status == 400
    assert receiver.messages("a") == [] and [attempt["status"] for attempt in receiver.attempts] == [400]
    assert len(receiver.errors) == 1 and "signature does not verify" in receiver.errors[0]


@pytest.mark.parametrize("claims, problem", [
    ({"aud": "https://push.example.org"}, "aud"),
    ({"exp": int(time.time()) + 25 * 3600}, "more than 24 h"),
    ({"exp": int(time.time()) - 10}, "past"),
    ({"sub": "flare@example.org"}, "sub"),
])
def test_a_token_with_wrong_claims_is_refused(receiver: PushReceiver, vapid: ec.EllipticCurvePrivateKey, claims: dict[str, Any], problem: str) -> None:
    subscription = receiver.subscription("a")
    assert push(receiver, subscription, {"kind": "sos"}, vapid, claims=claims)[0] == 400
    assert receiver.messages("a") == []
    assert len(receiver.errors) == 1 and problem in receiver.errors[0]


@pytest.mark.parametrize("headers, problem", [
    ({"TTL": "-1"}, "TTL"),
    ({"Urgency": "urgent"}, "Urgency"),
    ({"Topic": "a" * 33}, "Topic"),
    ({"Topic": "sos.Ana"}, "Topic"),
    ({"Content-Encoding": "aesgcm"}, "Content-Encoding"),
])
def test_wrong_headers_are_refused(receiver: PushReceiver, vapid: ec.EllipticCurvePrivateKey, headers: dict[str, str], problem: str) -> None:
    subscription = receiver.subscription("a")
    assert push(receiver, subscription, {"kind": "sos"}, vapid, headers=headers)[0] == 400
    assert receiver.messages("a") == []
    assert len(receiver.errors) == 1 and problem in receiver.errors[0]


def test_scripted_answers_then_created(receiver: PushReceiver, vapid: ec.EllipticCurvePrivateKey) -> None:
    gone, busy = receiver.subscription("gone"), receiver.subscription("busy")
    receiver.respond("gone", 410)
    receiver.respond("busy", 503, retry_after=2)
    assert push(receiver, gone, {"n": 1}, vapid)[0] == 410
    assert push(receiver, gone, {"n": 2}, vapid)[0] == 201
    status, headers = push(receiver, busy, {"n": 1}, vapid)
    assert status == 503 and headers["Retry-After"] == "2"
    status, headers = push(receiver, busy, {"n": 2}, vapid)
    assert status == 201 and "Retry-After" not in headers
    assert [message["payload"] for message in receiver.messages("gone")] == [{"n": 2}]
    assert [message["payload"] for message in receiver.messages("busy")] == [{"n": 2}]
    assert [(attempt["name"], attempt["status"]) for attempt in receiver.attempts] == [("gone", 410), ("gone", 201), ("busy", 503), ("busy", 201)]
    assert receiver.errors == []


def test_waiting_names_what_arrived(receiver: PushReceiver, vapid: ec.EllipticCurvePrivateKey) -> None:
    subscription = receiver.subscription("a")
    push(receiver, subscription, {"kind": "sos"}, vapid)
    with pytest.raises(AssertionError, match=r"a: 1 of 2 push messages arrived.*'kind': 'sos'"):
        receiver.wait_for("a", 2, timeout=0.2)
