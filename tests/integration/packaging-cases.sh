#!/usr/bin/env bash
# tests/integration/packaging-cases.sh CASE BUILD WORKDIR — shell halves of test-packaging.c.
#
#   deb    make the packages (packaging/mkdeb.sh on BUILD's binaries), install them into a clean
#          root with dpkg --root, check placement, users, Depends, `-n` on the installed example
#          configs, an upgrade that keeps an edited conffile, and a purge that leaves only data.
#   units  systemd-analyze verify (clean output) and security exposure at or below a committed
#          ceiling, on the units installed in a root where their binaries exist.
# Prints what it checks; exits 0 when every check passed, 1 at the first failure.
# Needs root, dpkg, and for `units` systemd-analyze (the systemd package).
set -euo pipefail
exec 2>&1   # test_run_capture keeps stdout only: show dpkg and systemd-analyze messages too
CASE=${1:?case} BUILD=${2:?build dir} WORK=${3:?work dir}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok: $*"; }

# Exposure ceilings we commit to (systemd 252 `security --offline`). Raise only with a reason.
MAX_CONTROLD=1.5          # measured 1.4
MAX_CONTROLD_DOCKER=2.0   # with the docker-driver drop-in (docker group): measured 1.6; CAP_SETGID (held at start only, for the network-facing process to leave the docker group its docker child keeps; test-controld-privsep checks it then holds none): 2.0
MAX_NODEAGENT=2.2         # CAP_NET_ADMIN, AF_NETLINK, docker group, capset for privsep: measured 2.0; CAP_SETGID (held at start only, to drop the docker group from all but the docker process): 2.2

# new_root DIR: an empty root whose dpkg database knows the host's installed packages (so
# Depends are checked against a real Debian system) but holds none of their files.
new_root() {
        local r=$1
        mkdir -p "$r/var/lib/dpkg/info" "$r/var/lib/dpkg/updates" "$r/etc"
        cp /var/lib/dpkg/status "$r/var/lib/dpkg/status"
        touch "$r/var/lib/dpkg/available"
        dpkg-query -W -f='${binary:Package}\n' | while read -r p; do : >"$r/var/lib/dpkg/info/$p.list"; done
}

DPKG=(dpkg --force-script-chrootless --log=/dev/null --force-confdef --force-confold)

build_debs() {   # build_debs OUTDIR [VERSION]
        PADDOCK_DEB_VERSION=${2:-} "$ROOT/packaging/mkdeb.sh" "$BUILD" "$1" >/dev/null
        ls "$1"/paddock-controld_*.deb "$1"/paddock-nodeagent_*.deb >/dev/null || fail "no .deb in $1"
}

