#!/usr/bin/env bash
# tests/env/services.sh — install, start, stop the real services the tests and `make up` use.
#
#   services.sh install                              apt-get what is missing (instant if nothing is)
#   services.sh start  [--record FILE] [SERVICE...]  start what is not already answering
#   services.sh stop   [--started-by FILE] [SERVICE...]
#   services.sh status [SERVICE...]
#
# SERVICE: docker registry rabbitmq journald (none = all). Loopback only.
# State: ${PADDOCK_STATE:-/var/tmp/paddock-dev} holds configs, logs/ and run/<svc>.pid
# ("PID STARTTIME"; a service is "ours" only while that exact process lives).
#
# start: a service that already answers (someone else's, or ours from an earlier start) is
#   reused and NOT recorded. Each service THIS invocation started is appended to FILE
#   (--record; the file is created even if nothing was started) and printed as
#   "services: started: ...".
# stop --started-by FILE: stop only the services listed in FILE (and named, if any were named),
#   then remove them from FILE (FILE is deleted when empty). Without --started-by: stop every
#   named service that is ours. Foreign services are never touched.
set -euo pipefail
PROG=services
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/env/lib.sh
. "$HERE/lib.sh"

ALL_SERVICES=(docker registry rabbitmq journald)
STATE=$PADDOCK_STATE
RUN=$STATE/run
LOGS=$STATE/logs

PACKAGES=(docker.io runsc docker-registry rabbitmq-server amqp-tools nftables iproute2
          busybox-static debootstrap xfsprogs btrfs-progs libmicrohttpd-dev libcurl4-openssl-dev libcjson-dev
          librabbitmq-dev libnftnl-dev libmnl-dev libsqlite3-dev libsystemd-dev libssl-dev zlib1g-dev
          pkg-config sqlite3 wrk curl jq ca-certificates python3-yaml chromium fonts-dejavu-core
          ubuntu-archive-keyring)

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

need_root() { [[ $(id -u) == 0 ]] || die "must run as root (starts system daemons)"; }

# ---------------------------------------------------------------------------- install
# gVisor comes from Debian 13: bookworm's runsc (0.0~20221219) rejects the statx calls of
# coreutils 9.1, so `ls` and `stat` fail in every Debian 12 sandbox. trixie is added as a source
# from the mirror apt already uses, pinned so that runsc is the ONLY program taken from it (and
# ubuntu-keyring + ubuntu-archive-keyring, the Ubuntu archive's signing keys as Debian ships them: images.sh
# verifies the ubuntu-24 and python-3.12 bootstraps with them; bookworm has no such package).
RUNSC_MIN=0.0~20240729
TRIXIE_SOURCES=/etc/apt/sources.list.d/paddock-trixie.sources
RUNSC_PIN=/etc/apt/preferences.d/paddock-runsc

runsc_current() {
        local v
        v=$(dpkg-query -W -f='${db:Status-Status} ${Version}' runsc 2>/dev/null) || return 1
        [[ $v == installed\ * ]] || return 1
        dpkg --compare-versions "${v#installed }" ge "$RUNSC_MIN"
}

# write_if_changed FILE < CONTENT: 0 if FILE was (re)written, 1 if it already had CONTENT.
write_if_changed() {
        local f=$1 new
        new=$(cat)
        [[ -f $f && $(cat "$f") == "$new" ]] && return 1
        printf '%s\n' "$new" >"$f.tmp" && mv "$f.tmp" "$f"
}

runsc_pin() {
        local mirror
        mirror=$(debian_mirror bookworm)
        write_if_changed "$TRIXIE_SOURCES" <<EOF || true
# Written by paddock tests/env/services.sh: Debian 13 for the runsc package ONLY
# (pinned in $RUNSC_PIN; every other trixie package has priority -10: never installed).
Types: deb
URIs: $mirror
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
        write_if_changed "$RUNSC_PIN" <<'EOF' || true
# Written by paddock tests/env/services.sh: nothing from trixie but runsc (and Ubuntu's
# archive keys, for images.sh).
Package: *
Pin: release n=trixie
Pin-Priority: -10

Package: runsc ubuntu-archive-keyring ubuntu-keyring
Pin: release n=trixie
Pin-Priority: 990
EOF
}

