#!/usr/bin/env bash
# Installs what hyperlightd's build and tests need on a fresh Debian (bookworm) machine:
#  - the Rust toolchain pinned in rust-toolchain.toml, with rust-src (Hyperlight guests are built
#    from source for a custom target); RUSTUP_AUTO_INSTALL=0 means nobody else installs it;
#  - clang, for the QuickJS guest that hyperlight-js builds and the WebAssembly runtime guest
#    that hyperlight-wasm builds;
#  - python3 with venv, for componentize-py (from PyPI), which builds the Python guest;
#  - node and npm, for the JavaScript guest's web APIs (npm packages bundled by esbuild);
#  - qemu-system-x86, linux-image-amd64, busybox-static, cpio: the nested-KVM VM that
#    `cargo xtask vm` boots where the host's own KVM cannot run Hyperlight guests;
#  - systemd-analyze and kubectl, which check the systemd unit and the Kubernetes manifests;
#  - patch and curl, with which scripts/patch-crates.sh checks the dependencies kept with this
#    project's patches in third_party/ against crates.io (.ci/run runs it); jq, which the
#    guides' curl examples use and the end-to-end tests run;
#  - podman (and catatonit, its pods' pause process), which builds the container image
#    (`cargo xtask image`) and, in the VM, plays the DaemonSet's pod; python3-yaml, which turns
#    the DaemonSet into that pod.
# Idempotent and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

packages=(clang qemu-system-x86 linux-image-amd64 busybox-static cpio podman catatonit python3-yaml patch curl jq)
missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# componentize-py runs in a virtualenv under target/; Debian splits venv out of python3.
if ! command -v python3 >/dev/null || ! python3 -m venv --help >/dev/null 2>&1; then
    missing+=(python3 python3-venv)
fi
# npm rebuilds the JavaScript guest's web APIs from their pinned packages (`cargo xtask test`
# checks the bundle in guest/javascript/ is up to date).
if ! command -v npm >/dev/null; then
    missing+=(nodejs npm)
fi
# The deployment checks: systemd-analyze (verify, security) for the systemd unit, and kubectl's
# kustomize for the Kubernetes manifests (any kubectl will do; Debian's is kubernetes-client).
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v kubectl >/dev/null || missing+=(kubernetes-client)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    $sudo apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
if ! command -v rustup >/dev/null; then
    echo "setup: rustup not found; install it first (https://rustup.rs)" >&2
    exit 1
fi
installed=$(rustup component list --toolchain "$toolchain" --installed 2>/dev/null || true)
if ! grep -q '^rust-src' <<<"$installed" || ! grep -q '^clippy' <<<"$installed" || ! grep -q '^rustfmt' <<<"$installed"; then
    echo "setup: installing Rust $toolchain with rust-src, clippy, rustfmt"
    rustup toolchain install "$toolchain" --profile minimal -c rust-src -c clippy -c rustfmt
fi

