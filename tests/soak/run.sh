#!/usr/bin/env bash
# tests/soak/run.sh [soak|load] — what `make soak` and `make load` run: tests/soak/soak.c's
# test of that name against a platform of its own on loopback (soak: controld, a nodeagent,
# RabbitMQ, the registry; load: controld). Starts the services it needs that are not running
# (and stops exactly those afterwards), builds the template images, runs it and prints its
# tables, then (soak) the lifecycle model for LIFECYCLE_SECONDS (600) on both drivers. Not part
# of `make check`, which runs the model for a bounded number of steps.
#
# Environment: SOAK_SECONDS (default 1800), SOAK_CLIENTS (6), SOAK_RSS_SLACK_MB (48),
# SOAK_SERVER_EXTRA ([server] config keys); LOAD_SECONDS (600), LOAD_CLIENTS (200),
# LOAD_SANDBOXES (20), LOAD_RSS_SLACK_MB (256); PADDOCK_BUILD (build), PADDOCK_STATE.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PROG=soak
# shellcheck source=tests/env/lib.sh
. tests/env/lib.sh
export PADDOCK_BUILD=${PADDOCK_BUILD:-build}
export PADDOCK_TEST_IMAGE=paddock/busybox:local
export PADDOCK_PY_IMAGE=paddock/python-3.11:local
WHAT=${1:-soak}
case $WHAT in
soak|load) ;;
*) echo "usage: tests/soak/run.sh [soak|load]" >&2; exit 2 ;;
esac
export SOAK_SECONDS=${SOAK_SECONDS:-1800}
export LOAD_SECONDS=${LOAD_SECONDS:-600}
# The test runner's per-test timeout: the load, plus teardown and settling.
if [[ $WHAT == soak ]]; then export TEST_TIMEOUT=$((SOAK_SECONDS + 900)); else export TEST_TIMEOUT=$((LOAD_SECONDS + 900)); fi

record_services soak
tests/env/services.sh start --record "$RECORD"
tests/env/images.sh
"$PADDOCK_BUILD/tests/soak/soak" "$WHAT" </dev/null
if [[ $WHAT == soak ]]; then
	# The lifecycle model (tests/integration/test-lifecycle.c) for LIFECYCLE_SECONDS on each
	# driver, with and without faults; each prints its table of operations, faults and outcomes.
	export LIFECYCLE_SECONDS=${LIFECYCLE_SECONDS:-600}
	export TEST_TIMEOUT=$((LIFECYCLE_SECONDS + 900))
	"$PADDOCK_BUILD/tests/integration/test-lifecycle" </dev/null
	"$PADDOCK_BUILD/tests/integration/test-lifecycle-nomad" </dev/null
fi