do_install() {
        local missing=() p have
        have=" $(dpkg-query -W -f='${Package}=${db:Status-Status} ' "${PACKAGES[@]}" 2>/dev/null || true)"
        for p in "${PACKAGES[@]}"; do
                [[ $p == runsc ]] && continue
                [[ $have == *" $p=installed "* ]] || missing+=("$p")
        done
        runsc_current || missing+=(runsc)
        if ((${#missing[@]} == 0)); then
                return 0
        fi
        need_root
        say "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        runsc_pin
        apt-get update -qq || die "apt-get update failed"
        apt-get install -y -qq --no-install-recommends "${missing[@]}" \
                || die "apt-get install failed: ${missing[*]}"
        runsc_current || die "runsc >= $RUNSC_MIN from trixie is not installed (have: $(dpkg-query -W -f='${Version}' runsc 2>/dev/null)); see $RUNSC_PIN"
        say "gVisor: $(runsc --version 2>/dev/null | head -n1)"
}

# ---------------------------------------------------------------------------- probes
tcp_open() { timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

answering() {
        case $1 in
        docker)   docker_ping ;;
        registry) curl -sf --max-time 2 -o /dev/null http://127.0.0.1:5000/v2/ ;;
        rabbitmq) tcp_open 127.0.0.1 5672 ;;
        journald) [[ -S /run/systemd/journal/socket ]] &&
                  ss -Hxa src /run/systemd/journal/socket 2>/dev/null | grep -q . ;;
        esac
}

ours() { pidfile_alive "$RUN/$1.pid" >/dev/null; }

rabbit_env() {
        export RABBITMQ_NODENAME=rabbit@localhost RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
        export RABBITMQ_NODE_PORT=5672 ERL_EPMD_ADDRESS=127.0.0.1 RABBITMQ_DIST_PORT=25672
        export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
        export RABBITMQ_CONFIG_FILE=$STATE/rabbitmq.conf
        export RABBITMQ_MNESIA_BASE=$STATE/rabbitmq/mnesia
}

# spawn SVC CMD...: start CMD detached in its own session (so it is a process-group leader
# we can signal as a whole), output to logs/SVC.log, PID recorded.
# Every inherited descriptor above 2 is closed first: a daemon must not keep the caller's
# files open (e.g. the fd of `flock /work/stack.lock services.sh start`, which would hold the
# test lock for as long as the daemon runs).
spawn() {
        local svc=$1; shift
        : >"$LOGS/$svc.log"
        (
                for fd in /proc/self/fd/*; do
                        fd=${fd##*/}
                        ((fd > 2)) && eval "exec $fd>&-" 2>/dev/null
                done
                exec setsid "$@"
        ) </dev/null >>"$LOGS/$svc.log" 2>&1 &
        local pid=$!
        pidfile_write "$RUN/$svc.pid" "$pid"
}

start_failed() {
        local svc=$1 why=$2
        warn "$svc: $why"
        show_log "$LOGS/$svc.log"
        stop_one "$svc" >/dev/null 2>&1 || true
        exit 1
}

# wait_ready SVC SECONDS: wait until SVC answers; fail early if our process died.
wait_ready() {
        local svc=$1 limit=$2 deadline=$((SECONDS + $2))
        while ! answering "$svc"; do
                ours "$svc" || start_failed "$svc" "exited during startup"
                ((SECONDS < deadline)) || start_failed "$svc" "not ready after ${limit}s"
                sleep 0.1
        done
}