case_deb() {
        local R=$WORK/root D1=$WORK/v1 D2=$WORK/v2
        build_debs "$D1" 0.1.0~test1
        build_debs "$D2" 0.1.0~test2
        ok "built $(find "$D1" -name '*.deb' -printf '%f ')"
        new_root "$R"
        (cd "$R" && find . | LC_ALL=C sort) >"$WORK/before"
        "${DPKG[@]}" --root="$R" -i "$D1"/*.deb || fail "dpkg -i into a clean root failed (Depends unmet on Debian 12?)"
        ok "installed into $R without --force-depends"

        # Placement and modes.
        local f
        for f in usr/bin/controld:755 usr/bin/nodeagent:755 usr/lib/paddock/paddock-init:755 usr/lib/paddock/paddock-runsc-netns:755 \
                 lib/systemd/system/paddock-controld.service:644 lib/systemd/system/paddock-nodeagent.service:644 \
                 usr/lib/sysusers.d/paddock-controld.conf:644 usr/lib/sysusers.d/paddock-nodeagent.conf:644 \
                 usr/lib/tmpfiles.d/paddock-controld.conf:644 \
                 usr/share/doc/paddock-controld/OPERATIONS.md:644 usr/share/doc/paddock-nodeagent/copyright:644 \
                 usr/share/paddock/systemd/controld-docker-driver.conf:644 \
                 usr/share/paddock/systemd/nodeagent-relay.conf:644 \
                 usr/share/paddock/cni/sandbox-no-egress.conflist:644 usr/share/paddock/cni/sandbox-restricted.conflist:644 \
                 usr/share/paddock/cni/sandbox-open.conflist:644 usr/share/paddock/nomad/client-sandbox.hcl:644 \
                 usr/share/paddock/nomad/namespace-sandboxes.hcl:644 usr/share/paddock/nomad/node-pool-sandbox.hcl:644 \
                 usr/share/paddock/images/start-dockerd:755 usr/share/paddock/images/start-e2b:755 \
                 usr/share/paddock/images/e2b-sudo:755; do
                local p=${f%:*} m=${f#*:}
                [[ -f $R/$p ]] || fail "/$p not installed"
                [[ $(stat -c %a "$R/$p") == "$m" ]] || fail "/$p has mode $(stat -c %a "$R/$p"), want $m"
                [[ $(stat -c %u:%g "$R/$p") == 0:0 ]] || fail "/$p not owned by root"
        done
        ok "files in place, root-owned, modes right"
        grep -qx 'ExecStart=/usr/bin/controld -f /etc/paddock/controld.conf' "$R/lib/systemd/system/paddock-controld.service" ||
                fail "controld unit does not start /usr/bin/controld"
        grep -qx /etc/paddock/controld.conf "$R/var/lib/dpkg/info/paddock-controld.conffiles" || fail "controld.conf is not a conffile"
        grep -qx /etc/paddock/nodeagent.conf "$R/var/lib/dpkg/info/paddock-nodeagent.conffiles" || fail "nodeagent.conf is not a conffile"
        ok "example configs registered as conffiles"

        # Users and the state directory.
        local uid agent_uid
        uid=$(awk -F: '$1 == "paddock" { print $3 }' "$R/etc/passwd")
        agent_uid=$(awk -F: '$1 == "paddock-agent" { print $3 }' "$R/etc/passwd")
        [[ -n $uid && $uid -gt 0 && $uid -lt 1000 ]] || fail "no system user paddock in the root's /etc/passwd"
        [[ -n $agent_uid && $agent_uid -gt 0 && $agent_uid -lt 1000 && $agent_uid != "$uid" ]] || fail "no separate system user paddock-agent"
        grep -q '^paddock:.*:/usr/sbin/nologin$' "$R/etc/passwd" || fail "paddock can log in"
        [[ $(stat -c '%a %u' "$R/var/lib/paddock") == "750 $uid" ]] || fail "/var/lib/paddock is $(stat -c '%a %u' "$R/var/lib/paddock"), want 750 $uid"
        ok "users paddock ($uid) and paddock-agent ($agent_uid); /var/lib/paddock 0750 paddock"
        # Configs may hold secrets (AMQP password): root and the daemon's group only.
        local gid agent_gid
        gid=$(awk -F: '$1 == "paddock" { print $3 }' "$R/etc/group")
        agent_gid=$(awk -F: '$1 == "paddock-agent" { print $3 }' "$R/etc/group")
        [[ $(stat -c '%a %u %g' "$R/etc/paddock/controld.conf") == "640 0 $gid" ]] ||
                fail "/etc/paddock/controld.conf is $(stat -c '%a %u %g' "$R/etc/paddock/controld.conf"), want 640 0 $gid"
        [[ $(stat -c '%a %u %g' "$R/etc/paddock/nodeagent.conf") == "640 0 $agent_gid" ]] ||
                fail "/etc/paddock/nodeagent.conf is $(stat -c '%a %u %g' "$R/etc/paddock/nodeagent.conf"), want 640 0 $agent_gid"
        ok "configs 0640 root:<daemon group>"

        # Nothing enabled or started by surprise.
        if find "$R/etc/systemd" -name 'paddock-*' 2>/dev/null | grep -q .; then fail "a unit got enabled on install"; fi
        ok "no unit enabled"

        # The installed binaries accept the installed example configs.
        local out
        out=$("$R/usr/bin/controld" -n -f "$R/etc/paddock/controld.conf" 2>&1) || fail "controld -n: $out"
        [[ $out == "configuration OK" ]] || fail "controld -n said: $out"
        out=$("$R/usr/bin/nodeagent" -n -f "$R/etc/paddock/nodeagent.conf" 2>&1) || fail "nodeagent -n: $out"
        [[ $out == "configuration OK" ]] || fail "nodeagent -n said: $out"
        ok "controld -n and nodeagent -n: configuration OK"

        # Every shared library the binaries link (DT_NEEDED) belongs to a package in their Depends.
        local b pkgdeps lib owner needed checked
        for b in controld nodeagent; do
                pkgdeps=$(dpkg-deb -f "$D1"/paddock-${b}_*.deb Depends)
                needed=$(readelf -d "$R/usr/bin/$b" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')
                [[ -n $needed ]] || fail "readelf found no DT_NEEDED in $b"
                checked=0
                while read -r lib; do
                        owner=$(dpkg -S "$lib" 2>/dev/null | head -n1 | cut -d: -f1) ||
                                owner=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -n1 | cut -d: -f1) || true
                        [[ -n $owner ]] || fail "$b loads $lib, which no package owns"
                        [[ $owner == libc6 || ", $pkgdeps" == *", $owner "* || ", $pkgdeps," == *", $owner,"* || $pkgdeps == *"$owner" ]] ||
                                fail "$b loads $lib from $owner, which is not in Depends: $pkgdeps"
                        checked=$((checked + 1))
                done < <(ldd "$R/usr/bin/$b" | awk -v n=" $(tr '\n' ' ' <<<"$needed")" '$2 == "=>" && $3 ~ /^\// && index(n, " " $1 " ") { print $3 }')
                [[ $checked == $(echo "$needed" | wc -l) ]] || fail "$b: checked $checked of the libraries it links: $needed"
        done
        ok "Depends cover every linked library"

        # Upgrade: the operator's edit of a conffile survives; the daemon is not enabled.
        echo "# edited by the operator" >>"$R/etc/paddock/controld.conf"
        "${DPKG[@]}" --root="$R" -i "$D2"/*.deb </dev/null || fail "upgrade to the next version failed"
        [[ $(dpkg-query --admindir="$R/var/lib/dpkg" -W -f='${Version}' paddock-controld) == 0.1.0~test2 ]] || fail "upgrade did not take"
        tail -n1 "$R/etc/paddock/controld.conf" | grep -q 'edited by the operator' || fail "upgrade lost the operator's controld.conf edit"
        [[ $(stat -c '%a %g' "$R/etc/paddock/controld.conf") == "640 $gid" ]] || fail "upgrade changed controld.conf's mode or group"
        ok "upgrade keeps the edited conffile and its mode"

        # Purge: the store (data) stays for the operator; nothing else of ours does.
        echo data >"$R/var/lib/paddock/controld.db"
        mkdir -p "$R/etc/systemd/system/multi-user.target.wants"
        ln -s /lib/systemd/system/paddock-controld.service "$R/etc/systemd/system/multi-user.target.wants/"
        ln -s /lib/systemd/system/paddock-nodeagent.service "$R/etc/systemd/system/multi-user.target.wants/"
        "${DPKG[@]}" --root="$R" --purge paddock-controld paddock-nodeagent || fail "purge failed"
        [[ -f $R/var/lib/paddock/controld.db ]] || fail "purge deleted the store"
        (cd "$R" && find . | LC_ALL=C sort) >"$WORK/after"
        local left
        left=$(comm -13 "$WORK/before" "$WORK/after" |
                grep -vxE '\./etc/(passwd|group|shadow|gshadow)-?|\./etc/\.pwd\.lock|\./var/lib/dpkg(/.*)?|\./var/lib/paddock(/controld\.db)?|\./etc/systemd(/system(/multi-user\.target\.wants)?)?|\./(var|var/lib)' || true)
        [[ -z $left ]] || fail "purge left files of ours: $left"
        [[ -z $(ls -A "$R/etc/systemd/system/multi-user.target.wants") ]] || fail "purge left enable links"
        [[ ! -e $R/etc/paddock ]] || fail "purge left /etc/paddock"
        ok "purge leaves only /var/lib/paddock/controld.db (data) and the users"
}

exposure() {   # exposure ROOT UNIT -> the overall exposure number
        systemd-analyze security --offline=true --root="$1" "$2" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p'
}

case_units() {
        command -v systemd-analyze >/dev/null || { apt-get install -y --no-install-recommends systemd >/dev/null 2>&1 || true; }
        command -v systemd-analyze >/dev/null || fail "systemd-analyze is missing (apt-get install systemd)"
        local R=$WORK/root D=$WORK/debs out
        build_debs "$D"
        new_root "$R"
        "${DPKG[@]}" --root="$R" -i "$D"/*.deb >/dev/null || fail "dpkg -i failed"
        # The targets the units hang off, as on any systemd host.
        cp -a /lib/systemd/system/*.target "$R/lib/systemd/system/"
        out=$(cd "$R" && systemd-analyze verify --root="$R" lib/systemd/system/paddock-controld.service \
                lib/systemd/system/paddock-nodeagent.service 2>&1) || fail "systemd-analyze verify: $out"
        [[ -z $out ]] || fail "systemd-analyze verify complained: $out"
        ok "systemd-analyze verify: clean"

        # The promised settings, line for line (verify checks syntax, not intent).
        local u line common=(Type=notify Restart=on-failure NoNewPrivileges=yes ProtectSystem=strict PrivateTmp=yes
                ProtectHome=yes ProtectKernelTunables=yes ProtectKernelModules=yes ProtectKernelLogs=yes
                SystemCallFilter=@system-service)
        u=$R/lib/systemd/system/paddock-controld.service
        for line in "${common[@]}" User=paddock CapabilityBoundingSet= AmbientCapabilities= \
                ReadWritePaths=/var/lib/paddock "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6" MemoryMax=2G \
                WatchdogSec=30s; do
                grep -qxF "$line" "$u" || fail "paddock-controld.service lacks $line"
        done
        ! grep -qE '^SupplementaryGroups=' "$u" || fail "controld unit has the docker group"
        [[ $(grep -c '^ReadWritePaths=' "$u") == 1 ]] || fail "controld: more than the one ReadWritePaths="
        u=$R/lib/systemd/system/paddock-nodeagent.service
        for line in "${common[@]}" User=paddock-agent SupplementaryGroups=docker "CapabilityBoundingSet=CAP_NET_ADMIN CAP_SETGID" \
                "AmbientCapabilities=CAP_NET_ADMIN CAP_SETGID" "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK" \
                WatchdogSec=30s MemoryMax=512M; do
                grep -qxF "$line" "$u" || fail "paddock-nodeagent.service lacks $line"
        done
        ! grep -q '^ReadWritePaths=' "$u" || fail "nodeagent writes nowhere, yet has ReadWritePaths="
        ok "units carry the promised hardening (users, capabilities, families, memory, watchdog)"

        local c n cd
        c=$(exposure "$R" paddock-controld.service)
        n=$(exposure "$R" paddock-nodeagent.service)
        mkdir -p "$R/etc/systemd/system/paddock-controld.service.d"
        cp "$R/usr/share/paddock/systemd/controld-docker-driver.conf" "$R/etc/systemd/system/paddock-controld.service.d/docker-driver.conf"
        out=$(cd "$R" && systemd-analyze verify --root="$R" lib/systemd/system/paddock-controld.service 2>&1) ||
                fail "systemd-analyze verify with the docker drop-in: $out"
        [[ -z $out ]] || fail "systemd-analyze verify with the docker drop-in complained: $out"
        mkdir -p "$R/etc/systemd/system/paddock-nodeagent.service.d"
        cp "$R/usr/share/paddock/systemd/nodeagent-relay.conf" "$R/etc/systemd/system/paddock-nodeagent.service.d/relay.conf"
        out=$(cd "$R" && systemd-analyze verify --root="$R" lib/systemd/system/paddock-nodeagent.service 2>&1) ||
                fail "systemd-analyze verify with the relay drop-in: $out"
        [[ -z $out ]] || fail "systemd-analyze verify with the relay drop-in complained: $out"
        grep -qxF "AmbientCapabilities=CAP_NET_ADMIN CAP_SETGID CAP_DAC_OVERRIDE" "$R/etc/systemd/system/paddock-nodeagent.service.d/relay.conf" ||
                fail "the relay drop-in does not keep CAP_DAC_OVERRIDE"
        cd=$(exposure "$R" paddock-controld.service)
        echo "exposure: paddock-controld $c (max $MAX_CONTROLD), with docker-driver drop-in $cd (max $MAX_CONTROLD_DOCKER), paddock-nodeagent $n (max $MAX_NODEAGENT)"
        [[ -n $c && -n $n && -n $cd ]] || fail "no exposure score from systemd-analyze security"
        awk -v v="$c" -v m="$MAX_CONTROLD" 'BEGIN { exit !(v <= m) }' || fail "paddock-controld exposure $c > $MAX_CONTROLD"
        awk -v v="$cd" -v m="$MAX_CONTROLD_DOCKER" 'BEGIN { exit !(v <= m) }' || fail "paddock-controld+docker exposure $cd > $MAX_CONTROLD_DOCKER"
        awk -v v="$n" -v m="$MAX_NODEAGENT" 'BEGIN { exit !(v <= m) }' || fail "paddock-nodeagent exposure $n > $MAX_NODEAGENT"
        ok "exposure within the committed ceilings"
}

case $CASE in
deb) case_deb ;;
units) case_units ;;
*) fail "unknown case $CASE" ;;
esac
