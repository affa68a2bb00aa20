#!/usr/bin/env bash
# tests/run-all.sh — run the whole suite (what `make check` calls after building).
#
# Starts the services the tests need (only those not already running, and stops exactly those
# at the end, even on failure), builds the template images (in the background, while the unit
# tests and the integration programs that need no image run), then runs every executable in
# $PADDOCK_BUILD/tests/unit/ and then $PADDOCK_BUILD/tests/integration/, sorted. Each program
# ends with "N passed, N failed[, N skipped]"; a program that crashes, times out or prints no
# such line counts as 1 failed. The last line is the total; exit 1 if anything failed.
#
# Under CI=true a skipped test counts as failed (in each program and in the total here).
#
# Environment: PADDOCK_BUILD (default build), PADDOCK_SAN_BUILD (a sanitized build: its unit
# tests run too), PADDOCK_STATE, PADDOCK_TEST_TIMEOUT (seconds per
# program, default 1200), PADDOCK_TESTS (optional glob on program names, e.g. 'test-log*').
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PROG=run-all
# shellcheck source=tests/env/lib.sh
. tests/env/lib.sh
export PADDOCK_BUILD=${PADDOCK_BUILD:-build}
export PADDOCK_TEST_IMAGE=paddock/busybox:local
export PADDOCK_PY_IMAGE=paddock/python-3.11:local
export PADDOCK_NODE_IMAGE=paddock/node-18:local
export PADDOCK_BASE_IMAGE=paddock/debian-12:local
LIMIT=${PADDOCK_TEST_TIMEOUT:-1200}

record_services check
TPID=""
trap '[[ -z $TPID ]] || kill -KILL "$TPID" 2>/dev/null; exit 130' INT TERM