# ---------------------------------------------------------------------------- start
# The gVisor runtimes every sandbox uses. Flags (see packaging/daemon.json for production):
#   --overlay2=none  the sandbox's root writes land in the container's overlay upper dir, so
#                    `docker commit` (snapshots) captures them; with runsc's default root overlay
#                    they stay in sandbox memory and a snapshot captures nothing.
#   --host-uds=create the in-sandbox agent's Unix socket, made in a directory bound in from the
#                    host, is a host socket controld connects to (the agent transport)
#   --network=...    runsc        none     deny_all sandboxes: no network at all
#                    runsc-net    sandbox  (runsc's own netstack) where it starts, else host
#                                          (detected at each dockerd start, logged, and kept in
#                                          $STATE/runsc-network); controld's default for networked
#                                          sandboxes
#                    runsc-hostnet host    gVisor uses the container's namespace as Docker set it
#                    runsc-netstack sandbox the probe (and for hosts where it works)
#                    runsc-netstack-ns sandbox, through paddock-runsc-netns: the second probe
#                                          (nodeagent/runsc-netns/ says why: this runsc's
#                                          root-namespace check is wrong on kernels 6.x); where
#                                          it works and the plain one does not, runsc-net runs
#                                          through it ("sandbox-netns" in $STATE/runsc-network)
#                    PADDOCK_GVISOR_NETWORK=host forces host networking (no probe).
# Networked sandboxes can be checkpointed (pause with memory, fork; issue 37) only on gVisor's
# own network stack: gVisor cannot save host networking.
RUNSC=/usr/bin/runsc
RUNSC_NETNS=$STATE/paddock-runsc-netns
RUNSC_ARGS='"--overlay2=none", "--host-uds=create"'
# "experimental": true turns on Docker's checkpoint API, which pause with memory (keepMemory,
# E2B's pause() default; issue 37) uses; without it those answer 501.

# Docker's data-root is on btrfs, so disk limits hold (issue 9): the btrfs storage driver
# takes `--storage-opt size=` (specs.disk caps the sandbox's writable layer, a qgroup on its
# subvolume) and controld makes capped volumes as btrfs subvolumes under $DOCKER_VOLUMES
# (controld's [docker] volume_root). btrfs qgroups are btrfs's own accounting: they work on
# kernels without quota support (CONFIG_QUOTA), where XFS pquota and ext4 prjquota are refused.
# The filesystem is a sparse image file ($PADDOCK_DOCKER_FS_SIZE, default 40G) loop-mounted at
# $DOCKER_FS; where btrfs cannot be mounted, dockerd keeps its default data-root (overlay2)
# and disk limits are not enforced (said at start).
DOCKER_IMG=$STATE/docker-btrfs.img
DOCKER_FS=$STATE/docker-btrfs
DOCKER_ROOT=$DOCKER_FS/docker
DOCKER_VOLUMES=$DOCKER_FS/volumes

# docker_fs: mount (making it the first time) the btrfs filesystem for dockerd; 1 if impossible.
docker_fs() {
        if [[ $(stat -f -c %T "$DOCKER_FS" 2>/dev/null) != btrfs ]]; then
                command -v mkfs.btrfs >/dev/null || { warn "mkfs.btrfs missing (btrfs-progs)"; return 1; }
                mkdir -p "$DOCKER_FS"
                if [[ ! -s $DOCKER_IMG ]]; then
                        if ! { truncate -s "${PADDOCK_DOCKER_FS_SIZE:-40G}" "$DOCKER_IMG" &&
                               mkfs.btrfs -q -f "$DOCKER_IMG" >/dev/null 2>&1; }; then
                                warn "could not make btrfs in $DOCKER_IMG"
                                rm -f "$DOCKER_IMG"
                                return 1
                        fi
                fi
                mount -o loop "$DOCKER_IMG" "$DOCKER_FS" || { warn "could not mount $DOCKER_IMG (btrfs)"; return 1; }
        fi
        # Simple quotas where the kernel has them (tests/env/btrfs-quota.c says why).
        local helper=$STATE/btrfs-quota mode
        if [[ ! -x $helper || $helper -ot $PADDOCK_ROOT/tests/env/btrfs-quota.c ]]; then
                cc -O2 -o "$helper" "$PADDOCK_ROOT/tests/env/btrfs-quota.c" || { warn "could not build $helper"; return 1; }
        fi
        mode=$("$helper" "$DOCKER_FS") || { warn "quotas on $DOCKER_FS could not be turned on"; return 1; }
        # A filesystem made before this kept full accounting (the kernel does not switch modes).
        if [[ $mode == simple && $(cat "/sys/fs/btrfs/$(findmnt -no UUID "$DOCKER_FS" | head -n1)/qgroups/mode" 2>/dev/null) == qgroup ]]; then
                warn "$DOCKER_FS keeps full qgroup accounting (slow removals); stop the services and delete $DOCKER_IMG to remake it with simple quotas"
        fi
        mkdir -p "$DOCKER_ROOT" "$DOCKER_VOLUMES"
}

