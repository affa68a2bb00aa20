#!/usr/bin/env bash
# make bench: Paddock against baselines measured side by side in the same run.
# Prints one table; ratios are ours / baseline (lower is better for latency,
# higher is better for throughput). Goals from the issues are shown beside them.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${PADDOCK_BUILD:-build}
STATE=${PADDOCK_STATE:-/var/tmp/paddock-dev}
N=${BENCH_N:-10}
DUR=${BENCH_SECONDS:-5}
PORT=18123
BPORT=18124
IMG=${PADDOCK_PY_IMAGE:-paddock/python-3.11:local}
WORK=$(mktemp -d /tmp/paddock-bench.XXXXXX)
STARTED=$WORK/started
CTL_PID=""
BASE_PID=""

# The controlds of the bench (this one and those of the *.bench.sh parts), all alike but for
# what a part appends to the config.
# ctld_conf PORT DB: the base config on stdout.
ctld_conf() {
	cat <<CONF
[server]
listen = 127.0.0.1:$1
log_level = warning
[controld]
user =
[store]
path = $2
[defaults]
template = python-3.11
[region "local"]
id = 6a06df21cc6bef51342e199e
name = local
[plan "default"]
max_concurrent = 1000
[template "python-3.11"]
image = $IMG
CONF
}
# ctld_up CONF LOG URL: starts controld -d -f CONF (stderr to LOG), pid in CTLD_UP_PID; waits up
# to 10 s for URL/healthz.
ctld_up() {
	"$B/controld" -d -f "$1" 2>"$2" &
	CTLD_UP_PID=$!
	for _ in $(seq 100); do curl -sf "$3/healthz" >/dev/null && break; sleep 0.1; done
}
# ctld_key CONF NAME: a new account NAME and a key for it (printed).
ctld_key() {
	local acc
	acc=$("$B/controld" admin -f "$1" account create "$2")
	"$B/controld" admin -f "$1" key issue "$acc" 2>/dev/null
}
# ctld_destroy_all CONF: destroys every sandbox the controld of CONF still has.
ctld_destroy_all() {
	"$B/controld" admin -f "$1" sandbox list 2>/dev/null | awk '$3 != "destroyed" {print $1}' |
		while read -r id; do "$B/controld" admin -f "$1" sandbox destroy "$id" >/dev/null 2>&1; done
}

cleanup() {
	set +e
	[ -n "$CTL_PID" ] && kill "$CTL_PID" 2>/dev/null && wait "$CTL_PID" 2>/dev/null
	[ -n "$BASE_PID" ] && kill "$BASE_PID" 2>/dev/null && wait "$BASE_PID" 2>/dev/null
	[ -f "$WORK/controld.conf" ] && ctld_destroy_all "$WORK/controld.conf"
	# A part's own controld (pool.bench.sh) and the warm pool members it leaves by design.
	[ -n "${PL_PID:-}" ] && kill "$PL_PID" 2>/dev/null && wait "$PL_PID" 2>/dev/null
	[ -f "$WORK/pool.conf" ] && ctld_destroy_all "$WORK/pool.conf"
	[ -f "$WORK/pool.db" ] && sqlite3 "$WORK/pool.db" 'SELECT id FROM pool_members' 2>/dev/null | while read -r id; do
		docker rm -f "paddock-$id" >/dev/null 2>&1
		docker volume rm -f "paddock-init-$id" >/dev/null 2>&1
	done
	docker ps -aq --filter label=paddock.bench=1 | xargs -r docker rm -f >/dev/null 2>&1
	[ -f "$STARTED" ] && tests/env/services.sh stop --started-by "$STARTED" >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT

tests/env/services.sh start --record "$STARTED" docker >/dev/null
tests/env/images.sh >/dev/null

URL=http://127.0.0.1:$PORT
ctld_conf "$PORT" "$WORK/controld.db" >"$WORK/controld.conf"
ctld_up "$WORK/controld.conf" "$WORK/controld.log" "$URL"
CTL_PID=$CTLD_UP_PID
KEY=$(ctld_key "$WORK/controld.conf" bench)

ms() { date +%s%3N; }
pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int((NR-1)*p/100)+1; print a[i]}'; }

