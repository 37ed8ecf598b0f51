#!/bin/sh
# Starts hyperlightd on a temporary socket, runs sample programs through hlctl, and stops it.
# Usage: scripts/demo.sh BIN_DIR   (`./x demo` runs it on real KVM, in the VM if need be)
set -eu
bin=$1
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
sock=$dir/hyperlightd.sock
export HYPERLIGHTD_SOCKET=$sock

"$bin/hyperlightd" --pool javascript=2 2>"$dir/daemon.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT

# Wait for the pools to warm: up to 120 s (emulated KVM is slow to start sandboxes).
i=0
until "$bin/hlctl" health >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "hyperlightd exited during startup:"; cat "$dir/daemon.log"; exit 1
    fi
    i=$((i + 1))
    if [ "$i" -gt 600 ]; then
        echo "hyperlightd did not answer within 120 s:"; cat "$dir/daemon.log"; exit 1
    fi
    sleep 0.2
done

run() {
    echo
    echo "\$ $*"
    "$@" 2>&1 || echo "(exit status $?)"
}

run "$bin/hlctl" health
run "$bin/hlctl" exec --lang js -e 'console.log(1 + 1)'
run "$bin/hlctl" exec "$root/examples/primes.js"
echo
echo "\$ echo 'console.log(\"from stdin\"); [1, 2, 3].map(x => x * 2)' | hlctl exec --lang js"
echo 'console.log("from stdin"); [1, 2, 3].map(x => x * 2)' | "$bin/hlctl" exec --lang js
run "$bin/hlctl" exec --lang js -e 'function f() { throw new TypeError("no such thing") } f()'
run "$bin/hlctl" exec --lang js --timeout-ms 200 -e 'while (true) {}'
run "$bin/hlctl" exec --json --lang js -e '"warm start"'

echo
echo "\$ kill -TERM hyperlightd"
kill -TERM "$pid"
wait "$pid"
echo "hyperlightd exited with status $?"
trap - EXIT