# The storage the config asks for: btrfs when its filesystem is mounted, else Docker's default.
docker_storage() {
        if [[ $(stat -f -c %T "$DOCKER_FS" 2>/dev/null) == btrfs ]]; then
                printf '"data-root": "%s", "storage-driver": "btrfs",\n ' "$DOCKER_ROOT"
        fi
}

# netns_helper: builds paddock-runsc-netns into $STATE (before dockerd starts: its config names
# it); 1 if it cannot be built.
netns_helper() {
        local src=$PADDOCK_ROOT/nodeagent/runsc-netns/runsc-netns.c
        [[ -x $RUNSC_NETNS && ! $RUNSC_NETNS -ot $src ]] && return 0
        cc -O2 -Wall -o "$RUNSC_NETNS.tmp" "$src" && mv "$RUNSC_NETNS.tmp" "$RUNSC_NETNS" ||
                { warn "could not build $RUNSC_NETNS"; return 1; }
}

# docker_config MODE: dockerd's config with runsc-net in MODE (host, sandbox, sandbox-netns).
docker_config() {
        local netmode=$1 netpath=$RUNSC netargs
        if [[ $netmode == sandbox-netns ]]; then
                netmode=sandbox netpath=$RUNSC_NETNS
        fi
        # On its own stack a sandbox's open TCP connections are cut at a checkpoint, not a reason
        # to refuse it (runsc refuses to save a connected endpoint otherwise).
        netargs="\"--network=$netmode\""
        [[ $netmode == sandbox ]] && netargs+=", \"--net-disconnect-ok\""
        local nsprobe=""
        [[ -x $RUNSC_NETNS ]] &&
                nsprobe=",
              \"runsc-netstack-ns\": {\"path\": \"$RUNSC_NETNS\", \"runtimeArgs\": [$RUNSC_ARGS, \"--network=sandbox\"]}"
        cat <<EOF
{$(docker_storage)"bridge": "none",
 "experimental": true,
 "default-address-pools": [{"base": "169.254.80.0/20", "size": 24}],
 "runtimes": {"runsc": {"path": "$RUNSC", "runtimeArgs": [$RUNSC_ARGS, "--network=none"]},
              "runsc-net": {"path": "$netpath", "runtimeArgs": [$RUNSC_ARGS, $netargs]},
              "runsc-hostnet": {"path": "$RUNSC", "runtimeArgs": [$RUNSC_ARGS, "--network=host"]},
              "runsc-netstack": {"path": "$RUNSC", "runtimeArgs": [$RUNSC_ARGS, "--network=sandbox"]}$nsprobe}}
EOF
}

# The network mode detected at the last start (host until a probe says otherwise).
netmode_known() {
        local m
        m=$(head -n1 "$STATE/runsc-network" 2>/dev/null) || m=host
        [[ ${PADDOCK_GVISOR_NETWORK:-} == host ]] && m=host
        [[ $m == sandbox-netns && ! -x $RUNSC_NETNS ]] && m=host
        case $m in sandbox | sandbox-netns) echo "$m" ;; *) echo host ;; esac
}

