/* controld's AMQP client against a real RabbitMQ and real nodeagents: replies, no route,
 * dead and hung agents, refusals, concurrency, lost connections and channels, limits. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>

#include "amqptest.h"
#include "nodebus.h"
#include "pj_node.h"
#include "cleanup.h"
#include "json.h"
#include "strutil.h"
#include "testlib.h"

#define URL "amqp://guest:guest@127.0.0.1:5672/"
#define EXCHANGE "paddock.nodes"
#define RABBITMQCTL "rabbitmqctl"

struct agent {
        pid_t pid;
        char node_id[96];
        char conf[512];
        char log[512];
};

#define MAX_AGENTS 4
static struct agent agents[MAX_AGENTS];
static int n_agents;

static void stop_agents(void *ud) {
        (void) ud;
        for (int i = 0; i < n_agents; i++) {
                if (agents[i].pid <= 0)
                        continue;
                /* A stopped agent would not act on SIGTERM until continued. */
                kill(agents[i].pid, SIGKILL);
                waitpid(agents[i].pid, NULL, 0);
                agents[i].pid = 0;
        }
}

static struct agent *start_agent(const char *tag) {
        ASSERT_TRUE(n_agents < MAX_AGENTS);
        struct agent *a = &agents[n_agents++];
        if (n_agents == 1)
                test_on_exit(stop_agents, NULL);
        char id[96];
        snprintf(id, sizeof(id), "amqptest-%d-%s", (int) getpid(), tag);
        snprintf(a->node_id, sizeof(a->node_id), "%s", id);
        snprintf(a->conf, sizeof(a->conf), "%s/%s.conf", test_tmpdir(), id);
        snprintf(a->log, sizeof(a->log), "%s/%s.log", test_tmpdir(), id);
        FILE *f = fopen(a->conf, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "[agent]\nnode_id = %s\nlog_level = debug\n[amqp]\nurl = %s\nexchange = %s\n", a->node_id, URL,
                EXCHANGE);
        fclose(f);
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                int fd = open(a->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
                if (fd >= 0)
                        dup2(fd, STDERR_FILENO);
                execl(test_build_path("nodeagent"), "nodeagent", "-d", "-f", a->conf, (char *) NULL);
                _exit(127);
        }
        a->pid = p;
        return a;
}

static struct nodebus *new_client(const char *exchange) {
        struct nodebus *c = NULL;
        struct err err = { 0 };
        int r = nodebus_new(URL, exchange, &c, &err);
        if (r < 0)
                test_fail(__FILE__, __LINE__, "nodebus_new: %s (%s)", strerror(-r), err.message);
        return c;
}

/* The agent's queue exists once it consumes: until then requests come back -ENXIO. */
static void wait_consuming(struct nodebus *c, const struct agent *a) {
        for (int i = 0; i < 200; i++) {
                _cleanup_free_ char *reply = NULL;
                struct err err = { 0 };
                int r = nodebus_request(c, a->node_id, "{\"type\":\"ping\"}", 2000, &reply, &err);
                if (r == 0)
                        return;
                if (r != -ENXIO)
                        test_fail(__FILE__, __LINE__, "waiting for the agent: %s (%s)", strerror(-r), err.message);
                usleep(50000);
        }
        test_fail(__FILE__, __LINE__, "nodeagent %s never consumed; see %s", a->node_id, a->log);
}

