# Flare: two commands. `make run` starts everything with a moving demo share; `make test` runs every test.
# Both install the Debian packages they need first and honour FLARE_DATA_DIR, FLARE_HTTP_ADDR, FLARE_MQTT_PORT.
SWIFT ?= swift
SWIFT_BUILD_FLAGS ?=

.PHONY: run test deps browser-deps build swift-test browser-test clean

run: deps build
	./scripts/run.sh

test: deps build swift-test browser-test

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

clean:
	rm -rf .build