# probe_netstack: does runsc's own network stack start here? (On some kernels it refuses:
# "cannot run with network enabled in root network namespace", gvisor#10704.) Prints the
# reason when it does not.
probe_netstack() {
        local runtime=${1:-runsc-netstack} net=paddock-netprobe out rc=0
        docker network rm "$net" >/dev/null 2>&1 || true
        docker network create --subnet 169.254.76.0/24 --gateway 169.254.76.1 "$net" >/dev/null 2>&1 \
                || { echo "could not create the probe network"; return 1; }
        out=$(timeout -s KILL 60 docker run --rm --runtime="$runtime" --network "$net" \
                paddock/busybox:local true 2>&1) || rc=$?
        docker network rm "$net" >/dev/null 2>&1 || true
        ((rc == 0)) && return 0
        echo "$out" | tr '\n' ' ' | cut -c1-300
        return 1
}

start_docker() {
        docker_fs || warn "docker: btrfs data-root unavailable; specs.disk and volume sizeGB will NOT be enforced"
        netns_helper || true
        docker_config "$(netmode_known)" >"$STATE/daemon.json"
        # A stale pid file of dockerd's own would make it refuse to start.
        if [[ -e /var/run/docker.pid ]] && ! kill -0 "$(cat /var/run/docker.pid 2>/dev/null || echo 0)" 2>/dev/null; then
                rm -f /var/run/docker.pid
        fi
        spawn docker dockerd --config-file "$STATE/daemon.json"
        wait_ready docker 60
        busybox_image
        local why why2 mode
        if [[ ${PADDOCK_GVISOR_NETWORK:-} == host ]]; then
                mode=host why="PADDOCK_GVISOR_NETWORK=host"
                say "gVisor network: host networking, as PADDOCK_GVISOR_NETWORK says"
        elif why=$(probe_netstack); then
                mode=sandbox
                say "gVisor network: runsc's own stack works here; runsc-net uses --network=sandbox"
        elif [[ -x $RUNSC_NETNS ]] && why2=$(probe_netstack runsc-netstack-ns); then
                mode=sandbox-netns
                say "gVisor network: runsc's own stack starts here through paddock-runsc-netns ($why); runsc-net uses it"
        else
                mode=host
                say "gVisor network: runsc's own stack does not start here ($why${why2:+; through paddock-runsc-netns: $why2}); runsc-net uses --network=host"
        fi
        printf '%s\n%s\n' "$mode" "${why:-}" >"$STATE/runsc-network"
        if [[ $(docker_config "$mode" | jq -cS '.runtimes["runsc-net"]') != "$(jq -cS '.runtimes["runsc-net"]' "$STATE/daemon.json")" ]]; then
                docker_config "$mode" >"$STATE/daemon.json"
                # dockerd reloads its runtimes on SIGHUP.
                kill -HUP "$(pidfile_alive "$RUN/docker.pid")"
                wait_until 10 runtimes_match || start_failed docker "did not reload $STATE/daemon.json"
        fi
}

# storage_match: the answering dockerd stores on btrfs if this host has the btrfs filesystem
# for it mounted (docker_fs); anything goes where it has not.
storage_match() {
        [[ $(stat -f -c %T "$DOCKER_FS" 2>/dev/null) == btrfs ]] || return 0
        [[ $(docker info --format '{{.Driver}}' 2>/dev/null) == btrfs ]]
}

# runtimes_match: the answering dockerd has the runtimes this tree's recipe describes (runsc,
# runsc-net in whichever of its network modes the dockerd's start detected, runsc-hostnet,
# runsc-netstack; the wrapper compared by name, as another state directory's dockerd has its
# own copy), and Docker's experimental features (its checkpoint API) as it says.
RUNTIMES_NORM='with_entries(select(.key | IN("runsc", "runsc-net", "runsc-hostnet", "runsc-netstack")))
        | walk(if type == "string" and endswith("/paddock-runsc-netns") then "paddock-runsc-netns" else . end)'
