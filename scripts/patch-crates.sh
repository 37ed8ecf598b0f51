#!/usr/bin/env bash
# The dependencies hyperlightd builds with changes of its own (patches/README.md says which and
# why) are kept in the repository, in third_party/<crate>-<version>: each crate as crates.io
# publishes it (checked against crates.io's SHA-256) with its patches applied in order, first
# patches/<crate>/*.patch, then patches/<crate>/<version>/*.patch. The tree is what the build
# uses ([patch.crates-io] in Cargo.toml), so a plain `cargo build` of a fresh clone works; the
# .patch files are its readable diff against crates.io, each with its description.
#
#   scripts/patch-crates.sh check          the tree is exactly the crates and their patches (CI)
#   scripts/patch-crates.sh update         rewrite the tree from the crates and the patches
#   scripts/patch-crates.sh diff CRATE-VER what the tree has beyond the crate and its patches, as
#                                          a patch (to keep an edit made in the tree)
set -euo pipefail
cd "$(dirname "$0")/.."

# crate, version, and the SHA-256 of the .crate file crates.io serves (its index says the same).
crates=(
    "hyperlight-host 0.17.0 d85dcf5ae7a578e1b09bdeb76cc3b3ca8e6e57d6395d2f57204aec45c1bbbde9"
    "hyperlight-host 0.18.0 40f8b85ddd688890477158b9921b228973d1b70c84b866698838df0f32d2aa44"
    "rquickjs-sys 0.12.1 eef73520804cf5aa4876097ac5733058d628c769eba9678e0f4dba5a4ef79703"
    "hyperlight-js-runtime 0.4.0 d3c397d0163456d3099a71d15994a4490abc48ce4c95fe5b805a5fa6489330ba"
    "hyperlight-js 0.4.0 2326a72050cc15010c9ef63586ef73be7c2c710e070fc08aea26dd44d63c233a"
    "pep508_rs 0.9.2 faee7227064121fcadcd2ff788ea26f0d8f2bd23a0574da11eca23bc935bcc05"
)
tree=third_party
cache=target/crates
mode=${1:-}

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

patches_of() { # crate version: its patches, in the order they apply
    local crate=$1 version=$2
    find "patches/$crate" -maxdepth 1 -name '*.patch' 2>/dev/null | sort
    find "patches/$crate/$version" -maxdepth 1 -name '*.patch' 2>/dev/null | sort
}

# crate version sha256 dir: the crate with its patches applied, in dir/<crate>-<version>.
derive() {
    local crate=$1 version=$2 sum=$3 dir=$4 patch
    mkdir -p "$cache"
    fetch "$crate" "$version" "$sum" "$cache/$crate-$version.crate"
    tar -xzf "$cache/$crate-$version.crate" -C "$dir"
    for patch in $(patches_of "$crate" "$version"); do
        if ! patch -d "$dir/$crate-$version" -p1 --forward --quiet --no-backup-if-mismatch <"$patch"; then
            echo "patch-crates: $patch does not apply to $crate $version" >&2
            exit 1
        fi
    done
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
case "$mode" in
    check | update)
        status=0
        for entry in "${crates[@]}"; do
            read -r crate version sum <<<"$entry"
            derive "$crate" "$version" "$sum" "$work"
            if [ "$mode" = update ]; then
                rm -rf "${tree:?}/$crate-$version"
                mkdir -p "$tree"
                mv "$work/$crate-$version" "$tree/$crate-$version"
                echo "patch-crates: $tree/$crate-$version is $crate $version with its patches"
            elif ! diff -r -q "$work/$crate-$version" "$tree/$crate-$version" >&2; then
                echo "patch-crates: $tree/$crate-$version is not $crate $version with its patches: \
run \`scripts/patch-crates.sh diff $crate-$version\` to see how, \`update\` to rewrite it" >&2
                status=1
            fi
        done
        [ "$mode" = update ] || [ "$status" != 0 ] || echo "patch-crates: $tree matches crates.io and patches/"
        exit "$status"
        ;;
    diff)
        name=${2:?usage: scripts/patch-crates.sh diff CRATE-VERSION}
        for entry in "${crates[@]}"; do
            read -r crate version sum <<<"$entry"
            [ "$crate-$version" = "$name" ] || continue
            derive "$crate" "$version" "$sum" "$work"
            (cd "$work" && mv "$crate-$version" a && cp -r "$OLDPWD/$tree/$crate-$version" b \
                && diff -ruN a b) || true
            exit 0
        done
        echo "patch-crates: no crate $name in this script's list" >&2
        exit 1
        ;;
    *)
        echo "usage: scripts/patch-crates.sh check | update | diff CRATE-VERSION" >&2
        exit 2
        ;;
esac
