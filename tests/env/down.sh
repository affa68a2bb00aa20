#!/usr/bin/env bash
# tests/env/down.sh — `make down`: stop the controld and nodeagent of `make up`
# (build/dev/controld.pid, build/dev/nodeagent.pid) and the services `make up` started
# ($PADDOCK_STATE/up.started). Services someone else started stay.
# shellcheck source=tests/env/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
script_init down

# stop_daemon NAME: stop the process in $DEV/NAME.pid if it is still a NAME.
stop_daemon() {
        local pid
        if [[ ! -r $DEV/$1.pid ]]; then
                say "$1 not running (no $DEV/$1.pid)"
                return
        fi
        if pid=$(daemon_pid "$1"); then
                kill_and_wait "$pid" 10
                say "$1 (pid $pid) stopped"
        else
                say "$1 not running"
        fi
        rm -f "$DEV/$1.pid"
}
stop_daemon controld
# Warm pool members belong to no one and outlive a controld by design (the next start serves
# them again); `make down` means the stack goes, so they go too: rows first, then workloads.
# (the store is controld's user's: up.sh gives its files back to it before the next start)
DB=$DEV/controld/controld.db
[[ -r $DB ]] || DB=$DEV/controld.db
if [[ -r $DB ]] && command -v sqlite3 >/dev/null; then
        n=0
        for id in $(sqlite3 "$DB" 'SELECT id FROM pool_members' 2>/dev/null); do
                [[ $id =~ ^[0-9a-f]{24}$ ]] || continue
                sqlite3 "$DB" "DELETE FROM pool_members WHERE id = '$id'"
                docker rm -f "paddock-$id" >/dev/null 2>&1 || true
                docker volume rm -f "paddock-init-$id" >/dev/null 2>&1 || true
                n=$((n + 1))
        done
        ((n == 0)) || say "$n warm pool members removed"
fi
stop_daemon nodeagent
# The agent leaves its firewall in place when it stops (fail closed: sandboxes that still run
# keep their rules). With no sandbox left on the bridge there is nothing to hold, and the
# table would only block the next Paddock on this bridge, so it goes.
if command -v nft >/dev/null && nft list table inet paddock >/dev/null 2>&1; then
        if [[ -z $(docker ps -q --filter network=paddock-sandbox 2>/dev/null) ]]; then
                nft delete table inet paddock && say "egress firewall (nft table inet paddock) removed: no sandbox left on the bridge"
                nft delete table bridge paddock 2>/dev/null || true
        else
                say "egress firewall (nft table inet paddock) kept: sandboxes still run on the bridge"
        fi
fi

"$PADDOCK_ENV_DIR/services.sh" stop --started-by "$PADDOCK_STATE/up.started"
