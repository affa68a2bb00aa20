#!/usr/bin/env bash
# tests/env/images.sh — build the local sandbox template images, with no image pulls.
#
#   paddock/debian-12    debootstrap --variant=minbase bookworm (coreutils, tar, sh, ...)
#   paddock/python-3.11  the same + python3
#   paddock/node-18      the same + nodejs
#   paddock/busybox      /bin/busybox from busybox-static (instant; for quick tests)
#
# Each is tagged paddock/<name>:<recipe hash> and paddock/<name>:local. The recipe hash covers
# this file (package lists included), so a second run finds the tags and does nothing.
# debootstrap runs once per machine: its result is cached as a tarball under
# ${PADDOCK_STATE:-/var/tmp/paddock-dev}/images, with apt lists and downloaded .debs.
# Packages come from the Debian mirror apt already uses (override: PADDOCK_DEBIAN_MIRROR).
# Needs a running dockerd (tests/env/services.sh start docker).
set -euo pipefail
PROG=images
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/env/lib.sh
. "$HERE/lib.sh"

SUITE=bookworm
BASE_INCLUDE=""                          # minbase already has coreutils, tar, dash, bash
declare -A EXTRA=([python-3.11]=python3 [node-18]=nodejs)
declare -A CHECK=([debian-12]='sh -c "timeout 5 true && tar --version >/dev/null && echo aGk= | base64 -d && echo"'
                  [python-3.11]='python3 --version'
                  [node-18]='node --version')
NAMES=(debian-12 python-3.11 node-18)

CACHE=$PADDOCK_STATE/images
HASH=$(sha256sum "$HERE/images.sh" | cut -c1-12)
BASEHASH=$(printf '%s\n' "$SUITE" minbase "$BASE_INCLUDE" v1 | sha256sum | cut -c1-12)

[[ $(id -u) == 0 ]] || die "must run as root (debootstrap, chroot)"
docker_ping || die "dockerd is not answering on $DOCKER_SOCK (run: tests/env/services.sh start docker)"

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

busybox_image

missing=()
for n in "${NAMES[@]}"; do
        if have_image "paddock/$n:$HASH"; then
                docker tag "paddock/$n:$HASH" "paddock/$n:local"
        else
                missing+=("$n")
        fi
done
if ((${#missing[@]} == 0)); then
        say "images up to date (recipe $HASH): ${NAMES[*]} busybox"
        exit 0
fi

mirror() {
        if [[ -n ${PADDOCK_DEBIAN_MIRROR:-} ]]; then echo "$PADDOCK_DEBIAN_MIRROR"; return; fi
        local f u
        # deb822 .sources files: "URIs: ..." in a stanza whose Suites has bookworm.
        for f in /etc/apt/sources.list.d/*.sources; do
                [[ -r $f ]] || continue
                u=$(awk -v s="$SUITE" '
                        /^[[:space:]]*$/ { if (uri != "" && suite) { print uri; exit } uri = ""; suite = 0; next }
                        /^URIs:/   { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) uri = $i }
                        /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) suite = 1 }
                        END { if (uri != "" && suite) print uri }' "$f" | head -n1)
                [[ -z $u ]] || { echo "${u%/}"; return; }
        done
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
                [[ -r $f ]] || continue
                u=$(awk -v s="$SUITE" '$1 == "deb" {
                        i = 2; if ($i ~ /^\[/) while ($i !~ /\]$/) i++; if ($i ~ /\]$/ && $2 ~ /^\[/) i++
                        if ($i ~ /\/debian\/?$/ && $(i+1) == s) { print $i; exit } }' "$f")
                [[ -z $u ]] || { echo "${u%/}"; return; }
        done
        echo http://deb.debian.org/debian
}
MIRROR=$(mirror)

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
build_one() {
        local n=$1 d=$WORK/$1 t0=$SECONDS
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
        tar -C "$d" -c . | docker import -c 'CMD ["/bin/bash"]' \
                -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
                - "paddock/$n:$HASH" >/dev/null || { warn "docker import paddock/$n failed"; return 1; }
        rm -rf --one-file-system "$d"
        docker tag "paddock/$n:$HASH" "paddock/$n:local"
        # Verify once, under gVisor.
        local out
        if ! out=$(eval "timeout -s KILL 120 docker run --rm --runtime=runsc paddock/$n:$HASH ${CHECK[$n]}" 2>&1); then
                docker rmi "paddock/$n:$HASH" >/dev/null 2>&1 || true
                warn "paddock/$n does not run under runsc: $out"
                return 1
        fi
        say "built paddock/$n:$HASH (+ :local) in $((SECONDS - t0))s: $(echo "$out" | tr '\n' ' ')"
}

# Build the missing ones in parallel (mostly download- and dpkg-bound).
t0=$SECONDS
pids=()
for n in "${missing[@]}"; do
        build_one "$n" &
        pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
((rc == 0)) || die "building images failed"
# Drop tags of earlier recipes (an image still used by a container stays).
for n in "${NAMES[@]}"; do
        docker image ls --format '{{.Repository}}:{{.Tag}}' "paddock/$n" \
                | grep -E ":[0-9a-f]{12}\$" | grep -v ":$HASH\$" \
                | xargs -r docker rmi >/dev/null 2>&1 || true
done
say "images ready (recipe $HASH) in $((SECONDS - t0))s"