tests/env/services.sh start --record "$RECORD"
# The template images build (a few minutes on a fresh machine, download- and dpkg-bound) while
# the programs that need no image run: the unit tests and those in NO_IMAGES. Every other
# program waits for it.
NO_IMAGES=" test-fuzz "
needs_images() { [[ $1 != */tests/unit/* && $NO_IMAGES != *" $(basename "$1") "* ]]; }
IMAGES_LOG=$(mktemp "${TMPDIR:-/tmp}/paddock-images.XXXXXX")
tests/env/images.sh >"$IMAGES_LOG" 2>&1 &
IMAGES_PID=$!
images_wait() {
        [[ -n $IMAGES_PID ]] || return 0
        local rc=0
        wait "$IMAGES_PID" || rc=$?
        IMAGES_PID=""
        printf '\n===== template images =====\n'
        cat "$IMAGES_LOG"
        rm -f "$IMAGES_LOG"
        ((rc == 0)) || die "tests/env/images.sh failed (exit $rc); its output is above"
}

progs=()
# PADDOCK_SAN_BUILD (optional): a sanitized build whose unit tests run too, after the plain ones.
dirs=("$PADDOCK_BUILD/tests/unit")
[[ -z ${PADDOCK_SAN_BUILD:-} ]] || dirs+=("$PADDOCK_SAN_BUILD/tests/unit")
dirs+=("$PADDOCK_BUILD/tests/integration")
for dir in "${dirs[@]}"; do
        [[ -d $dir ]] || continue
        while IFS= read -r f; do
                # shellcheck disable=SC2053
                [[ -z ${PADDOCK_TESTS:-} || $(basename "$f") == $PADDOCK_TESTS ]] || continue
                progs+=("$f")
        done < <(find "$dir" -maxdepth 1 -type f -perm -u+x | LC_ALL=C sort)
done
# The programs that need no image first, so they overlap the image build.
early=() late=()
for f in "${progs[@]}"; do
        if needs_images "$f"; then late+=("$f"); else early+=("$f"); fi
done
progs=("${early[@]}" "${late[@]}")
((${#progs[@]})) || echo "run-all: warning: no test programs under $PADDOCK_BUILD/tests/{unit,integration}" >&2

TOTAL_P=0 TOTAL_F=0 TOTAL_S=0
SUMMARY=()
OUT=$(mktemp "${TMPDIR:-/tmp}/paddock-test-out.XXXXXX")
trap 'rm -f "$OUT"; finish' EXIT
for prog in "${progs[@]}"; do
        ! needs_images "$prog" || images_wait
        name=${prog#"$PADDOCK_BUILD"/tests/}
        penv=("PADDOCK_BUILD=$PADDOCK_BUILD")
        if [[ -n ${PADDOCK_SAN_BUILD:-} && $prog == "$PADDOCK_SAN_BUILD"/tests/* ]]; then
                name=sanitized-${prog#"$PADDOCK_SAN_BUILD"/tests/}
                penv=("PADDOCK_BUILD=$PADDOCK_SAN_BUILD")
        fi
        printf '\n===== %s =====\n' "$name"
        t0=$EPOCHREALTIME
        # stdin closed; output to a file, shown live. Not a pipe: a stray background process
        # holding the program's stdout must not make us wait forever. timeout -s KILL kills
        # the program's whole process group.
        env "${penv[@]}" timeout -s KILL "$LIMIT" "$prog" </dev/null >"$OUT" 2>&1 &
        TPID=$!
        tail -n +1 -s 0.1 --pid="$TPID" -f "$OUT" || true
        rc=0
        wait "$TPID" || rc=$?
        # Strays the program left in its process group (timeout made it a group leader).
        if pgrep -g "$TPID" >/dev/null 2>&1; then
                echo "run-all: $name left processes behind; killing: $(pgrep -g "$TPID" | tr '\n' ' ')" >&2
                kill -KILL -- "-$TPID" 2>/dev/null || true
        fi
        TPID=""
        secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$OUT" | tail -n1 || true)
        p=0 f=0 s=0 note=""
        if [[ -n $line ]]; then
                read -r p _ f _ s _ <<<"${line//,/}"
                s=${s:-0}
        fi
        if ((rc == 137)) && [[ -z $line ]] && awk -v t="$secs" -v l="$LIMIT" 'BEGIN { exit !(t >= l - 1) }'; then
                note="TIMED OUT after ${LIMIT}s (killed)"; f=$((f + 1))
        elif [[ -z $line ]]; then
                note="no result line (exit $rc)"; f=$((f + 1))
                ((rc <= 128)) || note="crashed: signal $((rc - 128)), no result line"
        elif ((rc > 128)); then
                note="died of signal $((rc - 128)) after its result line"; f=$((f + 1))
        elif ((rc != 0 && f == 0)); then
                note="exit $rc with 0 failed reported"; f=$((f + 1))
        fi
        if [[ ${CI:-} == true ]] && ((s > 0)); then
                # Under CI every service is there: a skip means a test did not run, so it fails.
                note="${note:+$note; }$s skipped, and CI=true counts a skip as a failure (see the skip lines above)"
                f=$((f + s)) s=0
        fi
        TOTAL_P=$((TOTAL_P + p)) TOTAL_F=$((TOTAL_F + f)) TOTAL_S=$((TOTAL_S + s))
        entry=$(printf '%-40s %4d passed %4d failed' "$name" "$p" "$f")
        ((s == 0)) || entry+=$(printf ' %4d skipped' "$s")
        entry+="  (${secs}s)"
        [[ -z $note ]] || entry+="  <- $note"
        SUMMARY+=("$entry")
        [[ -z $note ]] || echo "run-all: $name: $note" >&2
done

images_wait     # a run of unit tests alone still ends with the images built (or says why not)
printf '\n===== summary =====\n'
for e in "${SUMMARY[@]}"; do echo "$e"; done
# Stop services before the final line so it stays the very last one.
trap - EXIT
rm -f "$OUT"
finish || true
final="$TOTAL_P passed, $TOTAL_F failed"
((TOTAL_S == 0)) || final+=", $TOTAL_S skipped"
echo "$final"
((TOTAL_F == 0))
