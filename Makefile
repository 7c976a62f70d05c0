# Flare: two commands. `make run` starts everything with a moving demo share; `make test` runs every test.
# Both install the Debian packages they need first and honour FLARE_DATA_DIR, FLARE_HTTP_ADDR, FLARE_MQTT_PORT.
SWIFT ?= swift
SWIFT_BUILD_FLAGS ?=

.PHONY: run test deps browser-deps bench-deps build swift-test browser-test bench chaos chaos-quick fuzz clean

run: deps build
	./scripts/run.sh

test: deps build swift-test browser-test chaos-quick fuzz

deps:
	./scripts/deps.sh

browser-deps:
	./scripts/deps.sh --browser

build:
	$(SWIFT) build $(SWIFT_BUILD_FLAGS)

swift-test:
	$(SWIFT) test $(SWIFT_BUILD_FLAGS)

# The viewer in headless Chromium against a real broker and flared (screenshots in artifacts/).
browser-test: browser-deps
	./scripts/browser-test.sh

bench-deps:
	./scripts/deps.sh --bench

# Benchmarks against references measured in the same run (release build, own broker and flared on loopback).
# `make bench` takes about two minutes; `make bench ARGS=--long` is the full-size run quoted in the README.
bench: deps bench-deps
	$(SWIFT) build -c release
	/usr/bin/python3 scripts/bench/bench.py $(ARGS)

# Fault tests against real processes: kill -9 during ingest, broker restart, full disk, malformed HTTP, link abuse.
chaos: deps build
	/usr/bin/python3 scripts/chaos/chaos.py $(ARGS)

# The same cases with shorter streams (about a minute), part of `make test`.
chaos-quick: deps build
	/usr/bin/python3 scripts/chaos/chaos.py --quick

# libFuzzer on the payload and token parsers, FUZZ_SECONDS long (default 30).
fuzz:
	./scripts/fuzz/fuzz.sh

clean:
	rm -rf .build