static long elapsed_ms(const struct timespec *t0) {
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        return (t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

/* The common start: RabbitMQ up, an agent started with tag, and a client on EXCHANGE
 * once that agent consumes (*ret_agent). */
static struct nodebus *client_with_agent(const char *tag, struct agent **ret_agent) {
        amqptest_need_broker();
        struct agent *a = start_agent(tag);
        struct nodebus *c = new_client(EXCHANGE);
        wait_consuming(c, a);
        *ret_agent = a;
        return c;
}

TEST_FULL(ping_round_trip, 30) {
        struct agent *a;
        struct nodebus *c = client_with_agent("ping", &a);

        _cleanup_free_ char *reply = NULL;
        struct err err = { 0 };
        ASSERT_EQ(nodebus_request(c, a->node_id, "{\"type\":\"ping\"}", 5000, &reply, &err), 0);
        ASSERT_CONTAINS(reply, "\"ok\":true");
        ASSERT_CONTAINS(reply, a->node_id);

        _cleanup_(pj_node_reply_done) struct pj_node_reply j = { 0 };
        ASSERT_EQ(nodebus_request_ok(c, a->node_id, "{\"type\":\"ping\"}", 5000, &j, &err), 0);
        ASSERT_STREQ(j.node_id, a->node_id);
        ASSERT_TRUE(j.ok);
        ASSERT_STREQ(j.type, "ping");
        /* Without an out-parameter too. */
        ASSERT_EQ(nodebus_request_ok(c, a->node_id, "{\"type\":\"ping\"}", 5000, NULL, &err), 0);
        nodebus_free(c);
}

TEST_FULL(unknown_node_fails_fast_with_enxio, 30) {
        amqptest_need_broker();
        struct nodebus *c = new_client(EXCHANGE);
        char node[64];
        struct err err = { 0 };
        snprintf(node, sizeof(node), "amqptest-%d-nobody", (int) getpid());
        for (int i = 0; i < 5; i++) {
                _cleanup_free_ char *reply = NULL;
                struct timespec t0;
                clock_gettime(CLOCK_MONOTONIC, &t0);
                ASSERT_EQ(nodebus_request(c, node, "{\"type\":\"ping\"}", 5000, &reply, &err), -ENXIO);
                ASSERT_LE(elapsed_ms(&t0), 1000);
                ASSERT_NULL(reply);
                ASSERT_CONTAINS(err.message, "no agent is consuming for node");
                ASSERT_CONTAINS(err.message, node);
                ASSERT_CONTAINS(err.message, "NO_ROUTE");
        }
        nodebus_free(c);
}

TEST_FULL(killed_agent_fails_fast_with_enxio, 30) {
        struct agent *a;
        struct nodebus *c = client_with_agent("killed", &a);
        kill(a->pid, SIGKILL);
        waitpid(a->pid, NULL, 0);
        a->pid = 0;
        /* The broker drops the exclusive queue once it sees the TCP connection close. */
        int r = 0;
        struct err err = { 0 };
        for (int i = 0; i < 50; i++) {
                _cleanup_free_ char *reply = NULL;
                r = nodebus_request(c, a->node_id, "{\"type\":\"ping\"}", 500, &reply, &err);
                if (r == -ENXIO)
                        break;
                ASSERT_EQ(r, -ETIMEDOUT);
        }
        ASSERT_EQ(r, -ENXIO);
        for (int i = 0; i < 3; i++) {
                _cleanup_free_ char *reply = NULL;
                struct timespec t0;
                clock_gettime(CLOCK_MONOTONIC, &t0);
                ASSERT_EQ(nodebus_request(c, a->node_id, "{\"type\":\"ping\"}", 5000, &reply, &err), -ENXIO);
                ASSERT_LE(elapsed_ms(&t0), 1000);
        }
        nodebus_free(c);
}

struct bg_request {
        pthread_t thread;
        struct nodebus *c;
        const char *node_id;
        const char *body;
        long timeout_ms;
        int r;
        long took_ms;
        char *reply;
        struct err err;
};

static void *bg_run(void *ud) {
        struct bg_request *b = ud;
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        b->r = nodebus_request(b->c, b->node_id, b->body, b->timeout_ms, &b->reply, &b->err);
        b->took_ms = elapsed_ms(&t0);
        return NULL;
}

TEST_FULL(hung_agent_times_out_at_deadline_and_late_reply_is_ignored, 40) {
        amqptest_need_broker();
        struct agent *hung = start_agent("hung");
        struct agent *live = start_agent("live");
        struct nodebus *c = new_client(EXCHANGE);
        wait_consuming(c, hung);
        wait_consuming(c, live);
        /* Its queue stays bound, the broker routes and confirms, nobody answers. */
        ASSERT_EQ(kill(hung->pid, SIGSTOP), 0);

        char stale[64], fresh[64];
        snprintf(stale, sizeof(stale), "{\"type\":\"stale-%d\"}", (int) getpid());
        snprintf(fresh, sizeof(fresh), "{\"type\":\"fresh-%d\"}", (int) getpid());
        struct bg_request h = { .c = c, .node_id = hung->node_id, .body = stale, .timeout_ms = 2000 };
        ASSERT_EQ(pthread_create(&h.thread, NULL, bg_run, &h), 0);
        /* Meanwhile the same client keeps serving other nodes: the hung request does not hold it. */
        usleep(200000);
        for (int i = 0; i < 5; i++) {
                struct bg_request l = { .c = c, .node_id = live->node_id, .body = "{\"type\":\"ping\"}", .timeout_ms = 5000 };
                bg_run(&l);
                ASSERT_EQ(l.r, 0);
                ASSERT_LE(l.took_ms, 1000);
                free(l.reply);
        }
        pthread_join(h.thread, NULL);
        ASSERT_EQ(h.r, -ETIMEDOUT);
        ASSERT_NULL(h.reply);
        ASSERT_CONTAINS(h.err.message, "no reply from the agent on node");
        ASSERT_GE(h.took_ms, 2000);
        ASSERT_LE(h.took_ms, 3000);

        /* Continued, the agent answers the stale request first (it already holds it), then ours:
         * only the reply with our correlation id may be taken. */
        ASSERT_EQ(kill(hung->pid, SIGCONT), 0);
        _cleanup_free_ char *reply = NULL;
        struct err err = { 0 };
        ASSERT_EQ(nodebus_request(c, hung->node_id, fresh, 5000, &reply, &err), 0);
        ASSERT_CONTAINS(reply, "'fresh-");
        ASSERT_FALSE(strstr(reply, "stale-"));
        free(reply);
        reply = NULL;
        ASSERT_EQ(nodebus_request(c, hung->node_id, "{\"type\":\"ping\"}", 5000, &reply, &err), 0);
        ASSERT_CONTAINS(reply, "\"ok\":true");
        nodebus_free(c);
}

TEST_FULL(agent_refusal_is_eremoteio_with_its_text, 30) {
        struct agent *a;
        struct nodebus *c = client_with_agent("refuse", &a);
        struct err err = { 0 };
        struct pj_node_reply j = { 0 };
        /* This agent does not enforce egress (not enabled in its config): it must say no. */
        ASSERT_EQ(nodebus_request_ok(c, a->node_id,
                                  "{\"type\":\"egress.apply\",\"sandbox_id\":\"0123456789abcdef01234567\","
                                  "\"ip\":\"169.254.90.7\",\"mode\":\"deny_all\"}",
                                  5000, &j, &err),
                  -EREMOTEIO);
        ASSERT_EQ(j.node_id[0], 0); /* untouched on failure */
        ASSERT_CONTAINS(err.message, "the agent on node");
        ASSERT_CONTAINS(err.message, a->node_id);
        ASSERT_CONTAINS(err.message, "egress");
        /* The agent's own words reach the caller. */
        ASSERT_EQ(nodebus_request_ok(c, a->node_id, "{\"type\":\"paddock-test-unsupported\"}", 5000, &j, &err),
                  -EREMOTEIO);
        ASSERT_CONTAINS(err.message, "'paddock-test-unsupported'");
        /* Garbage is refused by the agent, not by us. */
        ASSERT_EQ(nodebus_request_ok(c, a->node_id, "{not json", 5000, &j, &err), -EREMOTEIO);
        ASSERT_CONTAINS(err.message, "Malformed JSON");
        nodebus_free(c);
}

#define N_THREADS 16
#define N_PER_THREAD 20

struct worker {
        pthread_t thread;
        struct nodebus *c;
        const char *node_id;
        int idx;
        int ok, bad;
        char first_err[512];
};

static void *worker_run(void *ud) {
        struct worker *w = ud;
        for (int i = 0; i < N_PER_THREAD; i++) {
                char body[64], want[64];
                struct err err = { 0 };
                _cleanup_free_ char *reply = NULL;
                /* The agent quotes an unknown type in its refusal: each reply says whose
                 * request it answers. */
                snprintf(body, sizeof(body), "{\"type\":\"t%d-%d\"}", w->idx, i);
                snprintf(want, sizeof(want), "'t%d-%d'", w->idx, i);
                int r = nodebus_request(w->c, w->node_id, body, 10000, &reply, &err);
                if (r == 0 && strstr(reply, want))
                        w->ok++;
                else {
                        if (!w->bad)
                                snprintf(w->first_err, sizeof(w->first_err), "request %d: r=%d %s reply=%s", i, r, err.message,
                                         reply ? reply : "(none)");
                        w->bad++;
                }
        }
        return NULL;
}

TEST_FULL(concurrent_requests_get_their_own_replies, 60) {
        struct agent *a;
        struct nodebus *c = client_with_agent("conc", &a);
        struct worker w[N_THREADS];
        memset(w, 0, sizeof(w));
        for (int i = 0; i < N_THREADS; i++) {
                w[i] = (struct worker) { .c = c, .node_id = a->node_id, .idx = i };
                ASSERT_EQ(pthread_create(&w[i].thread, NULL, worker_run, &w[i]), 0);
        }
        int ok = 0;
        for (int i = 0; i < N_THREADS; i++) {
                pthread_join(w[i].thread, NULL);
                if (w[i].bad)
                        test_fail(__FILE__, __LINE__, "thread %d: %d bad, first: %s", i, w[i].bad, w[i].first_err);
                ok += w[i].ok;
        }
        ASSERT_EQ(ok, N_THREADS * N_PER_THREAD);
        nodebus_free(c);
}

/* rabbitmqctl close_connection on the client's own connection (named
 * "paddock-controld[<pid>]"), so that other users of the broker are left alone.
 * Returns the number of connections closed. */
static int close_my_connection(void) {
        char mark[64];
        snprintf(mark, sizeof(mark), "paddock-controld[%d]", (int) getpid());
        char *list_argv[] = { RABBITMQCTL, "-n", "rabbit@localhost", "-q", "list_connections", "--no-table-headers",
                              "pid", "client_properties", NULL };
        _cleanup_free_ char *out = NULL;
        int st = test_run_capture(list_argv, &out, 1 << 20);
        if (st != 0 || !out)
                TEST_SKIP("rabbitmqctl list_connections does not work here (not root, or no Erlang cookie)");
        int closed = 0;
        for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
                if (!strstr(line, mark))
                        continue;
                char *tab = strchr(line, '\t');
                if (!tab)
                        continue;
                *tab = 0;
                char *close_argv[] = { RABBITMQCTL, "-n", "rabbit@localhost", "-q", "close_connection", line,
                                       "paddock test closes this connection", NULL };
                _cleanup_free_ char *o2 = NULL;
                ASSERT_EQ(test_run_capture(close_argv, &o2, 4096), 0);
                closed++;
        }
        return closed;
}

TEST_FULL(lost_connection_fails_cleanly_then_reconnects, 60) {
        amqptest_need_broker();
        if (access("/usr/sbin/" RABBITMQCTL, X_OK) != 0 && access("/usr/bin/" RABBITMQCTL, X_OK) != 0)
                TEST_SKIP("rabbitmqctl is not installed");
        struct agent *a = start_agent("lost");
        struct nodebus *c = new_client(EXCHANGE);
        wait_consuming(c, a);
        struct err err = { 0 };

        /* In flight: the agent is stopped so the request is still waiting when the broker
         * drops us. It must fail at once with the broker's reason, not sit out its deadline. */
        ASSERT_EQ(kill(a->pid, SIGSTOP), 0);
        struct bg_request b = { .c = c, .node_id = a->node_id, .body = "{\"type\":\"ping\"}", .timeout_ms = 20000 };
        ASSERT_EQ(pthread_create(&b.thread, NULL, bg_run, &b), 0);
        usleep(300000);
        ASSERT_EQ(close_my_connection(), 1);
        pthread_join(b.thread, NULL);
        ASSERT_EQ(b.r, -ECONNRESET);
        ASSERT_CONTAINS(b.err.message, "CONNECTION_FORCED");
        ASSERT_CONTAINS(b.err.message, "paddock test closes this connection");
        ASSERT_LE(b.took_ms, 10000);
        ASSERT_EQ(kill(a->pid, SIGCONT), 0);

        /* The next request reconnects (new reply queue) and succeeds. */
        _cleanup_free_ char *reply = NULL;
        ASSERT_EQ(nodebus_request(c, a->node_id, "{\"type\":\"ping\"}", 5000, &reply, &err), 0);
        ASSERT_CONTAINS(reply, "\"ok\":true");

        /* Idle: a connection closed between requests is replaced before publishing, so
         * no request fails for it (nothing had been sent on the dead connection). */
        ASSERT_EQ(close_my_connection(), 1);
        usleep(1000000);
        free(reply);
        reply = NULL;
        ASSERT_EQ(nodebus_request(c, a->node_id, "{\"type\":\"ping\"}", 5000, &reply, &err), 0);
        ASSERT_CONTAINS(reply, "\"ok\":true");
        nodebus_free(c);
}

/* A raw connection of the test's own, to change the broker under the client. */
static void delete_exchange(const char *name) {
        amqp_connection_state_t conn = amqptest_connect(NULL);
        amqp_exchange_delete(conn, 1, amqp_cstring_bytes(name), 0);
        ASSERT_EQ(amqp_get_rpc_reply(conn).reply_type, AMQP_RESPONSE_NORMAL);
        amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(conn);
}

TEST_FULL(channel_closed_by_broker_is_eio_then_reopened, 30) {
        amqptest_need_broker();
        char exch[64], node[64];
        struct err err = { 0 };
        snprintf(exch, sizeof(exch), "paddock.test.%d", (int) getpid());
        snprintf(node, sizeof(node), "amqptest-%d-chan", (int) getpid());
        struct nodebus *c = new_client(exch);
        _cleanup_free_ char *reply = NULL;
        ASSERT_EQ(nodebus_request(c, node, "{\"type\":\"ping\"}", 5000, &reply, &err), -ENXIO);
        /* Publishing to an exchange that is gone: the broker closes the channel (404). */
        delete_exchange(exch);
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ASSERT_EQ(nodebus_request(c, node, "{\"type\":\"ping\"}", 5000, &reply, &err), -EIO);
        ASSERT_LE(elapsed_ms(&t0), 1000);
        ASSERT_CONTAINS(err.message, "RabbitMQ closed the channel: 404 NOT_FOUND");
        ASSERT_CONTAINS(err.message, exch);
        /* The channel is reopened (and the exchange redeclared) before the next publish. */
        int r = nodebus_request(c, node, "{\"type\":\"ping\"}", 5000, &reply, &err);
        if (r != -ENXIO)
                test_fail(__FILE__, __LINE__, "after the channel close: %d %s", r, err.message);
        ASSERT_CONTAINS(err.message, "no agent is consuming");
        ASSERT_NULL(reply);
        nodebus_free(c);
        delete_exchange(exch);
}

TEST_FULL(body_limit_is_one_mib, 30) {
        struct agent *a;
        struct nodebus *c = client_with_agent("big", &a);
        size_t n = AMQP_CLIENT_MAX_BODY;
        _cleanup_free_ char *body = xmalloc(n + 2);
        const char *head = "{\"type\":\"ping\",\"pad\":\"";
        size_t hl = strlen(head);
        memcpy(body, head, hl);
        memset(body + hl, 'x', n - hl - 2);
        memcpy(body + n - 2, "\"}", 3);
        ASSERT_EQ(strlen(body), n);
        /* Exactly the limit goes through (in many frames) and the agent answers (whether it
         * accepts that much is the agent's business). */
        struct err err = { 0 };
        _cleanup_free_ char *reply = NULL;
        ASSERT_EQ(nodebus_request(c, a->node_id, body, 10000, &reply, &err), 0);
        ASSERT_CONTAINS(reply, a->node_id);
        /* One byte more is refused before anything is sent. */
        memcpy(body + n - 2, "x\"}", 4);
        ASSERT_EQ(strlen(body), n + 1);
        ASSERT_EQ(nodebus_request(c, a->node_id, body, 10000, &reply, &err), -EMSGSIZE);
        ASSERT_CONTAINS(err.message, "limit");
        nodebus_free(c);
}

TEST_FULL(bad_arguments_and_urls, 30) {
        struct nodebus *c = NULL;
        struct err err = { 0 };
        ASSERT_EQ(nodebus_new("http://127.0.0.1:5672", EXCHANGE, &c, &err), -EINVAL);
        ASSERT_CONTAINS(err.message, "amqp://");
        ASSERT_EQ(nodebus_new("amqp://guest:guest@127.0.0.1:notaport/", EXCHANGE, &c, &err), -EINVAL);
        ASSERT_EQ(nodebus_new("amqps://guest:guest@127.0.0.1/", EXCHANGE, &c, &err), -EOPNOTSUPP);
        ASSERT_EQ(nodebus_new(URL, "", &c, &err), -EINVAL);
        /* Nothing listens on port 1. */
        ASSERT_EQ(nodebus_new("amqp://guest:guest@127.0.0.1:1/", EXCHANGE, &c, &err), -ECONNREFUSED);
        ASSERT_CONTAINS(err.message, "127.0.0.1:1");
        ASSERT_NULL(c);
        amqptest_need_broker();
        ASSERT_EQ(nodebus_new("amqp://guest:wrong@127.0.0.1:5672/", EXCHANGE, &c, &err), -EACCES);
        ASSERT_CONTAINS(err.message, "refused the login for user guest");
        ASSERT_FALSE(strstr(err.message, "wrong"));   /* never echo the password */
        ASSERT_EQ(nodebus_new("amqp://guest:guest@127.0.0.1:5672/no-such-vhost", EXCHANGE, &c, &err),
                  -EACCES);
        ASSERT_NULL(c);

        c = new_client(EXCHANGE);
        char *reply = NULL;
        ASSERT_EQ(nodebus_request(c, "", "{}", 1000, &reply, &err), -EINVAL);
        ASSERT_EQ(nodebus_request(c, "bad\nnode", "{}", 1000, &reply, &err), -EINVAL);
        ASSERT_EQ(nodebus_request(c, "n1", "{}", 0, &reply, &err), -EINVAL);
        ASSERT_NULL(reply);
        nodebus_free(c);
        ASSERT_NULL(nodebus_free(NULL));
}

/* ------------------------------------------------------------------ who may answer */

/* The test plays the agent of a node with a raw connection: it takes the request off
 * the node's queue and answers it however it likes. */
struct fake_agent {
        amqp_connection_state_t conn;
        char node[96];
        char corr[64];
        char reply_to[256];
};

static void fake_agent_open(struct fake_agent *f, const char *tag) {
        snprintf(f->node, sizeof(f->node), "amqptest-%d-%s", (int) getpid(), tag);
        f->conn = amqptest_connect(EXCHANGE);
        amqp_bytes_t qn = amqptest_queue(f->conn);
        amqp_queue_bind(f->conn, 1, qn, amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes(f->node), amqp_empty_table);
        ASSERT_EQ(amqp_get_rpc_reply(f->conn).reply_type, AMQP_RESPONSE_NORMAL);
        amqp_basic_consume(f->conn, 1, qn, amqp_empty_bytes, 0, 1, 1, amqp_empty_table);
        ASSERT_EQ(amqp_get_rpc_reply(f->conn).reply_type, AMQP_RESPONSE_NORMAL);
        amqp_bytes_free(qn);
}

static void fake_agent_take(struct fake_agent *f) {
        amqp_envelope_t env;
        struct timeval tv = { .tv_sec = 10 };
        amqp_maybe_release_buffers(f->conn);
        ASSERT_EQ(amqp_consume_message(f->conn, &env, &tv, 0).reply_type, AMQP_RESPONSE_NORMAL);
        const amqp_basic_properties_t *p = &env.message.properties;
        snprintf(f->corr, sizeof(f->corr), "%.*s", (int) p->correlation_id.len, (const char *) p->correlation_id.bytes);
        snprintf(f->reply_to, sizeof(f->reply_to), "%.*s", (int) p->reply_to.len, (const char *) p->reply_to.bytes);
        amqp_destroy_envelope(&env);
}

/* app_id NULL: no app_id property. */
static void fake_agent_reply(struct fake_agent *f, const char *app_id, const char *body) {
        amqp_basic_properties_t p = { 0 };
        p._flags = AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
        p.correlation_id = amqp_cstring_bytes(f->corr);
        p.content_type = amqp_cstring_bytes("application/json");
        if (app_id) {
                p._flags |= AMQP_BASIC_APP_ID_FLAG;
                p.app_id = amqp_cstring_bytes(app_id);
        }
        ASSERT_EQ(amqp_basic_publish(f->conn, 1, amqp_empty_bytes, amqp_cstring_bytes(f->reply_to), 0, 0, &p,
                                     amqp_cstring_bytes(body)),
                  AMQP_STATUS_OK);
}

struct bg_request_ok {
        pthread_t thread;
        struct nodebus *c;
        const char *node_id;
        int r;
        struct err err;
};

static void *bg_run_ok(void *ud) {
        struct bg_request_ok *b = ud;
        b->r = nodebus_request_ok(b->c, b->node_id, "{\"type\":\"ping\"}", 4000, NULL, &b->err);
        return NULL;
}

TEST_FULL(reply_is_taken_only_from_the_node_asked, 30) {
        amqptest_need_broker();
        struct fake_agent f = { 0 };
        fake_agent_open(&f, "imposter");
        struct nodebus *c = new_client(EXCHANGE);
        char body[256];

        /* Replies that another node (or nobody) signs are dropped; the request waits on
         * and takes the one its node sends. */
        struct bg_request_ok b = { .c = c, .node_id = f.node };
        ASSERT_EQ(pthread_create(&b.thread, NULL, bg_run_ok, &b), 0);
        fake_agent_take(&f);
        snprintf(body, sizeof(body), "{\"ok\":false,\"node_id\":\"%s\",\"error\":\"forged\"}", f.node);
        fake_agent_reply(&f, "some-other-node", body);
        fake_agent_reply(&f, NULL, body);
        usleep(300000);
        snprintf(body, sizeof(body), "{\"ok\":true,\"node_id\":\"%s\"}", f.node);
        fake_agent_reply(&f, f.node, body);
        pthread_join(b.thread, NULL);
        if (b.r != 0)
                test_fail(__FILE__, __LINE__, "r=%d %s", b.r, b.err.message);

        /* Signed by the right node but saying it is another: refused. */
        b = (struct bg_request_ok) { .c = c, .node_id = f.node };
        ASSERT_EQ(pthread_create(&b.thread, NULL, bg_run_ok, &b), 0);
        fake_agent_take(&f);
        fake_agent_reply(&f, f.node, "{\"ok\":true,\"node_id\":\"some-other-node\"}");
        pthread_join(b.thread, NULL);
        ASSERT_EQ(b.r, -EBADMSG);
        ASSERT_CONTAINS(b.err.message, "says it comes from node some-other-node");

        /* Only forged replies: the request times out instead of taking one. */
        b = (struct bg_request_ok) { .c = c, .node_id = f.node };
        ASSERT_EQ(pthread_create(&b.thread, NULL, bg_run_ok, &b), 0);
        fake_agent_take(&f);
        snprintf(body, sizeof(body), "{\"ok\":true,\"node_id\":\"%s\"}", f.node);
        fake_agent_reply(&f, "some-other-node", body);
        pthread_join(b.thread, NULL);
        ASSERT_EQ(b.r, -ETIMEDOUT);
        nodebus_free(c);
        amqp_connection_close(f.conn, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(f.conn);
}

/* ------------------------------------------------------------------ a broker that lies */

/* Just enough of an AMQP 0-9-1 server, on loopback, to connect nodebus and then answer
 * its publish with a reply whose body frames carry more than the header announced. */
struct liar {
        int lfd, port;
        pthread_t thread;
        bool split;             /* the extra bytes in a second body frame instead of one */
        bool ok;
};

struct wbuf {
        uint8_t b[4096];
        size_t n;
};

static void w8(struct wbuf *w, uint8_t v) { w->b[w->n++] = v; }
static void w16(struct wbuf *w, uint16_t v) { w8(w, (uint8_t) (v >> 8)); w8(w, (uint8_t) v); }
static void w32(struct wbuf *w, uint32_t v) { w16(w, (uint16_t) (v >> 16)); w16(w, (uint16_t) v); }
static void w64(struct wbuf *w, uint64_t v) { w32(w, (uint32_t) (v >> 32)); w32(w, (uint32_t) v); }
static void wshort(struct wbuf *w, const char *s) {
        w8(w, (uint8_t) strlen(s));
        memcpy(w->b + w->n, s, strlen(s));
        w->n += strlen(s);
}
static void wlong(struct wbuf *w, const char *s) {
        w32(w, (uint32_t) strlen(s));
        memcpy(w->b + w->n, s, strlen(s));
        w->n += strlen(s);
}

static bool send_frame(int fd, uint8_t type, uint16_t ch, const struct wbuf *payload) {
        struct wbuf f = { .n = 0 };
        w8(&f, type);
        w16(&f, ch);
        w32(&f, (uint32_t) payload->n);
        memcpy(f.b + f.n, payload->b, payload->n);
        f.n += payload->n;
        w8(&f, 0xCE);
        return write(fd, f.b, f.n) == (ssize_t) f.n;
}

static bool send_method(int fd, uint16_t ch, uint16_t cls, uint16_t m, const struct wbuf *args) {
        struct wbuf p = { .n = 0 };
        w16(&p, cls);
        w16(&p, m);
        if (args) {
                memcpy(p.b + p.n, args->b, args->n);
                p.n += args->n;
        }
        return send_frame(fd, 1, ch, &p);
}

static bool read_full(int fd, void *buf, size_t n) {
        size_t got = 0;
        while (got < n) {
                ssize_t r = read(fd, (uint8_t *) buf + got, n - got);
                if (r <= 0)
                        return false;
                got += (size_t) r;
        }
        return true;
}

/* One frame: type, channel and payload (in buf, at most cap bytes). */
static bool read_frame(int fd, uint8_t *type, uint8_t *buf, size_t cap, size_t *len) {
        uint8_t h[7], end;
        if (!read_full(fd, h, 7))
                return false;
        *type = h[0];
        *len = (size_t) h[3] << 24 | (size_t) h[4] << 16 | (size_t) h[5] << 8 | h[6];
        if (*len > cap)
                return false;
        return read_full(fd, buf, *len) && read_full(fd, &end, 1) && end == 0xCE;
}

static void *liar_main(void *ud) {
        struct liar *l = ud;
        int fd = accept(l->lfd, NULL, NULL);
        if (fd < 0)
                return NULL;
        uint8_t hello[8], buf[65536], type;
        size_t len;
        struct wbuf a = { .n = 0 };
        if (!read_full(fd, hello, 8) || memcmp(hello, "AMQP", 4) != 0)
                goto out;
        w8(&a, 0);
        w8(&a, 9);
        w32(&a, 0);                     /* server properties: empty table */
        wlong(&a, "PLAIN");
        wlong(&a, "en_US");
        send_method(fd, 0, 10, 10, &a); /* connection.start */
        char corr[256] = "", reply_to[256] = "";
        for (;;) {
                if (!read_frame(fd, &type, buf, sizeof(buf), &len))
                        goto out;
                if (type != 1 || len < 4)
                        continue;
                uint16_t cls = (uint16_t) (buf[0] << 8 | buf[1]), m = (uint16_t) (buf[2] << 8 | buf[3]);
                a.n = 0;
                if (cls == 10 && m == 11) {             /* start-ok -> tune */
                        w16(&a, 1);
                        w32(&a, 131072);
                        w16(&a, 0);
                        send_method(fd, 0, 10, 30, &a);
                } else if (cls == 10 && m == 40) {      /* open -> open-ok */
                        wshort(&a, "");
                        send_method(fd, 0, 10, 41, &a);
                } else if (cls == 10 && m == 50) {      /* close -> close-ok */
                        send_method(fd, 0, 10, 51, NULL);
                        goto out;
                } else if (cls == 20 && m == 10) {      /* channel.open */
                        wlong(&a, "");
                        send_method(fd, 1, 20, 11, &a);
                } else if (cls == 40 && m == 10) {      /* exchange.declare */
                        send_method(fd, 1, 40, 11, NULL);
                } else if (cls == 50 && m == 10) {      /* queue.declare */
                        wshort(&a, "amq.gen-liar");
                        w32(&a, 0);
                        w32(&a, 0);
                        send_method(fd, 1, 50, 11, &a);
                } else if (cls == 85 && m == 10) {      /* confirm.select */
                        send_method(fd, 1, 85, 11, NULL);
                } else if (cls == 60 && m == 20) {      /* basic.consume */
                        wshort(&a, "ctag");
                        send_method(fd, 1, 60, 21, &a);
                } else if (cls == 60 && m == 40) {      /* basic.publish: header, body, then lie */
                        if (!read_frame(fd, &type, buf, sizeof(buf), &len) || type != 2 || len < 14)
                                goto out;
                        uint64_t size = 0;
                        for (int i = 4; i < 12; i++)
                                size = size << 8 | buf[i];
                        uint16_t flags = (uint16_t) (buf[12] << 8 | buf[13]);
                        size_t off = 14;
                        if (flags & 0x8000)
                                off += 1 + buf[off];    /* content_type */
                        if (flags & 0x4000)
                                off += 1 + buf[off];    /* content_encoding */
                        if (flags & 0x1000)
                                off += 1;               /* delivery_mode */
                        if (flags & 0x0400) {           /* correlation_id */
                                snprintf(corr, sizeof(corr), "%.*s", buf[off], (const char *) buf + off + 1);
                                off += 1 + buf[off];
                        }
                        if (flags & 0x0200)             /* reply_to */
                                snprintf(reply_to, sizeof(reply_to), "%.*s", buf[off], (const char *) buf + off + 1);
                        for (uint64_t got = 0; got < size; got += len)
                                if (!read_frame(fd, &type, buf, sizeof(buf), &len))
                                        goto out;
                        w64(&a, 1);
                        w8(&a, 0);
                        send_method(fd, 1, 60, 80, &a); /* basic.ack */
                        a.n = 0;
                        wshort(&a, "ctag");
                        w64(&a, 1);
                        w8(&a, 0);
                        wshort(&a, "");
                        wshort(&a, reply_to);
                        send_method(fd, 1, 60, 60, &a); /* basic.deliver */
                        a.n = 0;
                        w16(&a, 60);
                        w16(&a, 0);
                        w64(&a, 10);                    /* announces 10 bytes... */
                        w16(&a, 0x0400 | 0x0008);
                        wshort(&a, corr);
                        wshort(&a, "liar-node");
                        send_frame(fd, 2, 1, &a);
                        a.n = 0;
                        if (l->split) {                 /* ...sends 6 + 6 */
                                memcpy(a.b, "{\"ok\":", 6);
                                a.n = 6;
                                send_frame(fd, 3, 1, &a);
                                memcpy(a.b, "true}X", 6);
                                send_frame(fd, 3, 1, &a);
                        } else {                        /* ...or 20 at once */
                                memcpy(a.b, "{\"ok\":true,\"pad\":1}", 20);
                                a.n = 20;
                                send_frame(fd, 3, 1, &a);
                        }
                        l->ok = true;
                }
        }
out:
        /* Leave the socket open until the client goes, so the lie is all it sees. */
        while (read_frame(fd, &type, buf, sizeof(buf), &len))
                if (type == 1 && len >= 4 && buf[0] == 0 && buf[1] == 10 && buf[3] == 50) {
                        send_method(fd, 0, 10, 51, NULL);
                        break;
                }
        close(fd);
        return NULL;
}

static void liar_start(struct liar *l) {
        l->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(l->lfd >= 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        ASSERT_EQ(bind(l->lfd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ASSERT_EQ(listen(l->lfd, 1), 0);
        socklen_t sl = sizeof(sa);
        ASSERT_EQ(getsockname(l->lfd, (struct sockaddr *) &sa, &sl), 0);
        l->port = ntohs(sa.sin_port);
        ASSERT_EQ(pthread_create(&l->thread, NULL, liar_main, l), 0);
}

TEST_FULL(reply_with_more_body_than_announced_is_refused, 30) {
        for (int split = 0; split <= 1; split++) {
                struct liar l = { .split = split };
                liar_start(&l);
                char url[128];
                struct err err = { 0 };
                snprintf(url, sizeof(url), "amqp://guest:guest@127.0.0.1:%d/", l.port);
                struct nodebus *c = NULL;
                int r = nodebus_new(url, EXCHANGE, &c, &err);
                if (r < 0)
                        test_fail(__FILE__, __LINE__, "nodebus_new against the fake broker: %s", err.message);
                _cleanup_free_ char *reply = NULL;
                r = nodebus_request(c, "liar-node", "{\"type\":\"ping\"}", 3000, &reply, &err);
                /* Never a reply holding bytes nobody wrote. */
                ASSERT_NULL(reply);
                ASSERT_EQ(r, -EBADMSG);
                ASSERT_CONTAINS(err.message, "more body than its header announced");
                ASSERT_TRUE(l.ok);
                nodebus_free(c);
                pthread_join(l.thread, NULL);
                close(l.lfd);
        }
}
