# pool.bench.sh — sourced by tests/bench/run.sh (URL, KEY, B, WORK, IMG, N and the helpers
# ms, pct, ratio, ctld_* are set there). Warm pools: time to interactive (create, then the
# first `exec echo`, both through the API) on a pool hit, a burst of creates against a full
# pool, the cold path beside them, and what an idle member costs. Baseline, in the same run:
# `docker run -d` then `docker exec echo` of the same image and runtime.
#
# Rows: TTI p50/p95 on a hit (sequential, the pool refilled between two creates, untimed);
# TTI p50 on a miss (other specs: the cold path); 10 creates at once against a pool of 10
# (all must be 201) and how long the pool takes to be full again; memory and CPU of one idle
# member. The published anchors are printed beside (computesdk benchmarks, May 2026).

pl_n=${BENCH_POOL_N:-50}
pl_size=10
PL_PORT=18133
PL_URL=http://127.0.0.1:$PL_PORT
ctld_conf "$PL_PORT" "$WORK/pool.db" >"$WORK/pool.conf"
cat >>"$WORK/pool.conf" <<CONF
[pool "bench"]
template = python-3.11
size = $pl_size
refill_rate = 600
CONF
ctld_up "$WORK/pool.conf" "$WORK/pool.log" "$PL_URL"
PL_PID=$CTLD_UP_PID
PL_KEY=$(ctld_key "$WORK/pool.conf" poolbench)
# ready members of the pool, from controld's own admin view
pl_ready() { "$B/controld" admin -f "$WORK/pool.conf" pool 2>/dev/null | awk -F'\t' '$1 == "pool" {sub("ready=", "", $9); print $9}'; }
pl_wait_full() {
	for _ in $(seq 1200); do [ "$(pl_ready)" = "$pl_size" ] && return 0; sleep 0.1; done
	return 1
}
# create with body $1, then exec echo; prints the ms of both and the sandbox id. The time is
# each request's own (curl's time_total, as in runtime.bench.sh): what an SDK holding its
# connection sees, without the start of a curl and a jq process per call (~30 ms here).
pl_tti() {
	local out id
	out=$(curl -sf -w '\n%{time_total}' -X POST "$PL_URL/sandboxes" -H "x-brimble-key: $PL_KEY" -H 'content-type: application/json' -d "$1")
	id=$(jq -r .data.id <<<"${out%$'\n'*}")
	local t_create=${out##*$'\n'}
	local t_exec
	t_exec=$(curl -sf -o /dev/null -w '%{time_total}' -X POST "$PL_URL/sandboxes/$id/exec" -H "x-brimble-key: $PL_KEY" \
		-H 'content-type: application/json' -d '{"cmd":"echo hi"}')
	echo "$(awk -v a="$t_create" -v b="$t_exec" 'BEGIN { printf "%.1f", (a + b) * 1000 }') $id"
}
pl_destroy() { curl -sf -o /dev/null -X DELETE "$PL_URL/sandboxes/$1" -H "x-brimble-key: $PL_KEY" || true; }

pl_wait_full || echo "pool.bench: the pool did not fill" >&2
# 1. TTI on a hit, sequential; the pool is full before each create (untimed).
: >"$WORK/pl-hit"
for _ in $(seq "$pl_n"); do
	pl_wait_full
	read -r t id < <(pl_tti '{}')
	echo "$t" >>"$WORK/pl-hit"
	pl_destroy "$id"
done
# 2. The cold path (a miss: other specs) and the docker baseline, interleaved.
: >"$WORK/pl-miss"; : >"$WORK/pl-docker"
for _ in $(seq "$N"); do
	read -r t id < <(pl_tti '{"specs":{"cpu":400}}')
	echo "$t" >>"$WORK/pl-miss"
	pl_destroy "$id"
	t0=$EPOCHREALTIME
	cid=$(docker run -d --label paddock.bench=1 --runtime runsc-hostnet --network paddock-sandbox --cap-drop ALL --cap-add ALL \
		--security-opt no-new-privileges --pids-limit 4096 -m 640m --memory-reservation 512m "$IMG" tail -f /dev/null)
	docker exec "$cid" echo hi >/dev/null
	t1=$EPOCHREALTIME
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", (b - a) * 1000 }' >>"$WORK/pl-docker"
	docker rm -f "$cid" >/dev/null
done
# 3. A burst: pool full, 10 creates at once.
pl_wait_full
: >"$WORK/pl-burst"
pl_pids=()
for _ in $(seq 10); do
	( me=$BASHPID
	  read -r code t < <(curl -s -o "$WORK/pl-burst-body.$me" -w '%{http_code} %{time_total}\n' -X POST "$PL_URL/sandboxes" \
		-H "x-brimble-key: $PL_KEY" -H 'content-type: application/json' -d '{}')
	  echo "$code $(awk -v a="$t" 'BEGIN { printf "%.1f", a * 1000 }') $(jq -r .data.id "$WORK/pl-burst-body.$me")" \
		>>"$WORK/pl-burst" ) &
	pl_pids+=($!)
done
wait "${pl_pids[@]}"    # not a bare wait: the controlds are this shell's background jobs too
t0=$EPOCHREALTIME
pl_wait_full
pl_refill_s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
pl_burst_ok=$(awk '$1 == 201' "$WORK/pl-burst" | wc -l)
pl_burst_p50=$(awk '{print $2}' "$WORK/pl-burst" | pct 50)
awk '{print $3}' "$WORK/pl-burst" | while read -r id; do pl_destroy "$id"; done
# 4. One idle member: memory and CPU over 5 s (docker stats of its container).
pl_member=$("$B/controld" admin -f "$WORK/pool.conf" pool 2>/dev/null | awk -F'\t' '$1 == "member" && $4 == "ready" {print $2; exit}')
pl_mem=n/a; pl_cpu=n/a
if [ -n "$pl_member" ]; then
	sleep 5
	read -r pl_mem pl_cpu < <(docker stats --no-stream --format '{{.MemUsage}} {{.CPUPerc}}' "paddock-$pl_member" |
		awk '{print $1, $4}')
fi

pl_h50=$(pct 50 <"$WORK/pl-hit"); pl_h95=$(pct 95 <"$WORK/pl-hit")
pl_m50=$(pct 50 <"$WORK/pl-miss"); pl_d50=$(pct 50 <"$WORK/pl-docker")
printf '%-44s %12s %12s %8s  %s\n' "TTI pool hit p50 (ms) vs docker run+exec" "$pl_h50" "$pl_d50" "$(ratio "$pl_h50" "$pl_d50")" "<= 50 ms"
printf '%-44s %12s %12s %8s  %s\n' "TTI pool hit p95 (ms) vs docker run+exec" "$pl_h95" "$pl_d50" "$(ratio "$pl_h95" "$pl_d50")" "<= 100 ms"
printf '%-44s %12s %12s %8s  %s\n' "TTI miss (cold) p50 (ms) vs docker run+exec" "$pl_m50" "$pl_d50" "$(ratio "$pl_m50" "$pl_d50")" "<= 1.3"
printf '%-44s %12s %12s %8s  %s\n' "burst: 10 creates at once, p50 (ms), 201s" "$pl_burst_p50" "$pl_burst_ok/10" "" "<= 150 ms, 10/10"
printf '%-44s %12s %12s %8s  %s\n' "pool of 10 full again after the burst (s)" "$pl_refill_s" "" "" "(info)"
printf '%-44s %12s %12s %8s  %s\n' "idle pool member: memory, CPU" "$pl_mem" "$pl_cpu" "" "(info)"
printf '%-44s %s\n' "  published TTI p50 (computesdk, May 2026)" "declaw 42 ms, Daytona 186, E2B 491, Vercel 671, Modal 1700; Brimble 1500-3000"

# The pool's controld, its sandboxes and its members (which outlive a controld by design) go
# in run.sh's cleanup, also when the bench is interrupted.
unset pl_n pl_size PL_PORT PL_URL PL_KEY pl_h50 pl_h95 pl_m50 pl_d50 pl_burst_ok pl_burst_p50 pl_refill_s pl_member pl_mem pl_cpu
