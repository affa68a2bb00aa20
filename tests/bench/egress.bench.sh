# egress.bench.sh — sourced by tests/bench/run.sh (B, WORK, IMG, N and the helpers ms,
# pct, ratio, ctld_* are set there).
#
# 1. One egress apply with 1, 100 and 1000 sandboxes on the node against `nft -f` of
#    the equivalent change, interleaved in one run, in a network namespace of the
#    bench's own (tests/bench/egress-apply.c says what each side does). "new" is the
#    policy of a sandbox arriving; "tighten" replaces an allowlist and, on our side,
#    also sweeps conntrack for the connections the new policy forbids.
# 2. create-to-ready of a restricted sandbox against an open one, interleaved, through
#    a controld of its own with a node agent of its own (own exchange, node id, nft
#    table, bridge and docker networks), so the restricted side pays what it really
#    costs: the agent's confirmation, the sweep, and controld writing /etc/hosts.

eg_k=$((N * 20))
[ "$eg_k" -lt 200 ] && eg_k=200
for eg_n in 1 100 1000; do
	read -r _ eg_o50 eg_o99 eg_b50 eg_b99 < <("$B/tests/bench/egress-apply" new "$eg_n" "$eg_k")
	printf '%-44s %12s %12s %8s  %s\n' "egress apply p50 (ms), $eg_n on node, vs nft -f" "$eg_o50" "$eg_b50" "$(ratio "$eg_o50" "$eg_b50")" "<= 1"
	printf '%-44s %12s %12s %8s  %s\n' "egress apply p99 (ms), $eg_n on node, vs nft -f" "$eg_o99" "$eg_b99" "$(ratio "$eg_o99" "$eg_b99")" "<= 1"
done
read -r _ eg_o50 eg_o99 eg_b50 eg_b99 < <("$B/tests/bench/egress-apply" tighten 100 "$eg_k")
printf '%-44s %12s %12s %8s  %s\n' "egress tighten+ct sweep p50 (ms), 100, nft -f" "$eg_o50" "$eg_b50" "$(ratio "$eg_o50" "$eg_b50")" "info"

# 2. create-to-ready, restricted vs open, with a real agent.
if tests/env/services.sh start --record "$STARTED" rabbitmq >/dev/null 2>&1; then
	eg_id=$$
	eg_node=bench-$eg_id; eg_x=paddock.bench-$eg_id; eg_tab=pbench$eg_id; eg_br=pdkbeg0
	cat >"$WORK/eg-agent.conf" <<CONF
[agent]
node_id = $eg_node
log_level = warning
[amqp]
url = amqp://guest:guest@127.0.0.1:5672
exchange = $eg_x
[egress]
enable = true
table = $eg_tab
bridges = $eg_br
CONF
	"$B/nodeagent" -d -f "$WORK/eg-agent.conf" 2>"$WORK/eg-agent.log" &
	eg_agent=$!
	{
		ctld_conf 18125 "$WORK/eg-controld.db"
		cat <<CONF
[docker]
network = paddock-bench-eg
subnet = 169.254.68.0/24
gateway = 169.254.68.1
bridge = $eg_br
network_internal = paddock-bench-eg-int
subnet_internal = 169.254.69.0/24
node_id = $eg_node
[amqp]
url = amqp://guest:guest@127.0.0.1:5672
exchange = $eg_x
CONF
	} >"$WORK/eg-controld.conf"
	eg_url=http://127.0.0.1:18125
	ctld_up "$WORK/eg-controld.conf" "$WORK/eg-controld.log" "$eg_url"
	eg_ctl=$CTLD_UP_PID
	eg_key=$(ctld_key "$WORK/eg-controld.conf" bench-eg)
	: >"$WORK/eg-open.ms"; : >"$WORK/eg-restr.ms"
	eg_create() {
		local t0 t1 id
		t0=$(ms)
		id=$(curl -sf -X POST "$eg_url/sandboxes" -H "x-brimble-key: $eg_key" -H 'content-type: application/json' -d "$1" | jq -r .data.id)
		t1=$(ms)
		[ -n "$id" ] && [ "$id" != null ] && echo $((t1 - t0)) >>"$2"
		curl -sf -X DELETE "$eg_url/sandboxes/$id" -H "x-brimble-key: $eg_key" >/dev/null || true
	}
	for _ in $(seq "$N"); do
		eg_create '{}' "$WORK/eg-open.ms"
		eg_create '{"egress":{"mode":"restricted","allow":["198.51.100.7","203.0.113.0/24"]}}' "$WORK/eg-restr.ms"
	done
	eg_o50=$(pct 50 <"$WORK/eg-open.ms"); eg_r50=$(pct 50 <"$WORK/eg-restr.ms")
	eg_o95=$(pct 95 <"$WORK/eg-open.ms"); eg_r95=$(pct 95 <"$WORK/eg-restr.ms")
	printf '%-44s %12s %12s %8s  %s\n' "create-to-ready p50 (ms) restricted vs open" "$eg_r50" "$eg_o50" "$(ratio "$eg_r50" "$eg_o50")" "<= 1.2"
	printf '%-44s %12s %12s %8s  %s\n' "create-to-ready p95 (ms) restricted vs open" "$eg_r95" "$eg_o95" "$(ratio "$eg_r95" "$eg_o95")" "<= 1.2"
	ctld_destroy_all "$WORK/eg-controld.conf"
	kill "$eg_ctl" 2>/dev/null; wait "$eg_ctl" 2>/dev/null
	kill "$eg_agent" 2>/dev/null; wait "$eg_agent" 2>/dev/null
	nft delete table inet "$eg_tab" 2>/dev/null
	nft delete table bridge "$eg_tab" 2>/dev/null
	docker network rm paddock-bench-eg paddock-bench-eg-int >/dev/null 2>&1
else
	echo "egress bench: RabbitMQ could not be started; create-to-ready restricted vs open skipped" >&2
fi
unset eg_k eg_n eg_o50 eg_o99 eg_b50 eg_b99 eg_id eg_node eg_x eg_tab eg_br eg_agent eg_ctl eg_url eg_key eg_r50 eg_r95 eg_o95
