#!/usr/bin/env bash
# packaging/mkdeb.sh BUILD OUTDIR — builds paddock-controld_<v>_<arch>.deb and
# paddock-nodeagent_<v>_<arch>.deb from the binaries in BUILD (what `make deb` runs).
#
# No debhelper: each package is a staged tree packed with dpkg-deb (root:root owners without
# fakeroot). Depends come from dpkg-shlibdeps on the staged binary (a fixed list for Debian 12
# when dpkg-dev is absent). Version: packaging/VERSION, plus +git<commits>.g<hash> in a git
# checkout so that every commit sorts after the one before it; PADDOCK_DEB_VERSION overrides.
# Prints the path of each .deb built.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${1:?usage: mkdeb.sh BUILD OUTDIR}
OUT=${2:?usage: mkdeb.sh BUILD OUTDIR}

die() { echo "mkdeb: $*" >&2; exit 1; }
for b in controld nodeagent paddock-init paddock-runsc-netns; do
        [[ -x $BUILD/$b ]] || die "$BUILD/$b is missing: run make first"
done
command -v dpkg-deb >/dev/null || die "dpkg-deb is missing (apt-get install dpkg)"

VERSION=${PADDOCK_DEB_VERSION:-}
if [[ -z $VERSION ]]; then
        VERSION=$(tr -d ' \n' <"$HERE/VERSION")
        if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
                VERSION+="+git$(git -C "$ROOT" rev-list --count HEAD).g$(git -C "$ROOT" rev-parse --short=10 HEAD)"
        fi
fi
ARCH=$(dpkg --print-architecture)
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/paddock-deb.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$OUT"

# Debian 12 packages of the libraries in the Makefile's PKGS, used without dpkg-shlibdeps.
declare -A FALLBACK=(
        [controld]="libc6 (>= 2.34), libcjson1 (>= 1.7.13), libcurl4 (>= 7.16.2), libmicrohttpd12 (>= 0.9.61), libsqlite3-0 (>= 3.7.15), libssl3 (>= 3.0.0), libsystemd0, zlib1g (>= 1:1.2.0)"
        [nodeagent]="libc6 (>= 2.34), libcjson1 (>= 1.7.13), libmicrohttpd12 (>= 0.9.61), libmnl0 (>= 1.0.3-4~), libnftnl11 (>= 1.1.3), librabbitmq4 (>= 0.6.0), libssl3 (>= 3.0.0), libsystemd0"
)

