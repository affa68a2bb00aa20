#!/bin/sh
# <suite>-nomad: an API suite again, on the Nomad driver against the Nomad stand-in (the
# controld harness starts one per controld when PADDOCK_DRIVER=nomad), with the in-sandbox
# agent reached through a node agent's relay (PADDOCK_NOMAD_RELAY=1: the harness starts a
# nodeagent with [relay] beside each controld, as every Nomad client node runs one). The
# Nomad path without the agent (alloc exec) is test-nomad-driver's. The Makefile installs
# this script once per suite in NOMAD_SUITES; the suite is the name without "-nomad".
# Left out, with the reason (PADDOCK_TEST_EXCLUDE, substrings of test names):
#   test-controld
#     orphan_reaping_leaves     two controlds on one engine: here each gets its own stand-in
#     docker_outage             a Docker outage is not a Nomad outage
#   test-snapshots
#     automatic_snapshots_kept_by_count_and_by_age
#                                 the schedule and the retention are controld's (a cron tick and
#                                 the store), the same for both drivers, and it waits for the
#                                 clock's minutes (2 to 3 of them); the Nomad path of a snapshot
#                                 (commit by the task's container name, restore by a job) is in
#                                 every other test of the suite
#   test-controld-egress
#     node_messages_count_only_from_the_nodes_login  controld's check of a node message's broker
#                                 login; it starts no sandbox, so no driver is involved
#   test-envd
#     process_tables_are_per_sandbox  envd's per-sandbox process records are controld's
#                                 (envd-process.c) and the bound is paddock-init's, the same
#                                 for both drivers; 1100 starts take ~40 s on each
#   test-runtime-stream
#     stream_output_before_stdin_is_capped  the 1 MB of input fits in the TCP and stand-in
#                                 buffers, so no output comes before it is all sent; the cap is
#                                 controld's (runtime.c), the same for both drivers
set -eu
here=$(dirname "$0")
name=$(basename "$0")
suite=${name%-nomad}
case $suite in
test-controld) ex=orphan_reaping_leaves,docker_outage ;;
test-runtime-stream) ex=stream_output_before_stdin_is_capped ;;
test-controld-egress) ex=node_messages_count_only_from_the_nodes_login ;;
test-envd) ex=process_tables_are_per_sandbox ;;
test-snapshots) ex=automatic_snapshots_kept_by_count_and_by_age ;;
*) ex= ;;
esac
PADDOCK_DRIVER=nomad PADDOCK_NOMAD_RELAY=1 PADDOCK_TEST_EXCLUDE=${PADDOCK_TEST_EXCLUDE:+$PADDOCK_TEST_EXCLUDE,}$ex exec "$here/$suite" "$@"
