# Flare: two commands. `make run` starts everything with a moving demo share; `make test` runs every test.
# Both install the Debian packages they need first and honour FLARE_DATA_DIR, FLARE_HTTP_ADDR, FLARE_MQTT_PORT.
SWIFT ?= swift
SWIFT_BUILD_FLAGS ?=

.PHONY: run cluster test deps browser-deps bench-deps build plugin lint swift-test scripts-test browser-test bench chaos chaos-quick fuzz clean

run: deps build plugin
	./scripts/run.sh

# Two flared instances on a throwaway PostgreSQL (in the data directory) and one broker, with the demo share; an
# instance that fails is restarted (scripts/run.sh says when and how).
# Honours FLARE_DATA_DIR (default ./data-cluster), FLARE_HTTP_ADDR (and the next port), FLARE_MQTT_PORT, FLARE_PG_PORT.
# `make cluster BROKER=nats`: three NATS nodes behind HAProxy instead of the one mosquitto (docs/scaling.md).
BROKER ?= mosquitto
cluster: deps build plugin
	FLARE_INSTANCES=2 FLARE_BROKER=$(BROKER) ./scripts/run.sh

test: deps build plugin lint swift-test scripts-test browser-test chaos-quick fuzz

deps:
	./scripts/deps.sh

browser-deps:
	./scripts/deps.sh --browser

build: plugin
	$(SWIFT) build $(SWIFT_BUILD_FLAGS)

# The broker's auth plugin (C, mosquitto 2.0 plugin API v5, OpenSSL libcrypto). scripts/broker.sh loads it.
CC ?= cc
PLUGIN := .build/broker/flare_auth.so
PLUGIN_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fstack-protector-strong -D_FORTIFY_SOURCE=2 -O2 -fPIC -shared
plugin: $(PLUGIN)

$(PLUGIN): broker/plugin/flare_auth.c
	mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -o $@ $< -lcrypto

# The Swift tests, with a deadline: a test that hangs fails the run and is named, with its stacks.
swift-test:
	/usr/bin/python3 scripts/swift-test.py $(SWIFT_BUILD_FLAGS)

# The Python side: every file of scripts/ and Tests/ checked by ruff (ruff.toml; make deps installs it).
lint: deps
	.build/venv/bin/ruff check scripts Tests

# pytest on Tests/scripts: Package.swift's imports and docs/architecture.md's arrows; two `make run` instances side by
# side on free loopback ports, then Ctrl-C to each (about 10 s); `make cluster` with each instance killed in turn (it is
# restarted, the other keeps serving), then stopped, and on NATS with a node killed (about 70 s); a device's SOS as each
# tracking app sends it, mailed through a real SMTP server, and one press seen by two instances at once (about 15 s).
# Python runs from the repository root as modules (python3 -m …), so that scripts.flarestack is found.
scripts-test: deps build plugin
	/usr/bin/python3 -m pytest -q -p no:cacheprovider Tests/scripts

# The viewer in headless Chromium against a real broker and flared (screenshots in artifacts/).
browser-test: browser-deps
	./scripts/browser-test.sh

bench-deps:
	./scripts/deps.sh --bench

# Benchmarks against references measured in the same run (release build, own broker and flared on loopback).
# `make bench` takes about two minutes; `make bench ARGS=--long` is the full-size run quoted in the README.
bench: deps bench-deps plugin
	$(SWIFT) build -c release
	/usr/bin/python3 -m scripts.bench.bench $(ARGS)

# Fault tests against real processes: kill -9 during ingest, broker restart, full disk, malformed HTTP, link abuse.
chaos: deps build plugin
	/usr/bin/python3 -m scripts.chaos.chaos $(ARGS)

# The same cases with shorter streams (about a minute), part of `make test`.
chaos-quick: deps build plugin
	/usr/bin/python3 -m scripts.chaos.chaos --quick

# libFuzzer on the payload and token parsers, FUZZ_SECONDS long (default 30).
fuzz:
	./scripts/fuzz/fuzz.sh

clean:
	rm -rf .build
