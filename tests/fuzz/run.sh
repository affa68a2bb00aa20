#!/usr/bin/env bash
# tests/fuzz/run.sh — run every libFuzzer target in tests/fuzz/ for a bounded time.
#
#   tests/fuzz/run.sh [SECONDS]      what `make fuzz` (default 60 s each) and, through
#                                    build/tests/integration/test-fuzz, `make check`
#                                    (5 s each) call.
#
# Installs clang and libclang-rt-14-dev with apt-get only when they are missing, builds
# the targets (make fuzz-targets: build/fuzz/, clang, ASan+UBSan), then per target:
#   1. replays tests/fuzz/regressions/<name>/* once each (inputs that crashed before);
#   2. fuzzes for SECONDS from the checked-in seeds (tests/fuzz/corpus/<name>/) plus the
#      corpus earlier runs grew (build/fuzz/corpus/<name>/, not checked in).
# A crash leaves its input in build/fuzz/crashes/<name>-crash-*: copy it to
# tests/fuzz/regressions/<name>/ once the bug is fixed (or reported).
# Prints one line per target and ends with "N passed, N failed"; exit 1 on any failure.
# Environment: FUZZ_TARGETS (glob on target names, e.g. 'json'), FUZZ_RSS_MB (2048),
# FUZZ_OPEN=1 (also replay tests/fuzz/regressions/open/: reported bugs not fixed yet),
# FUZZ_SEED (libFuzzer's -seed for every target; unset: a random one, printed).
#
# Every fuzzing run can be replayed: the seed is printed first and on each target's line,
# and a failure prints the input it wrote and the command that replays it. That input is the
# exact reproducer; FUZZ_SEED=N FUZZ_TARGETS=name reruns the same mutations, from the same
# start only if build/fuzz/corpus/name/ has not grown since (the seconds also count).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[[ -d $ROOT/tests/fuzz ]] || ROOT=@ROOT@
cd "$ROOT" || exit 1
SECONDS_EACH=${1:-${FUZZ_SECONDS:-5}}
# Not 0: to libFuzzer -seed=0 means "pick one yourself", which is what this replaces.
SEED=${FUZZ_SEED:-$(((RANDOM << 15 | RANDOM) % 999999999 + 1))}
if [[ ! $SEED =~ ^[1-9][0-9]{0,8}$ ]]; then
        echo "fuzz: FUZZ_SEED=$SEED is not a number from 1 to 999999999"
        echo "0 passed, 1 failed"
        exit 1
fi
FB=build/fuzz
LOG=$(mktemp "${TMPDIR:-/tmp}/paddock-fuzz.XXXXXX")
trap 'rm -f "$LOG"' EXIT

have_toolchain() {
        command -v clang >/dev/null 2>&1 || return 1
        local rt
        rt=$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)
        [[ -f $rt ]] || ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1
}
if ! have_toolchain; then
        echo "fuzz: installing clang and libclang-rt-14-dev (apt-get)"
        if ! { apt-get install -y --no-install-recommends clang libclang-rt-14-dev >"$LOG" 2>&1 ||
               { apt-get update >>"$LOG" 2>&1 && apt-get install -y --no-install-recommends clang libclang-rt-14-dev >>"$LOG" 2>&1; }; }; then
                tail -n 20 "$LOG"
                echo "fuzz: could not install clang; the fuzz targets did not run"
                echo "0 passed, 1 failed"
                exit 1
        fi
fi

if ! make -s -j"$(nproc)" fuzz-targets >"$LOG" 2>&1; then
        tail -n 40 "$LOG"
        echo "fuzz: building the fuzz targets failed"
        echo "0 passed, 1 failed"
        exit 1
fi

pass=0 fail=0
mkdir -p "$FB/crashes"
echo "fuzz: seed $SEED (FUZZ_SEED=$SEED replays it)"
for src in tests/fuzz/fuzz-*.c; do
        name=$(basename "$src" .c)
        name=${name#fuzz-}
        # shellcheck disable=SC2053
        [[ -z ${FUZZ_TARGETS:-} || $name == $FUZZ_TARGETS ]] || continue
        bin=$FB/fuzz-$name
        opts=(-seed="$SEED" -timeout=10 -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -max_len=65536 -print_final_stats=1
              -artifact_prefix="$FB/crashes/$name-")
        [[ -f tests/fuzz/$name.dict ]] && opts+=(-dict="tests/fuzz/$name.dict")

        regs=()
        [[ -d tests/fuzz/regressions/$name ]] && mapfile -t regs < <(find "tests/fuzz/regressions/$name" -type f | LC_ALL=C sort)
        # Reported, not yet fixed (tests/fuzz/regressions/README.md): only on request.
        [[ -n ${FUZZ_OPEN:-} && -d tests/fuzz/regressions/open/$name ]] &&
                mapfile -t -O "${#regs[@]}" regs < <(find "tests/fuzz/regressions/open/$name" -type f | LC_ALL=C sort)
        if ((${#regs[@]})); then
                if "$bin" "${opts[@]}" "${regs[@]}" >"$LOG" 2>&1; then
                        printf 'ok      %-10s regressions (%d inputs)\n' "$name" "${#regs[@]}"
                        pass=$((pass + 1))
                else
                        printf 'FAIL    %-10s regressions: an input that crashed before crashes again\n' "$name"
                        grep -aE 'ERROR|runtime error|property failed|Running:' "$LOG" | tail -n 8 | sed 's/^/  /'
                        # The last "Running:" is the input that failed.
                        input=$(sed -n 's/^Running: //p' "$LOG" | tail -n1)
                        printf '  replay: %s %s\n' "$bin" "${input:-tests/fuzz/regressions/$name/...}"
                        fail=$((fail + 1))
                fi
        fi

        mkdir -p "$FB/corpus/$name"
        seeds=("$FB/corpus/$name")
        [[ -d tests/fuzz/corpus/$name ]] && seeds+=("tests/fuzz/corpus/$name")
        t0=$EPOCHREALTIME
        if "$bin" "${opts[@]}" -max_total_time="$SECONDS_EACH" "${seeds[@]}" >"$LOG" 2>&1; then
                runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$LOG" | tail -n1)
                cov=$(grep -oE 'cov: [0-9]+' "$LOG" | tail -n1)
                secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')
                printf 'ok      %-10s %ss, %s runs, %s, corpus %s, seed %s\n' "$name" "$secs" "${runs:-?}" "${cov:-cov: ?}" \
                        "$(find "$FB/corpus/$name" -type f | wc -l)" "$SEED"
                pass=$((pass + 1))
        else
                printf 'FAIL    %-10s seed %s\n' "$name" "$SEED"
                grep -aE 'ERROR|runtime error|property failed|SUMMARY|artifact_prefix|Test unit written' "$LOG" | tail -n 12 | sed 's/^/  /'
                crash=$(sed -n 's/.*Test unit written to //p' "$LOG" | tail -n1)
                if [[ -n $crash ]]; then
                        printf '  replay: %s %s\n' "$bin" "$crash"
                else
                        echo "  no input was written (see the lines above)"
                fi
                printf '  rerun:  FUZZ_SEED=%s FUZZ_TARGETS=%s tests/fuzz/run.sh %s\n' "$SEED" "$name" "$SECONDS_EACH"
                fail=$((fail + 1))
        fi
done
echo "$pass passed, $fail failed"
((fail == 0))
