# nomad.bench.sh — sourced by tests/bench/run.sh (URL, KEY, B, WORK, IMG, N and the helpers
# ms, pct, ratio, ctld_* are set there). The Nomad driver beside the Docker driver: a second controld on
# the Nomad driver against the Nomad stand-in (tests/nomad), which places real containers on
# the same dockerd with the same runtime, interleaved run by run with the Docker driver's
# controld of run.sh. What the ratio shows is the driver's own cost: register, blocking waits
# for the allocation, and exec through the node's relay (a nodeagent of the bench's own with
# [relay] over TLS, as production runs it) instead of the local socket. The relay row is also
# measured against `docker exec` on the very same container.

nb_dir=$WORK/nomad
nb_port=18125
nb_sport=18126
nb_url=http://127.0.0.1:$nb_port
NB_CPID=""
NB_SPID=""
NB_APID=""
mkdir -p "$nb_dir"
nb_cleanup() {
	[ -z "${BENCH_DEBUG:-}" ] || tail -n 30 "$WORK/nomad/controld.log" >&2
	set +e
	[ -n "${NB_APID:-}" ] && kill "$NB_APID" 2>/dev/null && wait "$NB_APID" 2>/dev/null
	if [ -n "${NB_CPID:-}" ] && [ -f "${nb_dir:-/nonexistent}/controld.conf" ]; then
		ctld_destroy_all "$nb_dir/controld.conf"
	fi
	[ -n "${NB_CPID:-}" ] && kill "$NB_CPID" 2>/dev/null && wait "$NB_CPID" 2>/dev/null
	[ -n "${NB_SPID:-}" ] && kill "$NB_SPID" 2>/dev/null && wait "$NB_SPID" 2>/dev/null
	NB_CPID="" NB_SPID="" NB_APID=""
}
trap 'nb_cleanup; cleanup' EXIT

if [ ! -x "$B/tests/nomad/nomad-standin" ]; then
	echo "nomad bench: $B/tests/nomad/nomad-standin is not built; skipped" >&2
else
	# --volumes-enabled: as packaging/nomad/client-sandbox.hcl (the agent binary is a host-path mount)
	"$B/tests/nomad/nomad-standin" --listen "127.0.0.1:$nb_sport" --volumes-enabled \
		--net-map cni/sandbox-open=paddock-sandbox,cni/sandbox-restricted=paddock-restricted,cni/sandbox-no-egress=none \
		>"$nb_dir/standin.log" 2>&1 &
	NB_SPID=$!
	for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$nb_sport/v1/nodes" && break; sleep 0.1; done
	# The node's relay, with TLS: a CA and a certificate for 127.0.0.1 made here.
	nb_rport=18127
	head -c 32 /dev/urandom | base64 >"$nb_dir/relay.secret"
	printf 'subjectAltName=IP:127.0.0.1\n' >"$nb_dir/relay.ext"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$nb_dir/ca.key" \
		-out "$nb_dir/ca.pem" -days 2 -subj /CN=bench-ca 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$nb_dir/relay.key" \
		-out "$nb_dir/relay.csr" -subj /CN=bench-relay 2>/dev/null
	openssl x509 -req -in "$nb_dir/relay.csr" -CA "$nb_dir/ca.pem" -CAkey "$nb_dir/ca.key" -CAcreateserial \
		-out "$nb_dir/relay.pem" -days 2 -extfile "$nb_dir/relay.ext" 2>/dev/null
	cat >"$nb_dir/relay.conf" <<CONF
