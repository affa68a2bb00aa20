# tests/env/lib.sh — shared helpers for the dev/test environment scripts (sourced, not run).
# shellcheck shell=bash

PADDOCK_STATE=${PADDOCK_STATE:-/var/tmp/paddock-dev}
export PADDOCK_STATE
DOCKER_SOCK=/var/run/docker.sock

PADDOCK_ENV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PADDOCK_ROOT=$(cd "$PADDOCK_ENV_DIR/../.." && pwd)
# Where `make up` keeps its daemons' configs, logs and pid files.
DEV=${PADDOCK_DEV_DIR:-$PADDOCK_ROOT/build/dev}

# script_init NAME: how a script of the dev stack (up.sh, down.sh) starts: strict mode, NAME
# in its messages, the tree's root as its directory.
script_init() {
        set -euo pipefail
        PROG=$1
        cd "$PADDOCK_ROOT"
}

# example_templates: the [template "..."] sections of packaging/controld.conf.example, which
# the dev stack serves as they are (one list of templates to keep).
example_templates() {
        awk '/^\[/ { t = /^\[template "/ } t && NF && !/^#/' "$PADDOCK_ROOT/packaging/controld.conf.example"
}

say()  { printf '%s: %s\n' "${PROG:-paddock}" "$*"; }
warn() { printf '%s: warning: %s\n' "${PROG:-paddock}" "$*" >&2; }
die()  { printf '%s: error: %s\n' "${PROG:-paddock}" "$*" >&2; exit 1; }

# show_log FILE [N]: print the last N lines of a log to stderr, framed.
show_log() {
        local f=$1 n=${2:-40}
        if [[ -s $f ]]; then
                printf -- '----- last %s lines of %s -----\n' "$n" "$f" >&2
                tail -n "$n" "$f" >&2
                printf -- '-----\n' >&2
        else
                printf '(log %s is empty or missing)\n' "$f" >&2
        fi
}

# wait_until SECONDS CMD...: poll CMD every 0.1 s until it succeeds; 1 on timeout.
wait_until() {
        local limit=$1; shift
        local deadline=$((SECONDS + limit))
        while :; do
                if "$@" >/dev/null 2>&1; then return 0; fi
                ((SECONDS < deadline)) || return 1
                sleep 0.1
        done
}