runtimes_match() {
        local want have mode
        have=$(docker info --format '{{json .Runtimes}}' 2>/dev/null | jq -cS "$RUNTIMES_NORM") || return 1
        mode=$(jq -r '.["runsc-net"] // {} | if .path == "paddock-runsc-netns" then "sandbox-netns"
                elif ((.runtimeArgs // []) | index("--network=sandbox")) then "sandbox" else "host" end' <<<"$have") || return 1
        want=$(docker_config "$mode" | jq -cS ".runtimes | $RUNTIMES_NORM") || return 1
        [[ $want == "$have" ]] || return 1
        [[ $(docker info --format '{{.ExperimentalBuild}}' 2>/dev/null) == "$(docker_config host | jq -r '.experimental // false')" ]]
}

start_registry() {
        mkdir -p "$STATE/registry"
        cat >"$STATE/registry.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $STATE/registry}, delete: {enabled: true}}
http: {addr: 127.0.0.1:5000}
EOF
        spawn registry docker-registry serve "$STATE/registry.yml"
        wait_ready registry 20
}

start_rabbitmq() {
        printf 'listeners.tcp.default = 127.0.0.1:5672\nloopback_users.guest = true\n' \
                >"$STATE/rabbitmq.conf"
        chmod 0644 "$STATE/rabbitmq.conf"
        # Remember whether epmd was already there: only an epmd our node spawned is ours to kill.
        if tcp_open 127.0.0.1 4369 || pgrep -x epmd >/dev/null; then
                : >"$RUN/rabbitmq.epmd-foreign"
        else
                rm -f "$RUN/rabbitmq.epmd-foreign"
        fi
        # The broker's data is the test run's, and starts empty: the tests' unique exchanges leave
        # durable queues behind, and a broker recovers every durable queue at boot with a file
        # handle each; hundreds of them (seen: 935 against 927 handles) hang its start for good.
        rm -rf "$STATE/rabbitmq"
        install -d -o rabbitmq -g rabbitmq -m 0750 "$STATE/rabbitmq"
        rabbit_env
        spawn rabbitmq rabbitmq-server
        wait_ready rabbitmq 90
        local rc=0
        timeout -s KILL 75 rabbitmqctl -q await_startup --timeout 60 >>"$LOGS/rabbitmq.log" 2>&1 || rc=$?
        ((rc == 0)) || start_failed rabbitmq "rabbitmqctl await_startup failed (rc $rc)"
}

start_journald() {
        spawn journald /lib/systemd/systemd-journald
        # The socket file may be stale (left by an earlier journald): wait for a bound one.
        wait_ready journald 20
}

# Verify gVisor works on whatever dockerd answers (ours or not).
verify_runsc() {
        busybox_image
        local out rc=0
        out=$(timeout -s KILL 60 docker run --rm --runtime=runsc paddock/busybox:local true 2>&1) || rc=$?
        if ((rc != 0)); then
                warn "docker run --runtime=runsc failed (rc $rc): $out"
                [[ -f $LOGS/docker.log ]] && show_log "$LOGS/docker.log" 20
                die "gVisor (runsc) does not work with this dockerd; it must be started with --config-file $STATE/daemon.json"
        fi
        runtimes_match || die "dockerd answers but its runsc runtimes are not the ones this tree needs (see $STATE/daemon.json); restart it with --config-file $STATE/daemon.json"
        runsc_current || die "runsc older than $RUNSC_MIN: ls and stat fail in Debian 12 sandboxes (run: tests/env/services.sh install)"
}

do_start() {
        local record="" svcs=()
        while (($#)); do
                case $1 in
                --record) record=${2:?--record needs a file}; shift 2 ;;
                --record=*) record=${1#--record=}; shift ;;
                -*) usage ;;
                *) svcs+=("$1"); shift ;;
                esac
        done
        check_names "${svcs[@]}"
        ((${#svcs[@]})) || svcs=("${ALL_SERVICES[@]}")
        need_root
        mkdir -p "$STATE" "$RUN" "$LOGS"
        [[ -z $record ]] || touch "$record"
        local s started=() reused=() restarted
        for s in "${svcs[@]}"; do
                restarted=0
                if [[ $s == docker ]] && ours docker; then
                        docker_fs || true
                fi
                if [[ $s == docker ]] && answering docker && ours docker && ! { runtimes_match && storage_match; }; then
                        # Ours (from an earlier start), but with older runtime flags or storage:
                        # restart it with the current ones (images must then be rebuilt:
                        # tests/env/images.sh). It was running before: not recorded as started now.
                        say "docker: runtimes, experimental features or storage differ from this tree's recipe; restarting our dockerd"
                        stop_one docker
                        restarted=1
                fi
                if answering "$s"; then
                        reused+=("$s")
                else
                        # Ours but not answering (hung or half-dead): stop it before restarting.
                        ! ours "$s" || stop_one "$s"
                        local t0=$SECONDS
                        "start_$s"
                        started+=("$s")
                        [[ -z $record || $restarted == 1 ]] || echo "$s" >>"$record"
                        say "$s started ($((SECONDS - t0))s), log $LOGS/$s.log"
                fi
                [[ $s != docker ]] || verify_runsc
        done
        say "started: ${started[*]:-none}; already running: ${reused[*]:-none}"
}

# ---------------------------------------------------------------------------- stop
# docker_owned DOCKERD_PID: "PID STARTTIME" of the containerd shims and runsc processes that
# belong to that dockerd: same mount namespace, started after it, talking to the default
# containerd/runsc roots (only one dockerd can own those at a time), plus their descendants.
# A foreign dockerd (another mount namespace, or running before ours) is never matched.
docker_owned() {
        local dpid=$1 dns dstart p cmd pst t
        dns=$(readlink "/proc/$dpid/ns/mnt" 2>/dev/null) || return 0
        dstart=$(proc_starttime "$dpid") || return 0
        for p in $(pgrep -f 'containerd-shim-runc-v2|runsc' || true); do
                cmd=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue
                case $cmd in
                *containerd-shim-runc-v2*-namespace\ moby*) ;;
                *runsc*/docker/runtime-runc/moby*) ;;
                *) continue ;;
                esac
                [[ $(readlink "/proc/$p/ns/mnt" 2>/dev/null) == "$dns" ]] || continue
                pst=$(proc_starttime "$p") || continue
                ((pst >= dstart)) || continue
                for t in $(proc_tree "$p"); do
                        pst=$(proc_starttime "$t") && echo "$t $pst"
                done
        done | sort -u
}

stop_one() {
        local svc=$1 pid
        if ! pid=$(pidfile_alive "$RUN/$svc.pid"); then
                rm -f "$RUN/$svc.pid"
                if answering "$svc"; then
                        say "$svc: not started by us; left running"
                else
                        say "$svc: not running"
                fi
                return 0
        fi
        case $svc in
        docker)
                local owned p st cur
                owned=$(docker_owned "$pid")
                kill_and_wait "$pid" 30
                # dockerd normally stops its containers and containerd; reap what is left
                # (a failed runsc start leaves orphan shims, runsc-gofer, runsc-sandbox).
                if [[ -n $owned ]]; then
                        # shellcheck disable=SC2046
                        wait_until 5 all_gone $(awk '{print $1}' <<<"$owned") || true
                        while read -r p st; do
                                cur=$(proc_starttime "$p") || continue
                                [[ $cur == "$st" ]] || continue
                                pid_gone "$p" && continue
                                warn "docker: killing leftover pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80)"
                                kill -KILL "$p" 2>/dev/null || true
                        done <<<"$owned"
                fi
                ;;
        rabbitmq)
                rabbit_env
                timeout -s KILL 60 rabbitmqctl -q stop >>"$LOGS/rabbitmq.log" 2>&1 \
                        || warn "rabbitmqctl stop failed; signalling"
                kill_and_wait "$pid" 30
                # Anything left in its process group (beam, erl_child_setup, inet_gethost).
                kill -KILL -- "-$pid" 2>/dev/null || true
                if [[ ! -e $RUN/rabbitmq.epmd-foreign ]]; then
                        epmd -kill >/dev/null 2>&1 || true
                        wait_until 5 bash -c '! pgrep -x epmd' || warn "epmd still running"
                fi
                rm -f "$RUN/rabbitmq.epmd-foreign"
                ;;
        journald)
                kill_and_wait "$pid" 10
                # Don't leave dead sockets behind: without journald, sd_journal_send should see
                # no socket (and drop silently), as before we started it.
                if ! answering journald; then
                        rm -f /run/systemd/journal/socket /run/systemd/journal/stdout \
                              /run/systemd/journal/dev-log /run/systemd/journal/io.systemd.journal
                fi
                ;;
        *)
                kill_and_wait "$pid" 10
                ;;
        esac
        kill -KILL -- "-$pid" 2>/dev/null || true
        rm -f "$RUN/$svc.pid"
        say "$svc stopped"
}

