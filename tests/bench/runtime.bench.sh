# runtime.bench.sh — sourced by tests/bench/run.sh (URL, KEY, B, WORK, IMG, N and the
# helpers ms, pct, ratio are set there). Runtime operations through the API against
# the same operation done with the docker CLI on the very same container, interleaved
# run by run so both sides see the same machine state.
#
# Rows: exec round trip of `true`; time to the first streamed frame; upload and
# download MB/s of a 50 MiB file, against docker cp (which writes the container's
# layer from the host, outside gVisor) and against `docker exec -i ... cat` (the
# transport controld itself uses, so that ratio is controld's own overhead).

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
rt_runs_f=$(( N < 3 ? N : 3 ))
head -c $((rt_mib * 1024 * 1024)) /dev/urandom >"$WORK/rt-50m.bin"
rt_sum=$(sha256sum <"$WORK/rt-50m.bin" | cut -d' ' -f1)
: >"$WORK/rt-up-api"; : >"$WORK/rt-up-docker"; : >"$WORK/rt-down-api"; : >"$WORK/rt-down-docker"
: >"$WORK/rt-up-exec"; : >"$WORK/rt-down-exec"
rt_mbps() { awk -v mib="$rt_mib" -v ms="$1" 'BEGIN { printf "%.1f\n", mib / (ms / 1000) }'; }
for _ in $(seq "$rt_runs_f"); do
	s=$(curl -sf -o /dev/null -w '%{time_total}' -X PUT "$URL/sandboxes/$rt_id/files/root/rt-50m.bin" -H "x-brimble-key: $KEY" \
		-H 'content-type: application/octet-stream' --data-binary @"$WORK/rt-50m.bin")
	rt_mbps "$(awk -v s="$s" 'BEGIN {print s * 1000}')" >>"$WORK/rt-up-api"
	rm -f "$WORK/rt-down.bin"
	s=$(curl -sf -o "$WORK/rt-down.bin" -w '%{time_total}' "$URL/sandboxes/$rt_id/files/root/rt-50m.bin" -H "x-brimble-key: $KEY")
	rt_mbps "$(awk -v s="$s" 'BEGIN {print s * 1000}')" >>"$WORK/rt-down-api"
	[ "$(sha256sum <"$WORK/rt-down.bin" | cut -d' ' -f1)" = "$rt_sum" ] || echo "runtime bench: GET returned different bytes" >&2

	t0=$EPOCHREALTIME; docker cp -q "$WORK/rt-50m.bin" "$rt_ctr:/root/rt-cp.bin"; t1=$EPOCHREALTIME
	rt_mbps "$(rt_ms "$t0" "$t1")" >>"$WORK/rt-up-docker"
	rm -f "$WORK/rt-cp-down.bin"
	t0=$EPOCHREALTIME; docker cp -q "$rt_ctr:/root/rt-cp.bin" "$WORK/rt-cp-down.bin"; t1=$EPOCHREALTIME
	rt_mbps "$(rt_ms "$t0" "$t1")" >>"$WORK/rt-down-docker"

	# The same transport controld uses (an exec with a byte stream), without controld.
	t0=$EPOCHREALTIME; docker exec -i "$rt_ctr" sh -c 'cat > /root/rt-ex.bin' <"$WORK/rt-50m.bin"; t1=$EPOCHREALTIME
	rt_mbps "$(rt_ms "$t0" "$t1")" >>"$WORK/rt-up-exec"
	t0=$EPOCHREALTIME; docker exec "$rt_ctr" cat /root/rt-ex.bin >"$WORK/rt-cp-down.bin"; t1=$EPOCHREALTIME
	rt_mbps "$(rt_ms "$t0" "$t1")" >>"$WORK/rt-down-exec"
done
rt_u_api=$(rt_p50 "$WORK/rt-up-api"); rt_u_dk=$(rt_p50 "$WORK/rt-up-docker")
rt_d_api=$(rt_p50 "$WORK/rt-down-api"); rt_d_dk=$(rt_p50 "$WORK/rt-down-docker")
rt_u_ex=$(rt_p50 "$WORK/rt-up-exec"); rt_d_ex=$(rt_p50 "$WORK/rt-down-exec")
rm -f "$WORK/rt-50m.bin" "$WORK/rt-down.bin" "$WORK/rt-cp-down.bin"
curl -sf -X DELETE "$URL/sandboxes/$rt_id" -H "x-brimble-key: $KEY" >/dev/null || true

printf '%-44s %12s %12s %8s  %s\n' "exec true p50 (ms) vs docker exec" "$rt_e_api" "$rt_e_dk" "$(ratio "$rt_e_api" "$rt_e_dk")" "<= 1.2"
printf '%-44s %12s %12s %8s  %s\n' "first stream frame p50 (ms) vs docker exec" "$rt_t_api" "$rt_t_dk" "$(ratio "$rt_t_api" "$rt_t_dk")" "info"
printf '%-44s %12s %12s %8s  %s\n' "upload 50 MiB (MB/s) PUT vs docker cp" "$rt_u_api" "$rt_u_dk" "$(ratio "$rt_u_api" "$rt_u_dk")" "~1 (info)"
printf '%-44s %12s %12s %8s  %s\n' "download 50 MiB (MB/s) GET vs docker cp" "$rt_d_api" "$rt_d_dk" "$(ratio "$rt_d_api" "$rt_d_dk")" "~1 (info)"
printf '%-44s %12s %12s %8s  %s\n' "upload 50 MiB (MB/s) PUT vs exec -i cat" "$rt_u_api" "$rt_u_ex" "$(ratio "$rt_u_api" "$rt_u_ex")" "~1 (info)"
printf '%-44s %12s %12s %8s  %s\n' "download 50 MiB (MB/s) GET vs exec cat" "$rt_d_api" "$rt_d_ex" "$(ratio "$rt_d_api" "$rt_d_ex")" "~1 (info)"
unset rt_runs rt_runs_f rt_id rt_ctr rt_mib rt_sum rt_e_api rt_e_dk rt_t_api rt_t_dk rt_u_api rt_u_dk rt_d_api rt_d_dk rt_u_ex rt_d_ex s t0 t1
