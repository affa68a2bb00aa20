#!/usr/bin/env bash
# tests/env/up.sh — `make up`: a local Paddock on the embedded default (sqlite + docker driver).
#
# Starts docker, registry and rabbitmq if they are not running (those it started are appended
# to $PADDOCK_STATE/up.started, which `make down` stops), builds the template images, then
# starts $PADDOCK_BUILD/nodeagent (node id `local`, egress firewall on the Paddock bridge
# `paddock-sandbox`, pid in build/dev/nodeagent.pid) and $PADDOCK_BUILD/controld on
# 127.0.0.1:${PADDOCK_PORT:-8080} with build/dev/controld.conf (egress through that agent), makes
# sure a dev account and API key exist (build/dev/env) and prints how to use them.
# Run again, it starts whichever of the two is not running and leaves the running one, and the
# live sandboxes with their firewall rules, alone.
# NOMAD_ADDR=http://127.0.0.1:4646 [NOMAD_TOKEN=...] (make up NOMAD_ADDR=...): controld runs the
# Nomad driver against that Nomad instead, and the agent takes its node id from the local Nomad
# agent (node_id = nomad) and holds the CNI bridges of packaging/cni.
# shellcheck source=tests/env/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
script_init up

# await_start NAME PID LOG WHAT CHECK...: until CHECK succeeds; if NAME (pid PID, pid file
# $DEV/NAME.pid) exits first or 20 s pass, show LOG and die.
await_start() {
        local name=$1 pid=$2 log=$3 what=$4
        shift 4
        local deadline=$((SECONDS + 20))
        until "$@"; do
                if pid_gone "$pid"; then
                        show_log "$log"
                        rm -f "$DEV/$name.pid"
                        die "$name exited during startup"
                fi
                if ((SECONDS >= deadline)); then
                        show_log "$log"
                        die "$name did not $what within 20s (still running as pid $pid; 'make down' stops it)"
                fi
                sleep 0.1
        done
}

