#!/usr/bin/env bash
# Fuzzes Flare's parsers of untrusted input (location payloads, JSON, share tokens, link tokens, topics) with
# libFuzzer through swiftc -sanitize=fuzzer,address. Bounded: FUZZ_SECONDS (default 30). Starts from the committed
# corpus in Tests/Fuzz/corpus; new inputs go to .build/fuzz/corpus, crashes to .build/fuzz/ (and fail the run).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${FUZZ_SECONDS:-30}
out=$here/.build/fuzz
swiftc=${SWIFTC:-$(command -v swiftc || echo /opt/swift/usr/bin/swiftc)}
mkdir -p "$out/corpus"
flags=(-sanitize=fuzzer,address -parse-as-library -O -g -wmo -I "$out" -I "$here/Sources/COpenSSL")
# The modules the parsers live in (FlareCore and what it imports), each after those it imports, then the fuzz target linked against them and libcrypto.
modules=(FlareSystem FlareAPI FlareCodec FlareCrypto FlareCore)
for module in "${modules[@]}"; do
  "$swiftc" "${flags[@]}" -module-name "$module" -emit-module -emit-module-path "$out/$module.swiftmodule" \
    -emit-object -o "$out/$module.o" "$here"/Sources/"$module"/*.swift 2> >(grep -v "ld.gold: warning" >&2)
done
objects=("${modules[@]/#/$out/}")
"$swiftc" "${flags[@]}" -module-name FuzzParsers "$here/Tests/Fuzz/FuzzParsers.swift" "${objects[@]/%/.o}" \
  -lcrypto -o "$out/fuzz-parsers" 2>&1 | grep -v "ld.gold: warning" >&2 || true
cd "$out"
echo "fuzz: running for ${seconds} s"
status=0
"$out/fuzz-parsers" -max_total_time="$seconds" -max_len=4096 -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
  "$out/corpus" "$here/Tests/Fuzz/corpus" > "$out/fuzz.log" 2>&1 || status=$?
grep -E "^(Done|stat::number_of_executed_units|stat::new_units_added|==[0-9]+==ERROR|SUMMARY)" "$out/fuzz.log" || true
if [ "$status" -ne 0 ]; then tail -40 "$out/fuzz.log"; echo "fuzz: 0 passed, 1 failed (the crashing input is in $out)"; exit 1; fi
echo "fuzz: 1 passed, 0 failed"
