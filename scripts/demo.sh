#!/bin/sh
# Starts hyperlightd on a temporary socket, runs sample programs through hlctl, and stops it.
# Usage: scripts/demo.sh BIN_DIR PYTHON_ROOTFS   (`./x demo` runs it on real KVM, in the VM if
# need be). Python is the native runtime: Debian's CPython with the scientific stack.
set -eu
bin=$1
python_rootfs=$2
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
sock=$dir/hyperlightd.sock
export HYPERLIGHTD_SOCKET=$sock

"$bin/hyperlightd" --pool javascript=2 --pool python=1 \
    --python-runtime native --python-rootfs "$python_rootfs" --startup-timeout-ms 600000 \
    2>"$dir/daemon.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT

# Wait for the pools to warm: up to 600 s (under emulation, importing the scientific stack
# before the Python template is taken takes about a minute).
i=0
until "$bin/hlctl" health >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "hyperlightd exited during startup:"; cat "$dir/daemon.log"; exit 1
    fi
    i=$((i + 1))
    if [ "$i" -gt 3000 ]; then
        echo "hyperlightd did not answer within 600 s:"; cat "$dir/daemon.log"; exit 1
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

# Python: Debian's CPython with numpy, pandas, scipy, scikit-learn and matplotlib imported in
# the template.
run "$bin/hlctl" exec --lang py -e 'import sys, numpy as np; print(sys.version.split()[0]); float(np.linalg.norm([3, 4]))'
run "$bin/hlctl" exec --timeout-ms 30000 "$root/examples/report.py"
run "$bin/hlctl" exec --timeout-ms 30000 --input "$root/examples/sales.csv" --output-dir "$dir/out" \
    "$root/examples/sales.py"
run ls "$dir/out"
run "$bin/hlctl" exec --lang py -e 'import json; json.loads("{broken")'
run "$bin/hlctl" exec --lang py --timeout-ms 1000 -e 'while True: pass'

echo
echo "\$ kill -TERM hyperlightd"
kill -TERM "$pid"
wait "$pid"
echo "hyperlightd exited with status $?"
trap - EXIT
