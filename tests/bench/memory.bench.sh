# memory.bench.sh — sourced by tests/bench/run.sh (URL, KEY, B, WORK, IMG, N and the helpers
# ms, pct, ratio are set there). Pause with memory (issue 37) on the local driver, through the
# API as a user calls it, for a python sandbox that is idle and for one holding 100 MiB of live
# heap (random bytes, so no page is zero), side by side with the pause that keeps only the
# filesystem and with a cold create of the same template.
#
# Rows, per sandbox kind: pause with memory p50 (POST .../pause {"keepMemory":true} until its
# answer: the sandbox is paused) against the filesystem pause of the same sandbox; resume to
# the first command (POST .../resume, then exec `echo`) against the filesystem resume and
# against a cold create + first exec; the checkpoint on disk against the container's memory
# use just before the pause (docker stats); fork of 1 and of 5 (until every copy runs) against
# the cold create. Each time is the request's own (curl's time_total).

mb_runs=$((N / 2))
[ "$mb_runs" -lt 3 ] && mb_runs=3
mb_api() {   # METHOD PATH [BODY]: prints "<http code> <seconds>" and leaves the body in $WORK/mb.body
	curl -s -o "$WORK/mb.body" -w '%{http_code} %{time_total}\n' -X "$1" "$URL$2" -H "x-brimble-key: $KEY" \
		-H 'content-type: application/json' ${3:+-d "$3"}
}
mb_ms() { awk -v a="$1" 'BEGIN { printf "%.1f\n", a * 1000 }'; }
mb_sum_ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f\n", (a + b) * 1000 }'; }
MB_DENY='{"egress":{"mode":"deny_all"}}'

if ! docker info --format '{{.ExperimentalBuild}}' 2>/dev/null | grep -qx true; then
	printf '%-44s %12s %12s %8s  %s\n' "pause with memory rows" "skipped" "-" "-" "(dockerd without \"experimental\": true)"
	return 0
fi

