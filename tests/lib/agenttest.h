/* agenttest.h — a nodeagent of a test's own, and waiting for what it logs. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

/* Skips the test unless build/nodeagent is built and the shared test broker answers; with
 * registry, also unless a registry listens on 127.0.0.1:5000. */
void agenttest_need(bool registry);

/* Names for a test's own agent apart from every other test's: node_id "<name>-<n>" (40 bytes
 * at most), exchange "paddock.<name>-<n>" (64), its config and log files in the test's
 * directory (512 each). */
void agenttest_names(const char *name, int n, char node_id[40], char exchange[64], char conf[512], char log[512]);

/* Writes an agent config to path: [agent] node_id (log_level debug), [amqp] on the shared test
 * broker with that exchange, then the caller's sections (printf-style), then [nomad] address
 * when nomad_url is non-NULL. Fails the test if the file cannot be written. */
void agenttest_write_conf(const char *path, const char *node_id, const char *exchange, const char *nomad_url,
                          const char *sections_fmt, ...) __attribute__((format(printf, 5, 6)));

/* Starts build/nodeagent -d -f conf with its stdout and stderr appended to log. With ready
 * non-NULL, returns only once the part of the log this start writes holds `ready`, and fails
 * the test if that takes more than 10 s. The pid is the caller's to stop (test_stop_child). */
pid_t agenttest_start(const char *conf, const char *log, const char *ready);

/* SIGKILL and reap *pid (an agent that dies without a word); *pid becomes 0. */
void agenttest_kill(pid_t *pid);

/* True once the file at path holds `what` after its first `from` bytes (the first 1 MiB of
 * that is read); polled every 50 ms, false after timeout_s seconds (0: looked at once). */
bool test_log_has(const char *path, off_t from, const char *what, int timeout_s);

/* The size of the file at path now (0 if it does not exist): pass it to test_log_has as
 * `from` to look only at what is written after this point. */
off_t test_log_end(const char *path);
