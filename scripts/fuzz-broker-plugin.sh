#!/usr/bin/env bash
# Builds broker/plugin/fuzz/flare_auth_fuzz.c with AddressSanitizer + UndefinedBehaviorSanitizer and runs it:
# mutated tokens must never verify, and no input may make the plugin's parsers misbehave.
# usage: scripts/fuzz-broker-plugin.sh [iterations] [seed]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$here/.build/broker/flare_auth_fuzz
mkdir -p "$(dirname "$out")"
${CC:-cc} -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -fno-omit-frame-pointer \
  -fsanitize=address,undefined -fno-sanitize-recover=all \
  -o "$out" "$here/broker/plugin/fuzz/flare_auth_fuzz.c" -lcrypto -lmosquitto
# The harness has no revocations file: the plugin keeps revocations in memory only.
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 "$out" "${1:-200000}" "${2:-1}"
