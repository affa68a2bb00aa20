#!/usr/bin/env bash
# tests/soak/run.sh — what `make soak` runs: the bounded load test in tests/soak/soak.c
# against a controld of its own on loopback. Starts the services it needs that are not
# running (and stops exactly those afterwards), builds the template images, runs
# $PADDOCK_BUILD/tests/soak/soak and prints its summary. Not part of `make check`.
#
# Environment: SOAK_SECONDS (default 180), SOAK_CLIENTS (6), SOAK_RSS_SLACK_MB (48),
# SOAK_SERVER_EXTRA ([server] config keys), PADDOCK_BUILD (build), PADDOCK_STATE.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PROG=soak
# shellcheck source=tests/env/lib.sh
. tests/env/lib.sh
export PADDOCK_BUILD=${PADDOCK_BUILD:-build}
export PADDOCK_TEST_IMAGE=paddock/busybox:local
export PADDOCK_PY_IMAGE=paddock/python-3.11:local
export SOAK_SECONDS=${SOAK_SECONDS:-180}
# The test runner's per-test timeout: the load, plus teardown and settling.
export TEST_TIMEOUT=$((SOAK_SECONDS + 900))

record_services soak
tests/env/services.sh start --record "$RECORD"
tests/env/images.sh
"$PADDOCK_BUILD/tests/soak/soak" </dev/null
