# snapshot.bench.sh — sourced by tests/bench/run.sh (URL, KEY, B, WORK, IMG, N and the helpers
# ms, pct, ratio, ctld_* are set there). Snapshots need a node agent and RabbitMQ, so this part runs
# its own controld (with [amqp]) and nodeagent on a node id and exchange of its own, and
# stops both at the end.
#
# Rows: snapshot wall time (POST to ready: commit, push, verify, remove in the agent) against
# `docker commit && docker push && docker rmi` by the CLI on the very same container, run by
# run; restore create-to-ready (fromSnapshot, the image pulled from the registry) against a
# template create, both through the API.

sn_runs=$((N / 2))
[ "$sn_runs" -lt 3 ] && sn_runs=3
SN_PORT=18125
SN_NODE=bench-snap-$$
SN_EX=paddock.bench-snap-$$
SN_REPO=paddock-bench/snap$$
SN_REG=127.0.0.1:5000
SN_CTL=""
SN_AGENT=""

sn_cleanup() {
	set +e
	if [ -n "$SN_CTL" ]; then
		ctld_destroy_all "$WORK/snap-controld.conf"
		kill "$SN_CTL" 2>/dev/null && wait "$SN_CTL" 2>/dev/null
	fi
	[ -n "$SN_AGENT" ] && kill "$SN_AGENT" 2>/dev/null && wait "$SN_AGENT" 2>/dev/null
	rabbitmqctl -q delete_queue "$SN_EX.snapshots.$SN_NODE" >/dev/null 2>&1
	rabbitmqctl -q delete_queue "$SN_EX.snapshot-events" >/dev/null 2>&1
	SN_CTL=""; SN_AGENT=""
}
trap 'sn_cleanup; cleanup' EXIT

