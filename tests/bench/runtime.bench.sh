# runtime.bench.sh — sourced by tests/bench/run.sh (URL, KEY, B, WORK, IMG, N and the
# helpers ms, pct, ratio are set there). Runtime operations through the API against
# the same operation done with the docker CLI on the very same container, interleaved
# run by run so both sides see the same machine state.
#
# Rows: exec round trip of `true`; 100 sequential `echo` calls; time to the first
# streamed frame; upload and download MB/s of a 50 MiB file, against docker cp (which
# writes the container's layer from the host, outside gVisor) and against
# `docker exec -i ... cat` (the exec transport); controld's RSS while 100 sandboxes each
# hold a detached process printing continuously, against its RSS with none.
# Commands and files go through the in-sandbox agent (paddock-init's socket); the docker
# baselines go through runsc exec, as controld's fallback path does.

rt_runs=$((N * 3))
[ "$rt_runs" -lt 30 ] && rt_runs=30
rt_ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f\n", (b - a) * 1000 }'; }
rt_p50() { sort -n "$1" | awk '{a[NR]=$1} END {i=int((NR-1)*50/100)+1; printf "%.1f", a[i]}'; }

rt_id=$(curl -sf -X POST "$URL/sandboxes" -H "x-brimble-key: $KEY" -H 'content-type: application/json' -d '{}' | jq -r .data.id)
rt_ctr=paddock-$rt_id
rt_exec() { curl -sf -o /dev/null -w '%{time_total}\n' -X POST "$URL/sandboxes/$rt_id/exec" -H "x-brimble-key: $KEY" \
	-H 'content-type: application/json' -d "$1"; }

# Warm both paths once (first exec in a fresh gVisor sandbox pays one-off costs).
rt_exec '{"cmd":"true"}' >/dev/null
docker exec "$rt_ctr" true

# 1. exec `true`: API round trip (curl time_total) vs `docker exec` wall clock.
: >"$WORK/rt-exec-api"; : >"$WORK/rt-exec-docker"
for _ in $(seq "$rt_runs"); do
	rt_exec '{"cmd":"true"}' | awk '{printf "%.1f\n", $1 * 1000}' >>"$WORK/rt-exec-api"
	t0=$EPOCHREALTIME; docker exec "$rt_ctr" true; t1=$EPOCHREALTIME
	rt_ms "$t0" "$t1" >>"$WORK/rt-exec-docker"
done
rt_e_api=$(rt_p50 "$WORK/rt-exec-api"); rt_e_dk=$(rt_p50 "$WORK/rt-exec-docker")

# 1b. 100 sequential `echo` calls, one after the other, total wall clock: on one kept
# connection (one curl, as an SDK holds its connection; a curl process per call would
# measure curl's own start). Back to back, so no spare shell is ready (the agent waits for
# a pause before starting one): this row is the cold path.
: >"$WORK/rt-seq.cfg"
for i in $(seq 100); do
	[ "$i" -gt 1 ] && echo next >>"$WORK/rt-seq.cfg"
	printf 'url = "%s"\nrequest = "POST"\nheader = "x-brimble-key: %s"\nheader = "content-type: application/json"\ndata = "{\\"cmd\\":\\"echo %s\\"}"\noutput = "/dev/null"\nsilent\n' \
		"$URL/sandboxes/$rt_id/exec" "$KEY" "$i" >>"$WORK/rt-seq.cfg"
done
t0=$EPOCHREALTIME
curl -K "$WORK/rt-seq.cfg"
t1=$EPOCHREALTIME; rt_seq_api=$(rt_ms "$t0" "$t1")
t0=$EPOCHREALTIME
for i in $(seq 100); do docker exec "$rt_ctr" echo "$i" >/dev/null; done
t1=$EPOCHREALTIME; rt_seq_dk=$(rt_ms "$t0" "$t1")

# 2. First streamed frame of `echo hi; sleep 1` vs the whole `docker exec echo hi`.
: >"$WORK/rt-ttfb-api"; : >"$WORK/rt-ttfb-docker"
for _ in $(seq "$N"); do
	"$B/tests/bench/sse-ttfb" "$URL/sandboxes/$rt_id/exec" "$KEY" '{"cmd":"echo hi; sleep 1","stream":true}' 1 |
		awk '{print $1}' >>"$WORK/rt-ttfb-api"
	t0=$EPOCHREALTIME; docker exec "$rt_ctr" echo hi >/dev/null; t1=$EPOCHREALTIME
	rt_ms "$t0" "$t1" >>"$WORK/rt-ttfb-docker"
