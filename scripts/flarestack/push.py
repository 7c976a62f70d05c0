"""A Web Push receiver on loopback standing in for a push service (RFC 8030): for the script tests of push to contacts.

`PushReceiver.subscription(name)` makes a subscription as a browser would (a P-256 key pair and an auth secret of its
own) and returns the JSON flared's subscription endpoints take; its endpoint is this server's `/push/<name>`. Each POST
there is checked as a push service would and more: the headers of RFC 8030 §5 (TTL, Urgency, Topic), the VAPID
authorization of RFC 8292 (the key is flared's, the ES256 signature verifies, `aud` is this origin, `exp` is within 24 h,
`sub` is a contact URI), and the aes128gcm encryption of RFC 8291, undone with `http_ece` (PyPI, pinned in
scripts/deps.sh, in .build/venv). A request that fails a check is answered 400 and its failure kept in `errors`, which the
tests assert empty; the others are answered 201 Created, or what a test scripted with `respond`.

Each message is kept with the moment the server accepted it (time.monotonic() of this process), its TTL, Urgency and
Topic, and its payload, decrypted and decoded from JSON.
"""

from __future__ import annotations

import base64
import binascii
import http.server
import json
import os
import re
import struct
import sys
import threading
import time
from collections import deque
from types import ModuleType
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from .ports import HOST, free_span
from .root import ROOT
from .wait import wait_until

URGENCIES = ("very-low", "low", "normal", "high")
TOPIC = re.compile(r"[A-Za-z0-9_-]{1,32}")
BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
MAX_BODY = 4096
# RFC 8292 §2: the expiry is at most 24 hours after the request.
MAX_EXPIRY = 24 * 3600
# RFC 8291 §4: the aes128gcm header (salt 16, record size 4, key id length 1) and the key id, the sender's public point.
HEADER_LENGTH = 21
POINT_LENGTH = 65


def load_http_ece() -> ModuleType:
    """The http_ece module: importable already, or from .build/venv (the tests run under Debian's Python, outside the
    venv; its site-packages go last on the path, so Debian's packages, cryptography among them, still come first)."""
    try:
        import http_ece
    except ImportError:
        site = os.path.join(ROOT, ".build", "venv", "lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")
        if not os.path.isdir(os.path.join(site, "http_ece")):
            raise ImportError(f"http_ece is not in {site}: run scripts/deps.sh") from None
        if site not in sys.path:
            sys.path.append(site)
        import http_ece
    return http_ece


