"""The OpenAPI document against a live flared (`make scripts-test`; about two minutes).

Sources/FlareGateway/OpenAPI/openapi.json is the one description of the HTTP API; flared serves it at
GET /api/v1/openapi.json. Here it is validated with openapi-spec-validator, and Schemathesis (both from PyPI, pinned, in
.build/venv: scripts/deps.sh) runs against `make run`'s flared with every credential the API takes, made first with
the owner key: a share's device token and its link, a standing device's secret, a contact's alerts secret, the metrics
token, and the OwnTracks apps' Basic auth. Each path parameter is fixed to something that exists (Schemathesis's
`[[operations]] parameters`), so that requests reach the handlers rather than stop at "no such share". Its checks: no
server error, every status, content type and required header as documented, every body matching its schema.

What the Swift tests hold apart (Tests/FlareGatewayTests/OpenAPIRouteTests.swift): the document against the route
table, and the schemas' names against the FlareAPI types.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from typing import Any

import pytest
from test_sos import Flare, run_logs, send

from scripts.flarestack import HOST, ROOT, free_span

from runsh import Instance

DOCUMENT = os.path.join(ROOT, "Sources", "FlareGateway", "OpenAPI", "openapi.json")
VENV = os.path.join(ROOT, ".build", "venv", "bin")
# runsh.Instance holds /metrics off the public listener (404), as flared has it without FLARE_METRICS_TOKEN: the token
# Schemathesis sends is then refused as the document says.
METRICS_TOKEN = "metrics-token-for-schemathesis-0123"
# Schemathesis's budget: its fuzzing repeats until this is spent.
SCHEMATHESIS_SECONDS = 90
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance"


def tool(name: str) -> str:
    path = os.path.join(VENV, name)
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing: run scripts/deps.sh", pytrace=False)
    return path


def test_the_document_is_valid_openapi_3_1() -> None:
    done = subprocess.run([tool("openapi-spec-validator"), DOCUMENT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "OK" in done.stdout, done.stdout + done.stderr
    with open(DOCUMENT) as f:
        document = json.load(f)
    assert document["openapi"].startswith("3.1."), document["openapi"]


def test_a_document_that_breaks_the_specification_is_refused(work: str) -> None:
    """The validator as this test runs it does refuse: an operation without its responses, a bad reference."""
    with open(DOCUMENT) as f:
        document = json.load(f)
    del document["paths"]["/healthz"]["get"]["responses"]
    document["paths"]["/api/v1/push/key"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] = {"$ref": 7}
    broken = os.path.join(work, "broken.json")
    with open(broken, "w") as f:
        json.dump(document, f)
    done = subprocess.run([tool("openapi-spec-validator"), broken], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stdout


def toml_string(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for these (ASCII) values


def schemathesis_config(document: dict[str, Any], credentials: dict[str, str], fixed: dict[str, dict[str, str]]) -> str:
    """schemathesis.toml: a credential per security scheme, and per path its parameters' values (the document's
    examples, where nothing real replaces them)."""
    lines = [f"base-url = {toml_string(credentials['base'])}", "", "[auth.openapi]"]
    for scheme in ("ownerKey", "deviceToken", "deviceSecret", "alertsSecret", "metricsToken"):
        lines.append(f"{scheme} = {{ bearer = {toml_string(credentials[scheme])} }}")
    lines.append(f"ownTracksBasic = {{ username = {toml_string(credentials['shareID'])}, password = {toml_string(credentials['deviceToken'])} }}")
    shared = document["components"]["parameters"]
    for path, item in sorted(document["paths"].items()):
        values: dict[str, str] = {}
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                parameter = shared[parameter["$ref"].rsplit("/", 1)[1]] if "$ref" in parameter else parameter
                if parameter["in"] == "path":
                    values[parameter["name"]] = parameter["example"]
        values.update(next((v for prefix, v in fixed.items() if path.startswith(prefix)), {}))
        if values:
            pairs = ", ".join(f"{toml_string('path.' + name)} = {toml_string(value)}" for name, value in sorted(values.items()))
            lines += ["", "[[operations]]", f"include-path = {toml_string(path)}", f"parameters = {{ {pairs} }}"]
    # A live stream stays open: its first events are enough.
    lines += ["", "[[operations]]", 'include-path = "/api/v1/view/{view_token}/events"', "max-stream-events = 2"]
    return "\n".join(lines) + "\n"


def made(flare: Flare, method: str, path: str, body: Any, status: int = 201) -> Any:
    got, answer = flare.call(method, path, body)
    assert got == status, (method, path, got, answer)
    return answer


@pytest.mark.bounded(240)
def test_schemathesis_finds_a_live_flared_answering_as_its_document_says(built: None, work: str, started: list[Instance]) -> None:
    limits = "1000/100000"  # Schemathesis from one address: rate limits would answer most of its requests 429
    instance = Instance(work, "run", free_span(2), extra_env=dict(
        FLARE_VAPID_SUBJECT="mailto:ops@example.org", FLARE_LINK_RATE_PER_ADDRESS=limits,
        FLARE_LINK_RATE_PER_TOKEN=limits, FLARE_SOS_RATE_PER_ADDRESS=limits))
    started.append(instance)
    instance.wait_until_running()
    with open(os.path.join(instance.data_dir, "owner.key")) as f:
        flare = Flare(f"http://{HOST}:{instance.http_port}", f.read().strip(), run_logs(instance))

    # The document flared serves is the file, as it is.
    status, headers, served = send(f"{flare.base}/api/v1/openapi.json")
    assert status == 200 and headers["Content-Type"] == "application/json", (status, headers)
    with open(DOCUMENT, "rb") as f:
        assert served == f.read()
    document = json.loads(served)

    # What the credentials and path parameters name: made with the owner key.
    mum = made(flare, "POST", "/api/v1/contacts", {"name": "Mum", "email": "mum@example.org"})["id"]
    dad = made(flare, "POST", "/api/v1/contacts", {"name": "Dad", "phone": "+4915123456789"})["id"]
    share = made(flare, "POST", "/api/v1/shares", {"name": "Anna", "duration_s": 3600, "contacts": [mum]})
    watched = made(flare, "POST", "/api/v1/shares", {"name": "Ben", "duration_s": 3600})
    device = made(flare, "POST", "/api/v1/devices", {"name": "Anna", "contacts": [mum, dad]})
    other_device = made(flare, "POST", "/api/v1/devices", {"name": "Carl", "contacts": [dad]})
    checkin = made(flare, "POST", "/api/v1/checkins", {"in_s": 7200, "contacts": [dad]})
    spare_key = made(flare, "POST", "/api/v1/keys", {"label": "schemathesis"})
    alerts_url = made(flare, "GET", f"/api/v1/contacts/{mum}/alerts-link", None, 200)["url"]
    credentials = {
        "base": flare.base, "ownerKey": flare.owner_key, "deviceToken": share["device_token"], "shareID": share["share_id"],
        "deviceSecret": device["secret"], "alertsSecret": alerts_url.split("#c=", 1)[1], "metricsToken": METRICS_TOKEN,
    }
    fixed = {
        "/api/v1/shares/{id}": {"id": share["share_id"], "link_id": share["links"][0]["link_id"]},
        "/api/v1/checkins/{id}": {"id": checkin["checkin_id"]},
        "/api/v1/devices/{id}": {"id": other_device["device_id"]},
        "/api/v1/contacts/{id}": {"id": dad},
        "/api/v1/keys/{id}": {"id": spare_key["info"]["id"]},
        "/api/v1/osmand/{secret}": {"secret": device["secret"]},
        "/api/v1/view/{view_token}": {"view_token": watched["share_url"].rsplit("/", 1)[1]},
        "/s/{view_token}": {"view_token": watched["share_url"].rsplit("/", 1)[1]},
    }
    config = os.path.join(work, "schemathesis.toml")
    with open(config, "w") as f:
        f.write(schemathesis_config(document, credentials, fixed))

    began = time.monotonic()
    done = subprocess.run(
        # The file, which the served document is: Schemathesis leaves out the operation it loads a document from.
        [tool("schemathesis"), "--config-file", config, "run", DOCUMENT, "--url", flare.base, "--checks", CHECKS,
         # One worker: Hypothesis describes its strategies with ast.parse, which two threads at once can break on this
         # machine's Python 3.11.7 ("AST constructor recursion depth mismatch", CPython gh-106905, fixed in 3.11.8),
         # failing a run for nothing flared did.
         "--max-time", str(SCHEMATHESIS_SECONDS), "--workers", "1", "--request-timeout", "10", "--no-color"],
        cwd=work, capture_output=True, text=True, timeout=SCHEMATHESIS_SECONDS + 90,
        env={k: v for k, v in os.environ.items() if not k.startswith("SCHEMATHESIS_")})
    output = done.stdout + done.stderr
    print(f"schemathesis: {time.monotonic() - began:.0f} s")
    print("\n".join(output.splitlines()[-15:]))
    assert done.returncode == 0, "\n".join(output.splitlines()[-150:])
    # It did test: every operation, and none was left out for a problem of the document.
    operations = sum(len(item) for item in document["paths"].values())
    summary = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", output)
    assert summary and summary.groups() == (str(operations),) * 3, output[-3000:]
    # flared is still up, and Schemathesis left its owner key alone.
    assert made(flare, "GET", "/api/v1/keys", None, 200)["keys"]