if ! curl -sf --max-time 2 -o /dev/null "http://$SN_REG/v2/" || ! (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
	printf '%-44s %12s %12s %8s  %s\n' "snapshot rows" "skipped" "-" "-" "(no registry or RabbitMQ)"
	return 0
fi

cat >"$WORK/snap-agent.conf" <<CONF
[agent]
node_id = $SN_NODE
log_level = warning
[amqp]
url = amqp://guest:guest@127.0.0.1:5672/
exchange = $SN_EX
[snapshot]
registry = $SN_REG
repository = $SN_REPO
disk_floor = 64M
CONF
"$B/nodeagent" -d -f "$WORK/snap-agent.conf" 2>"$WORK/snap-agent.log" &
SN_AGENT=$!
{
	ctld_conf "$SN_PORT" "$WORK/snap-controld.db"
	cat <<CONF
[docker]
node_id = $SN_NODE
[amqp]
url = amqp://guest:guest@127.0.0.1:5672
exchange = $SN_EX
[snapshots]
registry = $SN_REG
repository = $SN_REPO
tick = 200ms
CONF
} >"$WORK/snap-controld.conf"
SN_URL=http://127.0.0.1:$SN_PORT
ctld_up "$WORK/snap-controld.conf" "$WORK/snap-controld.log" "$SN_URL"
SN_CTL=$CTLD_UP_PID
SN_KEY=$(ctld_key "$WORK/snap-controld.conf" bench)
sn_api() { curl -sf -X "$1" "$SN_URL$2" -H "x-brimble-key: $SN_KEY" -H 'content-type: application/json' ${3:+-d "$3"}; }
DENY='"egress":{"mode":"deny_all"}'

sn_id=$(sn_api POST /sandboxes "{$DENY}" | jq -r .data.id)
sn_ctr=paddock-$sn_id
docker exec "$sn_ctr" sh -c 'head -c 20000000 /dev/urandom > /root/blob' >/dev/null

# Waits until snapshot $1 is no longer creating; prints its status. One curl per poll and
# no jq (the fields come in a fixed order, id before status), every 10 ms: the CLI side is
# timed to the millisecond, so a coarse poll here would add its granularity to our side.
sn_wait() {
	local b re="\"id\":\"$1\"[^}]*\"status\":\"([a-z]+)\""
	for _ in $(seq 6000); do
		b=$(sn_api GET "/sandboxes/$sn_id/snapshots?limit=100") || b=""
		[[ $b =~ $re ]] && [ "${BASH_REMATCH[1]}" != creating ] && { echo "${BASH_REMATCH[1]}"; return; }
		sleep 0.01
	done
	echo timeout
}

# Warm-up, not counted: the first push of an image carries its template's base layers.
sn_last=$(sn_api POST "/sandboxes/$sn_id/snapshots" '{"name":"warm-up"}' | jq -r .data.id)
sn_wait "$sn_last" >/dev/null
: >"$WORK/snap.ms"; : >"$WORK/cli.ms"
for i in $(seq "$sn_runs"); do
	t0=$(ms)
	sid=$(sn_api POST "/sandboxes/$sn_id/snapshots" "{\"name\":\"bench-$i\"}" | jq -r .data.id)
	st=$(sn_wait "$sid")
	t1=$(ms)
	[ "$st" = ready ] && echo $((t1 - t0)) >>"$WORK/snap.ms"
	[ -n "$sn_last" ] && sn_api DELETE "/sandboxes/snapshots/$sn_last" >/dev/null
	sn_last=$sid
	ref=$SN_REG/$SN_REPO:cli-$i
	t0=$(ms)
	docker commit -p "$sn_ctr" "$ref" >/dev/null && docker push "$ref" >/dev/null && docker rmi "$ref" >/dev/null
	t1=$(ms); echo $((t1 - t0)) >>"$WORK/cli.ms"
done
s50=$(pct 50 <"$WORK/snap.ms"); c50=$(pct 50 <"$WORK/cli.ms")

# Restore (the image is not on the node: each run pulls it) vs a template create.
: >"$WORK/restore.ms"; : >"$WORK/tcreate.ms"
for i in $(seq "$sn_runs"); do
	docker rmi "$SN_REG/$SN_REPO:$sn_last" >/dev/null 2>&1 || true
	t0=$(ms)
	rid=$(sn_api POST /sandboxes "{\"fromSnapshot\":\"$sn_last\",$DENY}" | jq -r .data.id)
	t1=$(ms); [ "$rid" != null ] && echo $((t1 - t0)) >>"$WORK/restore.ms"
	sn_api DELETE "/sandboxes/$rid" >/dev/null
	t0=$(ms)
	tid=$(sn_api POST /sandboxes "{$DENY}" | jq -r .data.id)
	t1=$(ms); echo $((t1 - t0)) >>"$WORK/tcreate.ms"
	sn_api DELETE "/sandboxes/$tid" >/dev/null
done
r50=$(pct 50 <"$WORK/restore.ms"); t50=$(pct 50 <"$WORK/tcreate.ms")
sn_api DELETE "/sandboxes/snapshots/$sn_last" >/dev/null || true
# The CLI's pushes go the same way (manifests by digest, as controld deletes them).
for i in $(seq "$sn_runs"); do
	dg=$(curl -sfI -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
		"http://$SN_REG/v2/$SN_REPO/manifests/cli-$i" | awk -F': ' 'tolower($1) == "docker-content-digest" {print $2}' | tr -d '\r')
	[ -n "$dg" ] && curl -sf -X DELETE "http://$SN_REG/v2/$SN_REPO/manifests/$dg" >/dev/null || true
done

printf '%-44s %12s %12s %8s  %s\n' "snapshot wall p50 (ms) vs commit+push+rmi CLI" "$s50" "$c50" "$(ratio "$s50" "$c50")" "<= 1.1"
printf '%-44s %12s %12s %8s  %s\n' "restore create p50 (ms) vs template create" "$r50" "$t50" "$(ratio "$r50" "$t50")" "(pull included)"
sn_cleanup
trap cleanup EXIT