def b64url(data: bytes) -> str:
    """base64url without padding (RFC 7515 §2), as Web Push keys and JWTs are written."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str, what: str) -> bytes:
    """Decodes base64url without padding; a ValueError names `what` if it is not that."""
    if not BASE64URL.fullmatch(text):
        raise ValueError(f"{what} is not unpadded base64url: {text[:80]!r}")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not unpadded base64url: {text[:80]!r}") from None


class _Subscription:
    def __init__(self) -> None:
        self.private_key = ec.generate_private_key(ec.SECP256R1())
        self.public_point = self.private_key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
        self.auth_secret = os.urandom(16)
        self.answers: deque[tuple[int, int | None]] = deque()
        self.messages: list[dict[str, Any]] = []


class PushReceiver:
    """The push service on its own thread, on a free loopback port: `start()` (or `with`) serves, `stop()` ends it.

    `server_key` is flared's VAPID public key (base64url of its uncompressed point, as `GET /api/v1/push/key` gives it);
    set it before flared sends."""

    def __init__(self, server_key: str | None = None) -> None:
        self.server_key = server_key
        self.port = free_span()
        self.origin = f"http://{HOST}:{self.port}"
        self.errors: list[str] = []
        self.attempts: list[dict[str, Any]] = []
        self._subscriptions: dict[str, _Subscription] = {}
        self._lock = threading.Lock()
        self._created = 0
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._http_ece = load_http_ece()

    def start(self) -> PushReceiver:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = self.headers.get("Content-Length")
                body = self.rfile.read(int(length)) if length and length.isdigit() else b""
                if body == b"" and length != "0":
                    self.close_connection = True  # a body of no stated length: what follows on the connection is not a request
                status, headers, text = receiver._receive(self.path, self.headers, body, length)
                self._answer(status, headers, text)

            def _refuse(self) -> None:
                receiver._record(self.path, 405, f"{self.command} {self.path}: a push service takes POST only")
                self._answer(405, {"Allow": "POST"}, "POST only\n")

            do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = _refuse

            def _answer(self, status: int, headers: dict[str, str], text: str) -> None:
                data = text.encode()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer((HOST, self.port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="push-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> PushReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def subscription(self, name: str) -> dict[str, Any]:
        """A new subscription named `name` (a path segment), as a browser's PushSubscription.toJSON() gives it."""
        if not re.fullmatch(r"[A-Za-z0-9._~-]+", name):
            raise ValueError(f"subscription name {name!r}: letters, digits and ._~- only")
        subscription = _Subscription()
        with self._lock:
            if name in self._subscriptions:
                raise ValueError(f"subscription {name!r} exists already")
            self._subscriptions[name] = subscription
        return {"endpoint": self.endpoint(name),
                "keys": {"p256dh": b64url(subscription.public_point), "auth": b64url(subscription.auth_secret)}}

    def endpoint(self, name: str) -> str:
        return f"{self.origin}/push/{name}"

    def respond(self, name: str, *statuses: int, retry_after: int | None = None) -> None:
        """The next requests to `name` that pass the checks are answered these statuses, in order (with Retry-After
        when given); then 201 again."""
        with self._lock:
            self._subscriptions[name].answers.extend((status, retry_after) for status in statuses)

    def messages(self, name: str) -> list[dict[str, Any]]:
        """The messages `name` was sent and this server took (answered 2xx), in the order they arrived:
        {"payload", "ttl", "urgency", "topic", "at"}."""
        with self._lock:
            return list(self._subscriptions[name].messages)

    def all_messages(self) -> dict[str, list[dict[str, Any]]]:
        """Every subscription's messages, by name (an empty list for a subscription sent nothing)."""
        with self._lock:
            return {name: list(subscription.messages) for name, subscription in self._subscriptions.items()}

    def wait_for(self, name: str, count: int, timeout: float = 10) -> list[dict[str, Any]]:
        """Waits until `name` has taken at least `count` messages; returns them all. Raises an AssertionError naming what
        arrived (and any request that failed the checks) when the time is up."""
        def state() -> str:
            payloads = {key: [message["payload"] for message in messages] for key, messages in self.all_messages().items()}
            return f"{name}: {len(self.messages(name))} of {count} push messages arrived; all: {payloads}; errors: {self.errors}"

        wait_until(lambda: len(self.messages(name)) >= count, timeout, state)
        return self.messages(name)

    # The service.

    def _record(self, path: str, status: int, error: str | None = None) -> None:
        name = path[len("/push/"):] if path.startswith("/push/") else path
        with self._lock:
            self.attempts.append({"name": name, "status": status, "at": time.monotonic()})
            if error is not None:
                self.errors.append(error)

    def _receive(self, path: str, headers: Any, body: bytes, length: str | None) -> tuple[int, dict[str, str], str]:
        at = time.monotonic()
        name = path[len("/push/"):] if path.startswith("/push/") else None
        with self._lock:
            subscription = self._subscriptions.get(name) if name is not None else None
        if subscription is None:
            self._record(path, 404, f"POST {path}: no such subscription")
            return 404, {}, "no such subscription\n"
        problems: list[str] = []
        if length is None or not length.isdigit():
            problems.append(f"Content-Length {length!r}: a push message has a length")
        ttl, urgency, topic = self._check_headers(headers, body, problems)
        self._check_vapid(headers.get("Authorization"), problems)
        payload = self._decrypt(subscription, body, problems) if not problems else None
        if problems:
            self._record(path, 400, f"POST {path}: " + "; ".join(problems))
            return 400, {}, "\n".join(problems) + "\n"
        with self._lock:
            status, retry_after = subscription.answers.popleft() if subscription.answers else (201, None)
            answer: dict[str, str] = {}
            if retry_after is not None:
                answer["Retry-After"] = str(retry_after)
            if 200 <= status < 300:
                self._created += 1
                answer["Location"] = f"{self.origin}/message/{self._created}"
                subscription.messages.append({"payload": payload, "ttl": ttl, "urgency": urgency, "topic": topic, "at": at})
            self.attempts.append({"name": name, "status": status, "at": at})
        return status, answer, f"{status}\n"

    def _check_headers(self, headers: Any, body: bytes, problems: list[str]) -> tuple[int | None, str | None, str | None]:
        encoding = headers.get("Content-Encoding")
        if encoding != "aes128gcm":
            problems.append(f"Content-Encoding {encoding!r}, not 'aes128gcm' (RFC 8291)")
        ttl_text = headers.get("TTL")
        ttl = None
        if ttl_text is None:
            problems.append("no TTL header (RFC 8030 §5.2)")
        elif not re.fullmatch(r"[0-9]+", ttl_text):
            problems.append(f"TTL {ttl_text!r} is not an integer ≥ 0 (RFC 8030 §5.2)")
        else:
            ttl = int(ttl_text)
        urgency = headers.get("Urgency")
        if urgency is not None and urgency not in URGENCIES:
            problems.append(f"Urgency {urgency!r} is not one of {', '.join(URGENCIES)} (RFC 8030 §5.3)")
        topic = headers.get("Topic")
        if topic is not None and not TOPIC.fullmatch(topic):
            problems.append(f"Topic {topic!r} is not 1 to 32 characters of the base64url alphabet (RFC 8030 §5.4)")
        if len(body) > MAX_BODY:
            problems.append(f"body of {len(body)} bytes, more than {MAX_BODY}")
        return ttl, urgency, topic

    def _check_vapid(self, authorization: str | None, problems: list[str]) -> None:
        if authorization is None:
            problems.append("no Authorization header (RFC 8292 §3)")
            return
        scheme, _, rest = authorization.strip().partition(" ")
        if scheme.lower() != "vapid":
            problems.append(f"Authorization scheme {scheme!r}, not 'vapid' (RFC 8292 §3)")
            return
        parameters: dict[str, str] = {}
        for part in rest.split(","):
            key, equals, value = part.strip().partition("=")
            if not equals or key in parameters:
                problems.append(f"Authorization {authorization[:200]!r}: not `vapid t=<jwt>, k=<key>`")
                return
            parameters[key] = value
        if set(parameters) != {"t", "k"}:
            problems.append(f"Authorization parameters {sorted(parameters)}, not t and k (RFC 8292 §3)")
            return
        try:
            key = unb64url(parameters["k"], "k")
            if self.server_key is None:
                problems.append("the receiver has no server_key to check k against")
            elif key != unb64url(self.server_key.rstrip("="), "server_key"):
                problems.append(f"k {parameters['k']!r} is not flared's key {self.server_key!r}")
            public_key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key)
        except ValueError as error:
            problems.append(f"k: {error}")
            return
        problems.extend(self._check_jwt(parameters["t"], public_key))

    def _check_jwt(self, token: str, public_key: ec.EllipticCurvePublicKey) -> list[str]:
        parts = token.split(".")
        if len(parts) != 3:
            return [f"t {token[:80]!r} is not a JWS in compact form"]
        try:
            header = json.loads(unb64url(parts[0], "JWT header"))
            claims = json.loads(unb64url(parts[1], "JWT claims"))
            signature = unb64url(parts[2], "JWT signature")
        except ValueError as error:
            return [f"t: {error}"]
        if not isinstance(header, dict) or not isinstance(claims, dict):
            return [f"JWT header {header!r} or claims {claims!r} are not objects"]
        problems = []
        if header.get("alg") != "ES256" or header.get("typ", "JWT") != "JWT" or set(header) - {"alg", "typ"}:
            problems.append(f"JWT header {header}, not {{'typ': 'JWT', 'alg': 'ES256'}}")
        if len(signature) != 64:
            problems.append(f"JWT signature of {len(signature)} bytes, not the 64 of ES256's r‖s (RFC 7518 §3.4)")
        else:
            der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
            try:
                public_key.verify(der, f"{parts[0]}.{parts[1]}".encode("ascii"), ec.ECDSA(hashes.SHA256()))
            except InvalidSignature:
                problems.append("the JWT's ES256 signature does not verify with k")
        if claims.get("aud") != self.origin:
            problems.append(f"JWT aud {claims.get('aud')!r}, not the endpoint's origin {self.origin!r}")
        exp, now = claims.get("exp"), time.time()
        if not isinstance(exp, int) or isinstance(exp, bool):
            problems.append(f"JWT exp {exp!r} is not an integer")
        elif exp <= now:
            problems.append(f"JWT exp {exp} is past (now {now:.0f})")
        elif exp > now + MAX_EXPIRY:
            problems.append(f"JWT exp {exp} is {exp - now:.0f} s ahead, more than 24 h (RFC 8292 §2)")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub.startswith(("mailto:", "https:")):
            problems.append(f"JWT sub {sub!r} is not a mailto: or https: URI (RFC 8292 §2.1)")
        return problems

    def _decrypt(self, subscription: _Subscription, body: bytes, problems: list[str]) -> Any:
        if len(body) < HEADER_LENGTH:
            problems.append(f"body of {len(body)} bytes, shorter than the aes128gcm header")
            return None
        record_size, key_id_length = struct.unpack("!LB", body[16:HEADER_LENGTH])
        if key_id_length != POINT_LENGTH:
            problems.append(f"aes128gcm key id of {key_id_length} bytes, not the sender's 65-byte public point (RFC 8291 §4)")
            return None
        if record_size < 18 or len(body) - HEADER_LENGTH - key_id_length > record_size:
            problems.append(f"aes128gcm record size {record_size} for {len(body) - HEADER_LENGTH - key_id_length} bytes: not one record (RFC 8291 §4)")
            return None
        try:
            plaintext = self._http_ece.decrypt(body, private_key=subscription.private_key, auth_secret=subscription.auth_secret, version="aes128gcm")
        except Exception as error:  # http_ece.ECEException, or cryptography's ValueError for a key id off the curve
            problems.append(f"the body does not decrypt: {getattr(error, 'message', None) or error!r}")
            return None
        try:
            return json.loads(plaintext.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            problems.append(f"the plaintext is not JSON: {plaintext[:200]!r}")
            return None
