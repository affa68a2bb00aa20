#!/usr/bin/env bash
# tests/env/down.sh — `make down`: stop the controld of `make up` (build/dev/controld.pid) and
# the services `make up` started ($PADDOCK_STATE/up.started). Services someone else started stay.
set -euo pipefail
PROG=down
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"
# shellcheck source=tests/env/lib.sh
. "$HERE/lib.sh"

DEV=${PADDOCK_DEV_DIR:-$ROOT/build/dev}
if [[ -r $DEV/controld.pid ]]; then
        read -r pid <"$DEV/controld.pid" || pid=""
        if [[ $pid =~ ^[0-9]+$ && $(readlink "/proc/$pid/exe" 2>/dev/null) == */controld* ]] && ! pid_gone "$pid"; then
                kill_and_wait "$pid" 10
                say "controld (pid $pid) stopped"
        else
                say "controld not running"
        fi
        rm -f "$DEV/controld.pid"
else
        say "controld not running (no $DEV/controld.pid)"
fi

"$HERE/services.sh" stop --started-by "$PADDOCK_STATE/up.started"