# shlibdeps DIR PKG BIN -> the Depends of the binary DIR/usr/bin/BIN
shlibdeps() {
        local dir=$1 pkg=$2 bin=$3 deps=""
        if command -v dpkg-shlibdeps >/dev/null; then
                mkdir -p "$dir/debian"
                printf 'Source: paddock\n\nPackage: %s\nArchitecture: any\n' "$pkg" >"$dir/debian/control"
                deps=$(cd "$dir" && dpkg-shlibdeps -O -e "usr/bin/$bin" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
                rm -rf "$dir/debian"
        fi
        echo "${deps:-${FALLBACK[$bin]}}"
}

# subst FILE: fills the maintainer-script placeholders from the variables of build_pkg.
subst() {
        sed -e "s#@PKG@#$pkg#g" -e "s#@UNIT@#$unit#g" -e "s#@USER@#$user#g" -e "s#@HOME@#$home#g" \
            -e "s#@SYSUSERS@#$pkg.conf#g" -e "s#@BIN@#$bin#g" -e "s#@TMPFILES@#$tmpfiles#g" -e "s#@STATEDIR@#$statedir#g" "$1"
}

# build_pkg BIN: stages and packs paddock-BIN.
build_pkg() {
        local bin=$1 pkg=paddock-$1 unit=paddock-$1.service user home statedir tmpfiles extra_ctl
        local d=$STAGE/$pkg
        case $bin in
        controld)
                user=paddock home=/var/lib/paddock statedir=/var/lib/paddock tmpfiles=$pkg.conf
                extra_ctl=$'Suggests: docker.io, paddock-nodeagent\n'
                ;;
        nodeagent)
                user=paddock-agent home=/ statedir="" tmpfiles=""
                extra_ctl=$'Recommends: docker.io, runsc\n'
                ;;
        esac
        install -d "$d/DEBIAN" "$d/usr/bin" "$d/lib/systemd/system" "$d/usr/lib/sysusers.d" "$d/etc/paddock" \
                "$d/usr/share/doc/$pkg" "$d/usr/share/paddock"
        install -m 0755 "$BUILD/$bin" "$d/usr/bin/$bin"
        strip --strip-unneeded --remove-section=.comment --remove-section=.note "$d/usr/bin/$bin" 2>/dev/null || true
        install -m 0644 "$HERE/$unit" "$d/lib/systemd/system/$unit"
        install -m 0644 "$HERE/sysusers-$bin.conf" "$d/usr/lib/sysusers.d/$pkg.conf"
        if [[ -n $tmpfiles ]]; then
                install -d "$d/usr/lib/tmpfiles.d"
                install -m 0644 "$HERE/tmpfiles-$bin.conf" "$d/usr/lib/tmpfiles.d/$pkg.conf"
        fi
        install -m 0644 "$HERE/$bin.conf.example" "$d/etc/paddock/$bin.conf"
        install -m 0644 "$ROOT/LICENSE" "$d/usr/share/doc/$pkg/copyright"
        install -m 0644 "$HERE/OPERATIONS.md" "$d/usr/share/doc/$pkg/OPERATIONS.md"
        case $bin in
        controld)
                install -d "$d/usr/share/paddock/systemd"
                install -m 0644 "$HERE/controld-docker-driver.conf" "$d/usr/share/paddock/systemd/"
                ;;
        nodeagent)
                # Host reference configs: copied into place by the operator (OPERATIONS.md).
                # PID 1 of every sandbox on this node, bound in read-only (static: needs nothing of
                # the image). controld's local Docker driver finds it here too.
                install -d "$d/usr/lib/paddock" "$d/usr/share/paddock/systemd"
                install -m 0755 "$BUILD/paddock-init" "$d/usr/lib/paddock/paddock-init"
                install -m 0644 "$HERE/nodeagent-relay.conf" "$d/usr/share/paddock/systemd/"
                strip --strip-unneeded --remove-section=.comment --remove-section=.note "$d/usr/lib/paddock/paddock-init" 2>/dev/null || true
                # runsc-net's runtime path in daemon.json: runsc's own network stack where this
                # runsc's root-namespace check refuses it (nodeagent/runsc-netns/)
                install -m 0755 "$BUILD/paddock-runsc-netns" "$d/usr/lib/paddock/paddock-runsc-netns"
                install -d "$d/usr/share/paddock/cni" "$d/usr/share/paddock/nomad"
                install -m 0644 "$HERE"/cni/*.conflist "$d/usr/share/paddock/cni/"
                install -m 0644 "$HERE"/nomad/*.hcl "$d/usr/share/paddock/nomad/"
                # The docker and e2b-base templates' start commands and e2b-base's sudo, for
                # operators who build those images (tests/env/images.sh shows how).
                for f in start-dockerd start-e2b e2b-sudo; do
                        install -D -m 0755 "$HERE/images/$f" "$d/usr/share/paddock/images/$f"
                done
                if [[ -f $HERE/daemon.json ]]; then
                        install -d "$d/usr/share/paddock/docker"
                        install -m 0644 "$HERE/daemon.json" "$d/usr/share/paddock/docker/"
                fi
                ;;
        esac
        for s in postinst prerm postrm; do
                subst "$HERE/deb/$s" >"$d/DEBIAN/$s"
                chmod 0755 "$d/DEBIAN/$s"
        done
        echo "/etc/paddock/$bin.conf" >"$d/DEBIAN/conffiles"
        local deps size
        deps=$(shlibdeps "$d" "$pkg" "$bin")
        size=$(du -sk --exclude=DEBIAN "$d" | cut -f1)
        cat >"$d/DEBIAN/control" <<CTL
Package: $pkg
Version: $VERSION
Architecture: $ARCH
Maintainer: The Paddock authors <paddock@localhost>
Section: net
Priority: optional
Installed-Size: $size
Depends: $deps, systemd-sysusers | adduser
${extra_ctl}Description: Paddock sandbox platform: $(sed -n 's/^Description=//p' "$HERE/$unit")
 Paddock runs short-lived, isolated sandboxes (gVisor containers) behind a REST API.
 This package installs the $bin daemon, its systemd unit (neither enabled nor started),
 its system user and an example configuration in /etc/paddock. See
 /usr/share/doc/$pkg/OPERATIONS.md.
CTL
        (cd "$d" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
                xargs -0 md5sum >DEBIAN/md5sums)
        dpkg-deb --root-owner-group -Zxz --build "$d" "$OUT/${pkg}_${VERSION}_${ARCH}.deb" >/dev/null
        echo "$OUT/${pkg}_${VERSION}_${ARCH}.deb"
}

build_pkg controld
build_pkg nodeagent