done
rt_t_api=$(rt_p50 "$WORK/rt-ttfb-api"); rt_t_dk=$(rt_p50 "$WORK/rt-ttfb-docker")

# 3. 50 MiB up and down: PUT/GET through the API vs docker cp into/out of the same container.
rt_mib=50
rt_runs_f=$(( N < 5 ? N : 5 ))
head -c $((rt_mib * 1024 * 1024)) /dev/urandom >"$WORK/rt-50m.bin"
rt_sum=$(sha256sum <"$WORK/rt-50m.bin" | cut -d' ' -f1)
: >"$WORK/rt-up-api"; : >"$WORK/rt-up-docker"; : >"$WORK/rt-down-api"; : >"$WORK/rt-down-docker"
: >"$WORK/rt-up-exec"; : >"$WORK/rt-down-exec"; : >"$WORK/rt-down-api-file"; : >"$WORK/rt-down-docker-file"
rt_mbps() { awk -v mib="$rt_mib" -v ms="$1" 'BEGIN { printf "%.1f\n", mib / (ms / 1000) }'; }
for _ in $(seq "$rt_runs_f"); do
	s=$(curl -sf -o /dev/null -w '%{time_total}' -X PUT "$URL/sandboxes/$rt_id/files/root/rt-50m.bin" -H "x-brimble-key: $KEY" \
		-H 'content-type: application/octet-stream' --data-binary @"$WORK/rt-50m.bin")
	rt_mbps "$(awk -v s="$s" 'BEGIN {print s * 1000}')" >>"$WORK/rt-up-api"
	# Downloads are timed into /dev/null on both sides (docker cp writes its tar stream to
	# stdout): the client's own write of 50 MiB to this machine's disk is ~85 ms whatever
	# serves it (curl from a server that sends the bytes from memory), which would measure
	# the client's disk, not the transfer. The bytes are checked on a GET of their own.
	s=$(curl -sf -o /dev/null -w '%{time_total}' "$URL/sandboxes/$rt_id/files/root/rt-50m.bin" -H "x-brimble-key: $KEY")
	rt_mbps "$(awk -v s="$s" 'BEGIN {print s * 1000}')" >>"$WORK/rt-down-api"
	rm -f "$WORK/rt-down.bin"
	s=$(curl -sf -o "$WORK/rt-down.bin" -w '%{time_total}' "$URL/sandboxes/$rt_id/files/root/rt-50m.bin" -H "x-brimble-key: $KEY")
	rt_mbps "$(awk -v s="$s" 'BEGIN {print s * 1000}')" >>"$WORK/rt-down-api-file"
	[ "$(sha256sum <"$WORK/rt-down.bin" | cut -d' ' -f1)" = "$rt_sum" ] || echo "runtime bench: GET returned different bytes" >&2

	t0=$EPOCHREALTIME; docker cp -q "$WORK/rt-50m.bin" "$rt_ctr:/root/rt-cp.bin"; t1=$EPOCHREALTIME
	rt_mbps "$(rt_ms "$t0" "$t1")" >>"$WORK/rt-up-docker"
	t0=$EPOCHREALTIME; docker cp -q "$rt_ctr:/root/rt-cp.bin" - >/dev/null; t1=$EPOCHREALTIME
	rt_mbps "$(rt_ms "$t0" "$t1")" >>"$WORK/rt-down-docker"
	rm -f "$WORK/rt-cp-down.bin"
	t0=$EPOCHREALTIME; docker cp -q "$rt_ctr:/root/rt-cp.bin" "$WORK/rt-cp-down.bin"; t1=$EPOCHREALTIME
	rt_mbps "$(rt_ms "$t0" "$t1")" >>"$WORK/rt-down-docker-file"

	# The same transport controld uses (an exec with a byte stream), without controld.
	t0=$EPOCHREALTIME; docker exec -i "$rt_ctr" sh -c 'cat > /root/rt-ex.bin' <"$WORK/rt-50m.bin"; t1=$EPOCHREALTIME
	rt_mbps "$(rt_ms "$t0" "$t1")" >>"$WORK/rt-up-exec"
	t0=$EPOCHREALTIME; docker exec "$rt_ctr" cat /root/rt-ex.bin >"$WORK/rt-cp-down.bin"; t1=$EPOCHREALTIME
	rt_mbps "$(rt_ms "$t0" "$t1")" >>"$WORK/rt-down-exec"