BUILD=${PADDOCK_BUILD:-build}
PORT=${PADDOCK_PORT:-8080}
PREVIEW_PORT=${PADDOCK_PREVIEW_PORT:-8081}
E2B_PORT=${PADDOCK_E2B_PORT:-3000}
URL=http://127.0.0.1:$PORT
CONF=$DEV/controld.conf
AGENT_CONF=$DEV/nodeagent.conf
CONTROLD=$BUILD/controld
[[ $CONTROLD == /* ]] || CONTROLD=$PADDOCK_ROOT/$CONTROLD
NODEAGENT=$BUILD/nodeagent
[[ $NODEAGENT == /* ]] || NODEAGENT=$PADDOCK_ROOT/$NODEAGENT
AMQP_URL=amqp://guest:guest@127.0.0.1:5672
# The Paddock bridge: controld creates the Docker network with this Linux bridge name, the
# agent's firewall holds every sandbox on it.
NETWORK=paddock-sandbox
BRIDGE=paddock-sandbox
NOMAD_ADDR=${NOMAD_ADDR:-}
NOMAD_TOKEN=${NOMAD_TOKEN:-}
if [[ -n $NOMAD_ADDR ]]; then
        [[ $NOMAD_ADDR == http://* || $NOMAD_ADDR == https://* ]] || die "NOMAD_ADDR must start with http:// or https:// (got '$NOMAD_ADDR')"
        curl -s --max-time 5 -o /dev/null ${NOMAD_TOKEN:+-H "X-Nomad-Token: $NOMAD_TOKEN"} "$NOMAD_ADDR/v1/status/leader" \
                || die "Nomad at $NOMAD_ADDR is not answering (GET /v1/status/leader)"
        AGENT_NODE=nomad
        # The bridges of the CNI networks Nomad puts sandboxes on (packaging/cni/*.conflist).
        AGENT_BRIDGES=$(sed -n 's/.*"bridge": *"\([^"]*\)".*/\1/p' packaging/cni/*.conflist | paste -sd, -)
        DRIVER=nomad
else
        AGENT_NODE=local
        AGENT_BRIDGES=$BRIDGE
        DRIVER=docker
fi

mkdir -p "$PADDOCK_STATE" "$DEV"
"$PADDOCK_ENV_DIR/services.sh" start --record "$PADDOCK_STATE/up.started" docker registry rabbitmq
# Several `make up` in a row append; keep each name once.
sort -u -o "$PADDOCK_STATE/up.started" "$PADDOCK_STATE/up.started"
"$PADDOCK_ENV_DIR/images.sh"

if [[ ! -x $CONTROLD || ! -x $NODEAGENT ]]; then
        say "services and images are ready, but the daemons are not built ($CONTROLD or $NODEAGENT is missing):"
        say "controld was NOT started. Build with 'make', then run 'make up' again. 'make down' stops the services."
        exit 0
fi

# ------------------------------------------------------------------ the Paddock bridge
# A network left by an older controld has a Docker-chosen bridge name the agent would not
# hold: replace it while nothing uses it.
if have_bridge=$(docker network inspect -f '{{index .Options "com.docker.network.bridge.name"}}' "$NETWORK" 2>/dev/null); then
        if [[ $have_bridge != "$BRIDGE" ]]; then
                if [[ -n $(docker network inspect -f '{{range .Containers}}{{.Name}} {{end}}' "$NETWORK") ]]; then
                        die "Docker network $NETWORK has bridge '${have_bridge:-br-<id>}', not $BRIDGE, and containers use it; remove them (docker rm -f) and run 'make up' again"
                fi
                say "recreating Docker network $NETWORK with the bridge name $BRIDGE"
                docker network rm "$NETWORK" >/dev/null
        fi
fi

# ------------------------------------------------------------------ nodeagent
if pid=$(daemon_pid nodeagent); then
        say "nodeagent already running (pid $pid): left as it is"
else
        rm -f "$DEV/nodeagent.pid"
        (umask 077
         # [proxy]: the egress proxy that puts secrets into requests to hosts with egress rules
         # (it verifies upstreams against this machine's system store).
         printf '[agent]\nnode_id = %s\n[amqp]\nurl = %s\nexchange = paddock.nodes\n[egress]\nenable = true\nbridges = %s\n[proxy]\nenable = true\n' \
                "$AGENT_NODE" "$AMQP_URL" "$AGENT_BRIDGES" >"$AGENT_CONF"
         if [[ $AGENT_NODE == nomad ]]; then
                printf '[nomad]\naddress = %s\ntoken = %s\n' "$NOMAD_ADDR" "$NOMAD_TOKEN" >>"$AGENT_CONF"
         fi)
        ALOG=$DEV/nodeagent.log
        touch "$ALOG"
        from=$(($(wc -l <"$ALOG") + 1))
        setsid nohup "$NODEAGENT" -d -f "$AGENT_CONF" </dev/null >>"$ALOG" 2>&1 &
        pid=$!
        echo "$pid" >"$DEV/nodeagent.pid"
        agent_consuming() { tail -n +"$from" "$ALOG" | grep -q "consuming node messages"; }
        await_start nodeagent "$pid" "$ALOG" "start consuming" agent_consuming
        say "nodeagent running (pid $pid, node $AGENT_NODE, egress on bridges $AGENT_BRIDGES), log $ALOG"
fi

# ------------------------------------------------------------------ controld
CONTROLD_RUNNING=0
if pid=$(daemon_pid controld); then
        say "controld already running (pid $pid): left as it is"
        CONTROLD_RUNNING=1
else
        rm -f "$DEV/controld.pid"
        if timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT" 2>/dev/null; then
                die "127.0.0.1:$PORT is already in use by something else ($(ss -Hltnp "sport = :$PORT" | awk '{print $NF}' | head -n1)); set PADDOCK_PORT to another port"
        fi
        if timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PREVIEW_PORT" 2>/dev/null; then
                die "127.0.0.1:$PREVIEW_PORT (preview URLs) is already in use by something else ($(ss -Hltnp "sport = :$PREVIEW_PORT" | awk '{print $NF}' | head -n1)); set PADDOCK_PREVIEW_PORT to another port"
        fi
        if timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$E2B_PORT" 2>/dev/null; then
                die "127.0.0.1:$E2B_PORT (E2B's API) is already in use by something else ($(ss -Hltnp "sport = :$E2B_PORT" | awk '{print $NF}' | head -n1)); set PADDOCK_E2B_PORT to another port"
        fi
fi

# controld runs as CTLD_USER, as packaged (there: paddock): its network-facing process holds no
# group and no capability, its docker child does the Docker calls. What it writes and reads
# after it dropped root is in a directory of that user's; nothing else of $DEV is.
CTLD_USER=${PADDOCK_CTLD_USER-nobody}
# others_can_reach PATH: every directory on the way to PATH lets others through (a checkout under
# /root, 0700, does not: that user could not reach the terminal page or the init binary)
others_can_reach() {
        local p m
        p=$(realpath "$1") || return 1
        while [[ $p != / ]]; do
                if [[ -d $p ]]; then
                        m=$(stat -c '%a' "$p")
                        (((8#$m & 1) == 1)) || return 1
                fi
                p=$(dirname "$p")
        done
}
if [[ -n $CTLD_USER && $(id -u) == 0 ]] && ! others_can_reach "$CONTROLD"; then
        warn "$CTLD_USER cannot reach $CONTROLD (a directory on the way is closed to others): controld stays root; move the checkout or set PADDOCK_CTLD_USER to a user that can"
        CTLD_USER=
fi
CTLD_DIR=$DEV/controld
mkdir -p "$CTLD_DIR"
# the store's old place (before the dev stack dropped root): moved, so the dev account stays
for f in controld.db controld.db-wal controld.db-shm; do
        [[ -e $DEV/$f && ! -e $CTLD_DIR/$f ]] && mv "$DEV/$f" "$CTLD_DIR/$f"
done
# The key secrets are sealed under (POST /secrets): made once, kept across runs so the dev
# account's secrets stay readable.
SECRETS_KEY=$CTLD_DIR/secrets.key
[[ -s $DEV/secrets.key && ! -e $SECRETS_KEY ]] && mv "$DEV/secrets.key" "$SECRETS_KEY"
if [[ ! -s $SECRETS_KEY ]]; then
        (umask 077 && head -c 32 /dev/urandom | base64 >"$SECRETS_KEY") || die "cannot write $SECRETS_KEY"
fi
if [[ -n $CTLD_USER && $(id -u) == 0 ]]; then
        id "$CTLD_USER" >/dev/null 2>&1 || die "no user $CTLD_USER to run controld as (PADDOCK_CTLD_USER names another; empty keeps root)"
        chown -R "$CTLD_USER:" "$CTLD_DIR" || die "cannot give $CTLD_DIR to $CTLD_USER"
fi

cat >"$CONF" <<EOF
[secrets]
key_file = $SECRETS_KEY
[server]
listen = 127.0.0.1:$PORT
[preview]
listen = 127.0.0.1:$PREVIEW_PORT
# each preview its own browser origin, http://<port>-<id>.localhost:$PREVIEW_PORT/ (browsers resolve
# *.localhost to the loopback); never the one-origin path form
domain = localhost:$PREVIEW_PORT
scheme = http
[e2b]
listen = 127.0.0.1:$E2B_PORT
[controld]
# started as root, controld forks its docker child and runs as this user with no groups
user = $CTLD_USER
[store]
path = $CTLD_DIR/controld.db
[scheduler]
driver = $DRIVER
$([[ -n $NOMAD_ADDR ]] && printf '[nomad]\naddress = %s\ntoken = %s\n' "$NOMAD_ADDR" "$NOMAD_TOKEN")
[docker]
socket = /var/run/docker.sock
$(vr=$PADDOCK_STATE/docker-btrfs/volumes; [[ $(stat -f -c %T "$vr" 2>/dev/null) == btrfs ]] && echo "volume_root = $vr")
network = $NETWORK
bridge = $BRIDGE
[amqp]
url = $AMQP_URL
exchange = paddock.nodes
egress_timeout = 10s
[defaults]
template = python-3.11
region = local
plan = dev
[region "local"]
id = 6a06df21cc6bef51342e199e
name = local
country = Local
continent = Local
enabled = true
[plan "dev"]
# Room for the SDKs' examples to run again and again: a persistent sandbox's volume stays after
# destroy (DELETE /volumes/{id} removes it), so the count is generous. Per account, without
# editing this file: controld admin -f <this file> account limits dev max_volumes=N
max_concurrent = 20
regions = local
max_cpu = 2000
max_memory = 2048
max_disk = 5
max_volume_gb = 50
max_volumes = 10000
$(example_templates)
[pool "python-3.11"]
# Kept started ahead: a create of python-3.11 with its default specs (and no volume,
# snapshot or oneShot) is ready in tens of milliseconds. controld admin -f <this file> pool
template = python-3.11
size = 2
EOF
chmod 0600 "$CONF"   # it may hold the Nomad token

LOG=$DEV/controld.log
if ((CONTROLD_RUNNING == 0)); then
        setsid nohup "$CONTROLD" -d -f "$CONF" </dev/null >>"$LOG" 2>&1 &
        pid=$!
        echo "$pid" >"$DEV/controld.pid"
        await_start controld "$pid" "$LOG" "answer $URL/healthz" curl -sf --max-time 2 -o /dev/null "$URL/healthz"
fi
say "controld running (pid $pid), log $LOG"

# ------------------------------------------------------------------ dev account and key
status_with() {
        curl -s --max-time 5 -o /dev/null -w '%{http_code}' -H "x-brimble-key: $1" "$URL/sandboxes" || true
}
KEY=""
if [[ -r $DEV/env ]]; then
        old=$(sed -n 's/^PADDOCK_API_KEY=//p' "$DEV/env" | tail -n1)
        if [[ -n $old && $(status_with "$old") == 200 ]]; then
                KEY=$old
        fi
fi
if [[ -z $KEY ]]; then
        ACC=$("$CONTROLD" admin -f "$CONF" account create dev --plan dev) \
                || die "controld admin account create failed"
        ACC=$(tail -n1 <<<"$ACC")
        [[ $ACC =~ ^[0-9a-f]{24}$ ]] || die "controld admin account create printed '$ACC', not an account id"
        KEY=$("$CONTROLD" admin -f "$CONF" key issue "$ACC") || die "controld admin key issue failed"
        KEY=$(tail -n1 <<<"$KEY")
        [[ -n $KEY ]] || die "controld admin key issue printed no key"
        code=$(status_with "$KEY")
        [[ $code == 200 ]] || warn "the new key gets HTTP $code from GET $URL/sandboxes (expected 200)"
fi
# E2B's SDKs take only keys shaped e2b_<hex>: the dev account holds one too
E2B_KEY=""
if [[ -r $DEV/env ]]; then
        old=$(sed -n 's/^E2B_API_KEY=//p' "$DEV/env" | tail -n1)
        [[ -n $old && $(status_with "$old") == 200 ]] && E2B_KEY=$old
fi
if [[ -z $E2B_KEY ]]; then
        E2B_KEY=$("$CONTROLD" admin -f "$CONF" key issue dev --e2b) || die "controld admin key issue dev --e2b failed"
        E2B_KEY=$(tail -n1 <<<"$E2B_KEY")
fi
(umask 077; printf 'PADDOCK_URL=%s\nPADDOCK_API_KEY=%s\nE2B_API_KEY=%s\nE2B_API_URL=http://127.0.0.1:%s\nE2B_SANDBOX_URL=http://127.0.0.1:%s\nE2B_VOLUME_API_URL=http://127.0.0.1:%s\n' \
        "$URL" "$KEY" "$E2B_KEY" "$E2B_PORT" "$E2B_PORT" "$E2B_PORT" >"$DEV/env.tmp")
chmod 0600 "$DEV/env.tmp"
mv "$DEV/env.tmp" "$DEV/env"

cat <<EOF

Paddock is up at $URL   (key and URL also in $DEV/env)
  API key: $KEY

  # create a sandbox and run a command in it (one paste)
  ID=\$(curl -s -X POST $URL/sandboxes -H "x-brimble-key: $KEY" -H 'content-type: application/json' -d '{"template":"python-3.11"}' | jq -r .data.id) && echo "sandbox \$ID" && curl -s -X POST $URL/sandboxes/\$ID/exec -H "x-brimble-key: $KEY" -H 'content-type: application/json' -d '{"cmd":"python3 -c \\"print(6*7)\\""}'; echo

  # the same, step by step
  curl -s -X POST $URL/sandboxes -H "x-brimble-key: $KEY" -H 'content-type: application/json' -d '{"template":"python-3.11"}'
  curl -s -X POST $URL/sandboxes/<id>/exec -H "x-brimble-key: $KEY" -H 'content-type: application/json' -d '{"cmd":"python3 -c \\"print(6*7)\\""}'
  curl -s -X DELETE $URL/sandboxes/<id> -H "x-brimble-key: $KEY"

  # preview a server running in the sandbox (prints a URL to open in a browser with its token:
  # http://8000-<id>.localhost:$PREVIEW_PORT/..., its own origin; browsers resolve *.localhost to this machine)
  curl -s -X POST $URL/sandboxes/<id>/processes -H "x-brimble-key: $KEY" -H 'content-type: application/json' -d '{"cmd":"python3 -m http.server 8000 --bind 127.0.0.1"}'
  curl -s -X POST $URL/sandboxes/<id>/previews -H "x-brimble-key: $KEY" -H 'content-type: application/json' -d '{"port":8000}' | jq -r '.data.url + "?paddock_token=" + .data.token'

  # E2B's SDK (npm e2b / pip e2b) against this Paddock: set these three, then use it as usual
  export E2B_API_KEY=$E2B_KEY E2B_API_URL=http://127.0.0.1:$E2B_PORT E2B_SANDBOX_URL=http://127.0.0.1:$E2B_PORT E2B_VOLUME_API_URL=http://127.0.0.1:$E2B_PORT

  make down    # stop controld, the node agent and the services 'make up' started
EOF