do_stop() {
        local from="" svcs=()
        while (($#)); do
                case $1 in
                --started-by) from=${2:?--started-by needs a file}; shift 2 ;;
                --started-by=*) from=${1#--started-by=}; shift ;;
                -*) usage ;;
                *) svcs+=("$1"); shift ;;
                esac
        done
        check_names "${svcs[@]}"
        ((${#svcs[@]})) || svcs=("${ALL_SERVICES[@]}")
        mkdir -p "$RUN" "$LOGS"
        local targets=() s
        if [[ -n $from ]]; then
                [[ -f $from ]] || { say "nothing recorded in $from; nothing to stop"; return 0; }
                for s in "${svcs[@]}"; do
                        grep -qx "$s" "$from" && targets+=("$s")
                done
        else
                targets=("${svcs[@]}")
        fi
        need_root
        # Stop in reverse start order: journald, rabbitmq, registry, docker.
        local order=(journald rabbitmq registry docker) rc=0
        for s in "${order[@]}"; do
                [[ " ${targets[*]} " == *" $s "* ]] || continue
                stop_one "$s" || rc=1
                if [[ -n $from ]]; then
                        grep -vx "$s" "$from" >"$from.tmp" || true
                        mv "$from.tmp" "$from"
                fi
        done
        if [[ -n $from && ! -s $from ]]; then rm -f "$from"; fi
        return $rc
}

# ---------------------------------------------------------------------------- status
do_status() {
        local svcs=("$@") s
        ((${#svcs[@]})) || svcs=("${ALL_SERVICES[@]}")
        for s in "${svcs[@]}"; do
                if ours "$s"; then
                        if answering "$s"; then
                                printf '%-9s running (ours, pid %s)\n' "$s" "$(pidfile_alive "$RUN/$s.pid")"
                        else
                                printf '%-9s starting or unhealthy (ours, pid %s, not answering)\n' "$s" "$(pidfile_alive "$RUN/$s.pid")"
                        fi
                elif answering "$s"; then
                        printf '%-9s running (foreign)\n' "$s"
                else
                        printf '%-9s stopped\n' "$s"
                fi
        done
}

check_names() {
        local s
        for s in "$@"; do
                [[ " ${ALL_SERVICES[*]} " == *" $s "* ]] \
                        || die "unknown service '$s' (known: ${ALL_SERVICES[*]})"
        done
}

cmd=${1:-}
shift || true
case $cmd in
install) do_install ;;
start)   do_start "$@" ;;
stop)    do_stop "$@" ;;
status)  check_names "$@"; do_status "$@" ;;
*)       usage ;;
esac
