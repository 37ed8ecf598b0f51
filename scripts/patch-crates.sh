#!/usr/bin/env bash
# Makes the dependencies hyperlightd builds with its own patches (patches/README.md says which
# and why): each crate below as crates.io publishes it, checked against crates.io's SHA-256, with
# patches/<crate>/*.patch applied in order, in target/patched/<crate>-<version>, where
# Cargo.toml's [patch.crates-io] finds it. Run by scripts/setup.sh (and so by ./x and CI);
# quick when the directories are already made from the same patches.
set -euo pipefail
cd "$(dirname "$0")/.."

# crate, version, and the SHA-256 of the .crate file crates.io serves (its index says the same).
crates=(
    "hyperlight-host 0.17.0 d85dcf5ae7a578e1b09bdeb76cc3b3ca8e6e57d6395d2f57204aec45c1bbbde9"
    "hyperlight-host 0.18.0 40f8b85ddd688890477158b9921b228973d1b70c84b866698838df0f32d2aa44"
    "rquickjs-sys 0.12.1 eef73520804cf5aa4876097ac5733058d628c769eba9678e0f4dba5a4ef79703"
    "hyperlight-js-runtime 0.4.0 d3c397d0163456d3099a71d15994a4490abc48ce4c95fe5b805a5fa6489330ba"
    "hyperlight-js 0.4.0 2326a72050cc15010c9ef63586ef73be7c2c710e070fc08aea26dd44d63c233a"
)
out=target/patched
mkdir -p "$out"

fetch() { # crate version sha256 file: the .crate from cargo's own cache, else from crates.io
    local crate=$1 version=$2 sum=$3 file=$4 cached
    echo "$sum  $file" | sha256sum --check --status 2>/dev/null && return
    # On a fresh machine cargo's cache does not exist yet: find fails, and that is no error.
    cached=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/cache" -name "$crate-$version.crate" 2>/dev/null | head -1 || true)
    if [ -n "$cached" ]; then
        cp "$cached" "$file"
    else
        curl -sSfL --retry 3 -o "$file" "https://static.crates.io/crates/$crate/$version/download"
    fi
    if ! echo "$sum  $file" | sha256sum --check --status; then
        echo "patch-crates: $file is not the $crate $version crates.io publishes (SHA-256 differs)" >&2
        exit 1
    fi
}

for entry in "${crates[@]}"; do
    read -r crate version sum <<<"$entry"
    dest=$out/$crate-$version
    stamp=$({ echo "$sum"; cat "patches/$crate"/*.patch; } | sha256sum | cut -d' ' -f1)
    [ "$(cat "$dest/.hyperlightd-patches" 2>/dev/null)" = "$stamp" ] && continue
    fetch "$crate" "$version" "$sum" "$out/$crate-$version.crate"
    work=$(mktemp -d "$out/.work.XXXXXX")
    tar -xzf "$out/$crate-$version.crate" -C "$work"
    for patch in "patches/$crate"/*.patch; do
        if ! patch -d "$work/$crate-$version" -p1 --forward --quiet <"$patch"; then
            echo "patch-crates: $patch does not apply to $crate $version" >&2
            rm -rf "$work"
            exit 1
        fi
    done
    echo "$stamp" >"$work/$crate-$version/.hyperlightd-patches"
    rm -rf "$dest"
    mv "$work/$crate-$version" "$dest"
    rmdir "$work"
    echo "patch-crates: $crate $version with patches/$crate applied, in $dest"
done