# 1. create-to-ready through the API vs `docker run -d` of the same image and runtime, interleaved.
: >"$WORK/api.ms"; : >"$WORK/docker.ms"
for i in $(seq "$N"); do
	t0=$(ms)
	id=$(curl -sf -X POST "$URL/sandboxes" -H "x-brimble-key: $KEY" -H 'content-type: application/json' -d '{}' | jq -r .data.id)
	t1=$(ms); echo $((t1 - t0)) >>"$WORK/api.ms"
	curl -sf -X DELETE "$URL/sandboxes/$id" -H "x-brimble-key: $KEY" >/dev/null
	t0=$(ms)
	cid=$(docker run -d --label paddock.bench=1 --runtime runsc-hostnet --network paddock-sandbox --cap-drop ALL --cap-add ALL \
		--security-opt no-new-privileges --pids-limit 4096 -m 640m --memory-reservation 512m "$IMG" tail -f /dev/null)
	t1=$(ms); echo $((t1 - t0)) >>"$WORK/docker.ms"
	docker rm -f "$cid" >/dev/null
done
a50=$(pct 50 <"$WORK/api.ms"); a95=$(pct 95 <"$WORK/api.ms")
d50=$(pct 50 <"$WORK/docker.ms"); d95=$(pct 95 <"$WORK/docker.ms")

# 2. GET /sandboxes/{id} at 64 connections vs a minimal libmicrohttpd server.
id=$(curl -sf -X POST "$URL/sandboxes" -H "x-brimble-key: $KEY" -H 'content-type: application/json' -d '{}' | jq -r .data.id)
"$B/tests/bench/mhd-minimal" "$BPORT" &
BASE_PID=$!
sleep 0.3
rps() { wrk -t2 -c64 -d"${DUR}s" "$@" 2>/dev/null | awk '/Requests\/sec/ {print int($2)}'; }
ours=$(rps -H "x-brimble-key: $KEY" "$URL/sandboxes/$id")
base=$(rps "http://127.0.0.1:$BPORT/sandboxes/$id")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.2f", a / b }'; }
printf '\n%-44s %12s %12s %8s  %s\n' "benchmark" "paddock" "baseline" "ratio" "goal"
printf '%-44s %12s %12s %8s  %s\n' "create-to-ready p50 (ms) vs docker run -d" "$a50" "$d50" "$(ratio "$a50" "$d50")" "<= 1.3"
printf '%-44s %12s %12s %8s  %s\n' "create-to-ready p95 (ms) vs docker run -d" "$a95" "$d95" "$(ratio "$a95" "$d95")" "<= 1.3"
printf '%-44s %12s %12s %8s  %s\n' "GET /sandboxes/{id} req/s @64 vs bare MHD" "$ours" "$base" "$(ratio "$ours" "$base")" ">= 0.5"
# BENCH_PARTS="runtime egress": only those parts (tests/bench/<part>.bench.sh); default all.
for extra in tests/bench/*.bench.sh; do
	[ -e "$extra" ] || continue
	part=$(basename "$extra" .bench.sh)
	[[ -z ${BENCH_PARTS:-} || " $BENCH_PARTS " == *" $part "* ]] || continue
	URL="$URL" KEY="$KEY" B="$B" WORK="$WORK" IMG="$IMG" N="$N" source "$extra"
done
echo
echo "(N=$N creates each, ${DUR}s per throughput run, image $IMG, runtime runsc)"
# The E2B SDK the tests pin (Makefile E2B_SDK) against the newest npm has: users install the
# newest, so a newer one is a reason to test it and move the pin.
E2B_PIN=$(sed -n 's/^E2B_SDK := e2b@//p' Makefile)
E2B_NPM=$(timeout 20 npm view e2b version 2>/dev/null || echo "unknown (npm did not answer)")
if [[ $E2B_NPM == "$E2B_PIN" ]]; then
	echo "(E2B SDK: tests pin e2b@$E2B_PIN, the newest on npm)"
else
	echo "(E2B SDK: tests pin e2b@$E2B_PIN; npm's newest is $E2B_NPM: test it and move the pin in the Makefile)"
fi