# Process identity: "PID STARTTIME" (field 22 of /proc/PID/stat) so a recycled PID is
# never mistaken for ours.
proc_starttime() {
        local stat
        stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
        stat=${stat##*) }               # drop "pid (comm) " (comm may contain spaces)
        # shellcheck disable=SC2086
        set -- $stat
        echo "${20}"                    # field 22 overall = 20th after pid and comm
}

# pidfile_write FILE PID
pidfile_write() {
        local st
        st=$(proc_starttime "$2") || st=0
        echo "$2 $st" >"$1"
}

# pidfile_alive FILE: prints the PID and returns 0 if the recorded process is still that process.
pidfile_alive() {
        local pid st cur
        [[ -r $1 ]] || return 1
        read -r pid st <"$1" || return 1
        [[ $pid =~ ^[0-9]+$ ]] || return 1
        cur=$(proc_starttime "$pid") || return 1
        [[ -z $st || $st == 0 || $st == "$cur" ]] || return 1
        # A zombie is not alive.
        [[ $(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null) != Z ]] || return 1
        echo "$pid"
}

# proc_tree PID: PID and all its descendants (daemons like su/rabbitmq leave the process group).
proc_tree() {
        ps -e -o pid=,ppid= | awk -v root="$1" '
                { kids[$2] = kids[$2] " " $1 }
                END {
                        n = 1; q[1] = root
                        for (i = 1; i <= n; i++) {
                                print q[i]
                                m = split(kids[q[i]], c, " ")
                                for (j = 1; j <= m; j++) q[++n] = c[j]
                        }
                }'
}

# kill_and_wait PID TIMEOUT [SIG]: send SIG (default TERM) to PID, wait up to TIMEOUT s for
# it to exit, then KILL it and every descendant it had when we started (its whole tree).
kill_and_wait() {
        local pid=$1 limit=$2 sig=${3:-TERM} tree p
        tree=$(proc_tree "$pid")
        kill -s "$sig" "$pid" 2>/dev/null || true
        if ! wait_until "$limit" pid_gone "$pid"; then
                warn "pid $pid did not exit within ${limit}s; sending KILL"
        fi
        for p in $tree; do kill -KILL "$p" 2>/dev/null || true; done
        kill -KILL -- "-$pid" 2>/dev/null || true
        wait_until 5 pid_gone "$pid" || warn "pid $pid still present after KILL"
}

pid_gone() {
        [[ ! -e /proc/$1 ]] && return 0
        [[ $(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null) == Z ]]
}

all_gone() {
        local p
        for p in "$@"; do pid_gone "$p" || return 1; done
}

docker_ping() {
        [[ $(curl -s --max-time 2 --unix-socket "$DOCKER_SOCK" http://localhost/_ping 2>/dev/null) == OK ]]
}

# busybox_image: make sure paddock/busybox:local exists (imported from busybox-static,
# no pull). Tagged by the busybox binary's hash so an upgrade rebuilds it.
busybox_image() {
        local bb=/bin/busybox
        [[ -x $bb ]] || die "busybox-static is not installed (run: tests/env/services.sh install)"
        local h
        # The tag covers the recipe too: "root 0755" (mktemp -d makes 0700, and with Docker's
        # btrfs storage the image's root directory mode is the container's: non-root users
        # could then run nothing).
        h=$({ sha256sum "$bb"; echo "root 0755"; } | sha256sum | cut -c1-12)
        if docker image inspect "paddock/busybox:$h" >/dev/null 2>&1; then
                docker tag "paddock/busybox:$h" paddock/busybox:local
                return 0
        fi
        local d
        d=$(mktemp -d "${TMPDIR:-/tmp}/paddock-bb.XXXXXX")
        chmod 755 "$d"
        mkdir -p "$d"/{bin,etc,tmp,root,proc,sys,dev,workspace,usr}
        chmod 1777 "$d/tmp"
        cp "$bb" "$d/bin/busybox"
        local a
        for a in $("$bb" --list); do
                [[ $a == busybox ]] || ln -s busybox "$d/bin/$a"
        done
        ln -s bin "$d/sbin"
        ln -s ../bin "$d/usr/bin"
        ln -s ../bin "$d/usr/sbin"
        printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$d/etc/passwd"
        printf 'root:x:0:\nnogroup:x:65534:\n' >"$d/etc/group"
        tar -C "$d" -c . | docker import -c 'CMD ["/bin/sh"]' - "paddock/busybox:$h" >/dev/null \
                || { rm -rf "$d"; die "docker import of paddock/busybox failed"; }
        rm -rf "$d"
        docker tag "paddock/busybox:$h" paddock/busybox:local
        say "built paddock/busybox:local ($h)"
}

# debian_mirror [SUITE]: the Debian mirror apt already uses for SUITE (default bookworm), so
# debootstrap and the trixie pin fetch from the same place. Override: PADDOCK_DEBIAN_MIRROR.
debian_mirror() {
        local SUITE=${1:-bookworm}
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

# record_services TAG: for a run that starts the services it needs (run-all, soak): RECORD
# names a fresh file under $PADDOCK_STATE for `services.sh start --record`, and the EXIT trap
# (finish, which keeps the exit status) stops exactly the services listed there.
record_services() {
        mkdir -p "$PADDOCK_STATE"
        RECORD=$(mktemp "$PADDOCK_STATE/$1.started.XXXXXX")
        rm -f "$RECORD"
        trap finish EXIT
}
finish() {
        local rc=$?
        if [[ -f $RECORD ]]; then
                "$PADDOCK_ENV_DIR/services.sh" stop --started-by "$RECORD" || warn "stopping services failed"
        fi
        rm -f "$RECORD"
        return $rc
}

# daemon_pid NAME: the PID in $DEV/NAME.pid if that process is still a NAME.
daemon_pid() {
        local pid
        [[ -r $DEV/$1.pid ]] || return 1
        read -r pid <"$DEV/$1.pid" || return 1
        [[ $pid =~ ^[0-9]+$ ]] || return 1
        [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */"$1"* ]] || return 1
        pid_gone "$pid" && return 1
        echo "$pid"
}