[agent]
node_id = bench-relay-$$
log_level = warning
[amqp]
url = amqp://guest:guest@127.0.0.1:5672
exchange = paddock.bench-relay-$$
[relay]
listen = 127.0.0.1:$nb_rport
secret_file = $nb_dir/relay.secret
docker_root = $(docker info -f '{{.DockerRootDir}}')
tls_cert = $nb_dir/relay.pem
tls_key = $nb_dir/relay.key
CONF
	"$B/nodeagent" -d -f "$nb_dir/relay.conf" 2>"$nb_dir/relay.log" &
	NB_APID=$!
	nb_init=$B/paddock-init.static
	[ -x "$nb_init" ] || nb_init=$B/paddock-init
	{
		ctld_conf "$nb_port" "$nb_dir/controld.db"
		printf '[scheduler]\ndriver = nomad\n[nomad]\naddress = http://127.0.0.1:%s\nruntime_network = runsc-net\n' "$nb_sport"
		printf 'agent_binary = %s\nrelay_secret_file = %s\nrelay_port = %s\nrelay_tls_ca = %s\n' "$(realpath "$nb_init")" \
			"$nb_dir/relay.secret" "$nb_rport" "$nb_dir/ca.pem"
	} >"$nb_dir/controld.conf"
	ctld_up "$nb_dir/controld.conf" "$nb_dir/controld.log" "$nb_url"
	NB_CPID=$CTLD_UP_PID
	nb_key=$(ctld_key "$nb_dir/controld.conf" bench)

	nb_create() { curl -sf -X POST "$1/sandboxes" -H "x-brimble-key: $2" -H 'content-type: application/json' -d '{}' | jq -r .data.id; }
	nb_delete() { curl -sf -X DELETE "$1/sandboxes/$3" -H "x-brimble-key: $2" >/dev/null || true; }

	# 1. create-to-ready, Nomad driver vs Docker driver, interleaved.
	: >"$WORK/nb-create-nomad"; : >"$WORK/nb-create-docker"
	for _ in $(seq "$N"); do
		t0=$(ms); id=$(nb_create "$nb_url" "$nb_key"); t1=$(ms)
		echo $((t1 - t0)) >>"$WORK/nb-create-nomad"; nb_delete "$nb_url" "$nb_key" "$id"
		t0=$(ms); id=$(nb_create "$URL" "$KEY"); t1=$(ms)
		echo $((t1 - t0)) >>"$WORK/nb-create-docker"; nb_delete "$URL" "$KEY" "$id"
	done
	nb_c_n=$(pct 50 <"$WORK/nb-create-nomad"); nb_c_d=$(pct 50 <"$WORK/nb-create-docker")

	# 2. exec `true` round trip on one warm sandbox per driver.
	nb_idn=$(nb_create "$nb_url" "$nb_key"); nb_idd=$(nb_create "$URL" "$KEY")
	nb_exec() { curl -sf -o /dev/null -w '%{time_total}\n' -X POST "$1/sandboxes/$3/exec" -H "x-brimble-key: $2" \
		-H 'content-type: application/json' -d '{"cmd":"true"}'; }
	nb_exec "$nb_url" "$nb_key" "$nb_idn" >/dev/null; nb_exec "$URL" "$KEY" "$nb_idd" >/dev/null
	# 3. the relay against `docker exec` on the same (Nomad-placed) container, pair by pair as
	# the runtime part does (each sandbox sees a pause between its calls, as an agent's
	# commands do: the spare shell is ready; back to back is the runtime part's sequential row).
	nb_ctr=$(docker ps -q --filter "label=com.hashicorp.nomad.job_id=sandbox-$nb_idn" | head -n1)
	: >"$WORK/nb-exec-nomad"; : >"$WORK/nb-exec-docker"; : >"$WORK/nb-relay-dk"
	for _ in $(seq $((N * 3))); do
		nb_exec "$nb_url" "$nb_key" "$nb_idn" | awk '{printf "%.1f\n", $1 * 1000}' >>"$WORK/nb-exec-nomad"
		t0=$EPOCHREALTIME; docker exec "$nb_ctr" true; t1=$EPOCHREALTIME
		awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", (b - a) * 1000 }' >>"$WORK/nb-relay-dk"
		nb_exec "$URL" "$KEY" "$nb_idd" | awk '{printf "%.1f\n", $1 * 1000}' >>"$WORK/nb-exec-docker"
	done
	nb_e_n=$(pct 50 <"$WORK/nb-exec-nomad"); nb_e_d=$(pct 50 <"$WORK/nb-exec-docker")
	nb_r_dk=$(pct 50 <"$WORK/nb-relay-dk")
	nb_delete "$nb_url" "$nb_key" "$nb_idn"; nb_delete "$URL" "$KEY" "$nb_idd"
	nb_cleanup

	printf '%-44s %12s %12s %8s  %s\n' "create-to-ready p50 (ms) nomad vs docker drv" "$nb_c_n" "$nb_c_d" "$(ratio "$nb_c_n" "$nb_c_d")" "info (stand-in)"
	printf '%-44s %12s %12s %8s  %s\n' "exec true p50 (ms) nomad vs docker driver" "$nb_e_n" "$nb_e_d" "$(ratio "$nb_e_n" "$nb_e_d")" "info (stand-in, TLS relay)"
	printf '%-44s %12s %12s %8s  %s\n' "exec true p50 (ms) via relay vs docker exec" "$nb_e_n" "$nb_r_dk" "$(ratio "$nb_e_n" "$nb_r_dk")" "goal <= 15 ms"
fi
unset nb_port nb_sport nb_rport nb_url nb_key nb_idn nb_idd nb_c_n nb_c_d nb_e_n nb_e_d nb_r_dk nb_ctr nb_init