# mb_kind NAME HEAP_MIB: the rows for one kind of sandbox (HEAP_MIB 0: idle).
mb_kind() {
	local name=$1 heap=$2 id code t t2 rss
	read -r code t < <(mb_api POST /sandboxes "$MB_DENY")
	id=$(jq -r .data.id "$WORK/mb.body")
	if [ "$code" != 201 ]; then
		printf '%-44s %12s\n' "pause with memory, $name" "create failed ($code)"
		return 0
	fi
	if [ "$heap" -gt 0 ]; then
		mb_api POST "/sandboxes/$id/processes" "{\"cmd\":\"exec python3 -c 'import os,time; b=bytearray(os.urandom($heap<<20)); time.sleep(86400)'\"}" >/dev/null
		sleep 3   # the heap filled (os.urandom of 100 MiB takes ~1 s here)
	fi
	: >"$WORK/mb-mp"; : >"$WORK/mb-mr"; : >"$WORK/mb-fp"; : >"$WORK/mb-fr"; : >"$WORK/mb-cold"
	rss=$(docker stats --no-stream --format '{{.MemUsage}}' "paddock-$id" | awk '{print $1}')
	local ckpt=""
	for _ in $(seq "$mb_runs"); do
		read -r code t < <(mb_api POST "/sandboxes/$id/pause" '{"keepMemory":true}')
		[ "$code" = 200 ] || { echo "memory.bench: pause with memory: $code $(cat "$WORK/mb.body")" >&2; break; }
		mb_ms "$t" >>"$WORK/mb-mp"
		ckpt=$(mb_api GET "/sandboxes/$id" >/dev/null; jq -r '.data.checkpoint_bytes // empty' "$WORK/mb.body")
		read -r code t < <(mb_api POST "/sandboxes/$id/resume")
		read -r code2 t2 < <(mb_api POST "/sandboxes/$id/exec" '{"cmd":"echo hi"}')
		[ "$code" = 200 ] && [ "$code2" = 200 ] && mb_sum_ms "$t" "$t2" >>"$WORK/mb-mr"
	done
	# the heap survived every round (the same process, still there)
	if [ "$heap" -gt 0 ]; then
		mb_api POST "/sandboxes/$id/exec" '{"cmd":"pgrep -f bytearray"}' >/dev/null
		[ "$(jq -r .data.exit_code "$WORK/mb.body" 2>/dev/null)" = 0 ] || echo "memory.bench: the heap process did not survive" >&2
	fi
	for _ in $(seq "$mb_runs"); do
		read -r code t < <(mb_api POST "/sandboxes/$id/pause" '{}')
		[ "$code" = 200 ] && mb_ms "$t" >>"$WORK/mb-fp"
		read -r code t < <(mb_api POST "/sandboxes/$id/resume")
		read -r code2 t2 < <(mb_api POST "/sandboxes/$id/exec" '{"cmd":"echo hi"}')
		[ "$code" = 200 ] && [ "$code2" = 200 ] && mb_sum_ms "$t" "$t2" >>"$WORK/mb-fr"
	done
	# fork of 1 and of 5 (POST .../fork until every copy runs), the copies destroyed after each
	: >"$WORK/mb-f1"; : >"$WORK/mb-f5"
	local n kid
	for n in 1 5; do
		for _ in $(seq "$mb_runs"); do
			read -r code t < <(mb_api POST "/sandboxes/$id/fork" "{\"count\":$n}")
			[ "$code" = 201 ] && [ "$(jq '[.data[] | select(.sandbox)] | length' "$WORK/mb.body")" = "$n" ] && mb_ms "$t" >>"$WORK/mb-f$n"
			[ "$code" = 201 ] || echo "memory.bench: fork of $n: $code $(cat "$WORK/mb.body")" >&2
			for kid in $(jq -r '.data[]?.sandbox.id // empty' "$WORK/mb.body" 2>/dev/null); do
				mb_api DELETE "/sandboxes/$kid" >/dev/null
			done
		done
	done
	mb_api DELETE "/sandboxes/$id" >/dev/null
	for _ in $(seq "$mb_runs"); do
		local cid
		read -r code t < <(mb_api POST /sandboxes "$MB_DENY")
		cid=$(jq -r .data.id "$WORK/mb.body")
		read -r code2 t2 < <(mb_api POST "/sandboxes/$cid/exec" '{"cmd":"echo hi"}')
		[ "$code" = 201 ] && [ "$code2" = 200 ] && mb_sum_ms "$t" "$t2" >>"$WORK/mb-cold"
		mb_api DELETE "/sandboxes/$cid" >/dev/null
	done
	local mp fp mr fr cold ck_mb rss_mb f1 f5
	f1=$(pct 50 <"$WORK/mb-f1"); f5=$(pct 50 <"$WORK/mb-f5")
	mp=$(pct 50 <"$WORK/mb-mp"); fp=$(pct 50 <"$WORK/mb-fp")
	mr=$(pct 50 <"$WORK/mb-mr"); fr=$(pct 50 <"$WORK/mb-fr"); cold=$(pct 50 <"$WORK/mb-cold")
	rss_mb=$(awk -v s="$rss" 'BEGIN { v = s + 0; if (s ~ /GiB/) v *= 1024; else if (s ~ /KiB/) v /= 1024; printf "%.1f", v }')
	ck_mb=$(awk -v b="${ckpt:-0}" 'BEGIN { printf "%.1f", b / 1048576 }')
	local per_gib
	per_gib=$(awk -v t="$mp" -v m="$rss_mb" 'BEGIN { if (m > 0) printf "%.2f", t / m * 1024 / 1000; else print "n/a" }')
	printf '%-44s %12s %12s %8s  %s\n' "pause w/ memory p50 (ms), $name vs fs pause" "$mp" "$fp" "$(ratio "$mp" "$fp")" "(info)"
	# per GiB where memory dominates (an idle sandbox's pause is its fixed cost)
	[ "$heap" -gt 0 ] && printf '%-44s %12s %12s %8s  %s\n' "pause w/ memory (s per GiB of RSS), $name" "$per_gib" "$rss_mb MiB" "" "<= 1 s/GiB"
	printf '%-44s %12s %12s %8s  %s\n' "resume w/ memory+exec p50 (ms), $name vs fs" "$mr" "$fr" "$(ratio "$mr" "$fr")" "<= 300 ms (idle)"
	printf '%-44s %12s %12s %8s  %s\n' "resume w/ memory+exec p50 (ms), $name vs cold" "$mr" "$cold" "$(ratio "$mr" "$cold")" "(create+exec)"
	printf '%-44s %12s %12s %8s  %s\n' "fork of 1 p50 (ms), $name vs cold create+exec" "${f1:-n/a}" "$cold" "$(ratio "${f1:-0}" "$cold")" "<= 400 ms (idle)"
	printf '%-44s %12s %12s %8s  %s\n' "fork of 5 p50 (ms), $name vs cold create+exec" "${f5:-n/a}" "$cold" "$(ratio "${f5:-0}" "$cold")" "(info)"
	printf '%-44s %12s %12s %8s  %s\n' "checkpoint on disk (MiB), $name vs RSS" "$ck_mb" "$rss_mb" "$(ratio "$ck_mb" "$rss_mb")" "<= 1.1"
}

mb_kind idle 0
mb_kind "100 MiB heap" 100
printf '%-44s %s\n' "  published (issue 37)" "E2B pause ~4 s/GiB, resume ~1 s; Morph < 250 ms to snapshot, branch or restore"
unset mb_runs MB_DENY