done
rt_u_api=$(rt_p50 "$WORK/rt-up-api"); rt_u_dk=$(rt_p50 "$WORK/rt-up-docker")
rt_d_api=$(rt_p50 "$WORK/rt-down-api"); rt_d_dk=$(rt_p50 "$WORK/rt-down-docker")
rt_u_ex=$(rt_p50 "$WORK/rt-up-exec"); rt_d_ex=$(rt_p50 "$WORK/rt-down-exec")
rt_df_api=$(rt_p50 "$WORK/rt-down-api-file"); rt_df_dk=$(rt_p50 "$WORK/rt-down-docker-file")
rm -f "$WORK/rt-50m.bin" "$WORK/rt-down.bin" "$WORK/rt-cp-down.bin"
curl -sf -X DELETE "$URL/sandboxes/$rt_id" -H "x-brimble-key: $KEY" >/dev/null || true

# 4. controld's RSS while BENCH_RSS_SANDBOXES (100) sandboxes each hold a detached process
# printing continuously (nobody attached: the agents keep the output), against before.
rt_rss() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$CTL_PID/status"; }
rt_n=${BENCH_RSS_SANDBOXES:-100}
rt_rss0=$(rt_rss)
# One line a second each: on 2 cores, 100 gVisor sandboxes forking `sleep` ten times a second
# are a fork storm that measures the host, not controld.
seq "$rt_n" | xargs -P 2 -I@ sh -c 'id=$(curl -sf -X POST "$0/sandboxes" -H "x-brimble-key: $1" -H "content-type: application/json" \
	-d "{}" | jq -r .data.id) && curl -sf -o /dev/null -X POST "$0/sandboxes/$id/processes" -H "x-brimble-key: $1" \
	-H "content-type: application/json" -d "{\"cmd\":\"while :; do echo tick @; sleep 1; done\"}" && echo "$id"' "$URL" "$KEY" >"$WORK/rt-rss-ids" || true
rt_held=$(wc -l <"$WORK/rt-rss-ids")
sleep 5
rt_rss1=$(rt_rss)
xargs -P 2 -I@ curl -sf -o /dev/null -X DELETE "$URL/sandboxes/@" -H "x-brimble-key: $KEY" <"$WORK/rt-rss-ids" || true

printf '%-44s %12s %12s %8s  %s\n' "exec true p50 (ms) vs docker exec" "$rt_e_api" "$rt_e_dk" "$(ratio "$rt_e_api" "$rt_e_dk")" "<= 10 ms, <= 0.11"
printf '%-44s %12s %12s %8s  %s\n' "100 sequential echo (ms) vs docker exec" "$rt_seq_api" "$rt_seq_dk" "$(ratio "$rt_seq_api" "$rt_seq_dk")" "(info)"
printf '%-44s %12s %12s %8s  %s\n' "first stream frame p50 (ms) vs exec true" "$rt_t_api" "$rt_e_api" "$(ratio "$rt_t_api" "$rt_e_api")" "<= exec + 5 ms"
printf '%-44s %12s %12s %8s  %s\n' "upload 50 MiB (MB/s) PUT vs docker cp" "$rt_u_api" "$rt_u_dk" "$(ratio "$rt_u_api" "$rt_u_dk")" ">= 2"
printf '%-44s %12s %12s %8s  %s\n' "download 50 MiB (MB/s) GET vs docker cp" "$rt_d_api" "$rt_d_dk" "$(ratio "$rt_d_api" "$rt_d_dk")" ">= 2"
printf '%-44s %12s %12s %8s  %s\n' "download 50 MiB to a file (MB/s) vs cp" "$rt_df_api" "$rt_df_dk" "$(ratio "$rt_df_api" "$rt_df_dk")" "(info)"
printf '%-44s %12s %12s %8s  %s\n' "controld RSS (MB), $rt_held printing sandboxes vs 0" "$rt_rss1" "$rt_rss0" "$(ratio "$rt_rss1" "$rt_rss0")" "bounded (info)"
printf '%-44s %12s %12s %8s  %s\n' "upload 50 MiB (MB/s) PUT vs exec -i cat" "$rt_u_api" "$rt_u_ex" "$(ratio "$rt_u_api" "$rt_u_ex")" "~1 (info)"
printf '%-44s %12s %12s %8s  %s\n' "download 50 MiB (MB/s) GET vs exec cat" "$rt_d_api" "$rt_d_ex" "$(ratio "$rt_d_api" "$rt_d_ex")" "~1 (info)"
unset rt_n rt_rss0 rt_rss1 rt_held rt_seq_api rt_seq_dk rt_runs rt_runs_f rt_id rt_ctr rt_mib rt_sum rt_e_api rt_e_dk rt_t_api rt_t_dk rt_u_api rt_u_dk rt_d_api rt_d_dk rt_u_ex rt_d_ex rt_df_api rt_df_dk s t0 t1
