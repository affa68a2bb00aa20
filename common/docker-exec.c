/* docker-exec.c — the Docker exec transport: create and inspect an exec, the hijacked raw
 * AF_UNIX stream of its start (Docker answers 101 and then multiplexes stdout/stderr), the
 * demux of that stream, and docker_exec_run() for a whole short command. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cleanup.h"
#include "docker.h"
#include "docker-private.h"
#include "fdio.h"
#include "httpc.h"
#include "log.h"
#include "strutil.h"

/* ---- exec ---------------------------------------------------------------------- */

int docker_exec_create(struct docker *d, const char *container, const struct docker_exec_opts *o, char **ret_exec_id) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        _cleanup_json_ cJSON *b = NULL;
        if (!docker_valid_name(container) || !o || !o->cmd || !o->cmd[0] || !ret_exec_id)
                return -EINVAL;
        b = cJSON_CreateObject();
        cJSON_AddBoolToObject(b, "AttachStdin", o->attach_stdin);
        cJSON_AddBoolToObject(b, "AttachStdout", true);
        cJSON_AddBoolToObject(b, "AttachStderr", true);
        cJSON_AddBoolToObject(b, "Tty", false);
        cJSON_AddItemToObject(b, "Cmd", docker_strv_to_json(o->cmd));
        if (o->env)
                cJSON_AddItemToObject(b, "Env", docker_strv_to_json(o->env));
        if (o->working_dir)
                cJSON_AddStringToObject(b, "WorkingDir", o->working_dir);
        if (o->user)
                cJSON_AddStringToObject(b, "User", o->user);
        _cleanup_free_ char *path = escaped_path("/containers/%s/exec", container);
        int r = docker_call(d, "POST", path, b, 0, &resp);
        if (r == -EEXIST)     /* 409: container not running (or paused/restarting) */
                return -ESRCH;
        if (r < 0)
                return r;
        return docker_answer_id(&resp, "exec create", ret_exec_id);
}

int docker_exec_inspect(struct docker *d, const char *exec_id, struct docker_exec_info *ret) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!docker_valid_name(exec_id))
                return -EINVAL;
        int r = dcall_path(d, "GET", 0, &resp, "/exec/%s/json", exec_id);
        if (r < 0)
                return r;
        const cJSON *ec = cJSON_GetObjectItemCaseSensitive(resp.json, "ExitCode");
        *ret = (struct docker_exec_info) {
                .running = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(resp.json, "Running")),
                .exit_code = cJSON_IsNumber(ec) ? ec->valueint : -1,
                .pid = (int) docker_json_num(resp.json, "Pid"),
        };
        return 0;
}

static int connect_unix(struct docker *d, int *ret_fd) {
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        if (fd < 0)
                return -errno;
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", d->socket);
        while (connect(fd, (struct sockaddr *) &a, sizeof(a)) < 0) {
                if (errno == EINTR)
                        continue;
                return -errno;
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Case-insensitive search for header "name" in head (up to the blank line); value into out. */
static bool head_header(const char *head, const char *name, char *out, size_t outlen) {
        size_t nl = strlen(name);
        for (const char *l = strstr(head, "\r\n"); l && l[2] && !(l[2] == '\r' && l[3] == '\n');
             l = strstr(l + 2, "\r\n")) {
                const char *h = l + 2;
                if (strncasecmp(h, name, nl) == 0 && h[nl] == ':') {
                        const char *v = h + nl + 1;
                        v += strspn(v, " \t");
                        size_t vl = strcspn(v, "\r\n");
                        snprintf(out, outlen, "%.*s", (int) vl, v);
                        return true;
                }
        }
        return false;
}

int docker_exec_start(struct docker *d, const char *exec_id, int *ret_fd, uint8_t **ret_pre, size_t *ret_pre_len) {
        static const char body[] = "{\"Detach\":false,\"Tty\":false}";
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *req = NULL, *e = NULL, *head = NULL;
        int64_t deadline = mono_ms() + EXEC_HEAD_TIMEOUT_MS;
        size_t have = 0;
        char *end = NULL;
        int r;

        if (!docker_valid_name(exec_id) || !ret_fd || !ret_pre || !ret_pre_len)
                return -EINVAL;
        if (docker_remote_get())
                return docker_remote_get()->exec_start(exec_id, ret_fd, ret_pre, ret_pre_len);
        r = connect_unix(d, &fd);
        if (r < 0)
                return docker_transport_error(d, r);

        e = httpc_escape(exec_id);
        req = xasprintf("POST " DOCKER_API_PREFIX "/exec/%s/start HTTP/1.1\r\n"
                        "Host: localhost\r\n"
                        "Connection: Upgrade\r\n"
                        "Upgrade: tcp\r\n"
                        "Content-Type: application/json\r\n"
                        "Content-Length: %zu\r\n"
                        "\r\n%s",
                        e, sizeof(body) - 1, body);
        r = fd_send_all(fd, req, strlen(req), deadline);
        if (r < 0)
                return docker_transport_error(d, r);

        /* Read until the end of the response head; whatever follows belongs to the stream. */
        head = xmalloc(EXEC_HEAD_MAX + 1);
        while (!end) {
                if (have == EXEC_HEAD_MAX) {
                        docker_set_error("exec start: response head over %d bytes", EXEC_HEAD_MAX);
                        return -EBADMSG;
                }
                ssize_t n = fd_recv_some(fd, head + have, EXEC_HEAD_MAX - have, deadline);
                if (n < 0)
                        return docker_transport_error(d, (int) n);
                if (n == 0) {
                        docker_set_error("exec start: connection closed before a response");
                        return -EIO;
                }
                have += (size_t) n;
                head[have] = 0;
                end = memmem(head, have, "\r\n\r\n", 4);
        }
        size_t head_len = (size_t) (end - head) + 4;

        int major, minor, status;
        if (sscanf(head, "HTTP/%d.%d %d", &major, &minor, &status) != 3) {
                docker_set_error("exec start: malformed status line");
                return -EBADMSG;
        }
        if (status == 101 || status == 200) {
                size_t pre = have - head_len;
                *ret_pre = NULL;
                if (pre > 0) {
                        *ret_pre = xmalloc(pre);
                        memcpy(*ret_pre, head + head_len, pre);
                }
                *ret_pre_len = pre;
                docker_clear_error();
                *ret_fd = TAKE_FD(fd);
                return 0;
        }

        /* An error: read the (bounded) body for Docker's message. */
        char cl[32] = "";
        size_t want = EXEC_ERRBODY_MAX;
        if (head_header(head, "Content-Length", cl, sizeof(cl))) {
                unsigned long long v = strtoull(cl, NULL, 10);
                want = v < EXEC_ERRBODY_MAX ? (size_t) v : EXEC_ERRBODY_MAX;
        }
        _cleanup_free_ char *eb = xmalloc(EXEC_ERRBODY_MAX + 1);
        size_t eblen = have - head_len < want ? have - head_len : want;
        memcpy(eb, head + head_len, eblen);
        while (eblen < want) {
                ssize_t n = fd_recv_some(fd, eb + eblen, want - eblen, mono_ms() + 5000);
                if (n <= 0)
                        break;
                eblen += (size_t) n;
        }
        eb[eblen] = 0;
        /* tolerate chunked framing: the JSON object sits between the first '{' and last '}' */
        char *ob = memchr(eb, '{', eblen), *cb = ob ? strrchr(ob, '}') : NULL;
        if (ob && cb)
                docker_set_error_from_body(status, ob, (size_t) (cb - ob) + 1);
        else
                docker_set_error_from_body(status, eb, eblen);
        r = docker_map_status(status);
        if (r == -EEXIST)     /* 409: exec already running, or container stopped */
                r = -EBUSY;
        return r < 0 ? r : -EIO;
}

/* ---- demux ---------------------------------------------------------------------- */

int docker_demux_feed(struct docker_demux *m, const uint8_t *buf, size_t len,
                      int (*cb)(int type, const uint8_t *data, size_t len, void *ud), void *ud) {
        while (len > 0) {
                if (m->remaining == 0) {
                        size_t take = 8 - m->hdr_have;
                        if (take > len)
                                take = len;
                        memcpy(m->hdr + m->hdr_have, buf, take);
                        m->hdr_have += take;
                        buf += take;
                        len -= take;
                        if (m->hdr_have < 8)
                                return 0;
                        if (m->hdr[0] > 3 || m->hdr[1] || m->hdr[2] || m->hdr[3])
                                return -EBADMSG;
                        m->type = m->hdr[0];
                        m->remaining = (uint32_t) m->hdr[4] << 24 | (uint32_t) m->hdr[5] << 16 |
                                       (uint32_t) m->hdr[6] << 8 | (uint32_t) m->hdr[7];
                        m->hdr_have = 0;
                        continue;
                }
                size_t take = len < m->remaining ? len : m->remaining;
                m->remaining -= (uint32_t) take;
                int r = cb(m->type, buf, take, ud);
                if (r < 0)
                        return r;
                buf += take;
                len -= take;
        }
        return 0;
}

/* ---- exec_run ------------------------------------------------------------------- */

/* Output is kept up to the caller's cap; the rest is counted as truncated. */
struct run_ctx {
        struct strbuf out, err;
};

static void run_ctx_done(struct run_ctx *c) {
        strbuf_done(&c->out);
        strbuf_done(&c->err);
}

static int run_cb(int type, const uint8_t *data, size_t len, void *ud) {
        struct run_ctx *c = ud;
        if (type == 1)
                (void) strbuf_append(&c->out, data, len);
        else if (type == 2 || type == 3)
                (void) strbuf_append(&c->err, data, len);
        return 0;
}

int docker_exec_run(struct docker *d, const char *container, const struct docker_exec_opts *o,
                    const void *stdin_data, size_t stdin_len, size_t cap, long timeout_ms,
                    struct docker_exec_result *ret) {
        _cleanup_free_ char *exec_id = NULL;
        _cleanup_free_ uint8_t *pre = NULL;
        _cleanup_close_ int fd = -1;
        _cleanup_free_ uint8_t *buf = NULL;
        struct docker_demux dm = {};
        _cleanup_(run_ctx_done) struct run_ctx c = {};
        size_t pre_len = 0, sent = 0;
        int64_t deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : EXEC_RUN_TIMEOUT_MS);
        bool attach = stdin_data != NULL || (o && o->attach_stdin);
        bool writing = attach;
        int r;

        if (!o || !ret || (stdin_len > 0 && !stdin_data))
                return -EINVAL;
        strbuf_init(&c.out, cap ? cap : DOCKER_EXEC_CAP_DEFAULT);
        strbuf_init(&c.err, cap ? cap : DOCKER_EXEC_CAP_DEFAULT);

        struct docker_exec_opts eo = *o;
        eo.attach_stdin = attach;
        r = docker_exec_create(d, container, &eo, &exec_id);
        if (r < 0)
                return r;
        r = docker_exec_start(d, exec_id, &fd, &pre, &pre_len);
        if (r < 0)
                return r;

        r = docker_demux_feed(&dm, pre, pre_len, run_cb, &c);
        if (r < 0)
                goto fail_proto;

        if (writing && stdin_len == 0) {
                shutdown(fd, SHUT_WR);
                writing = false;
        }
        buf = xmalloc(64 * 1024);
        for (;;) {
                int64_t left = deadline - mono_ms();
                if (left <= 0) {
                        r = -ETIMEDOUT;
                        goto fail;
                }
                struct pollfd p = { .fd = fd, .events = POLLIN | (writing ? POLLOUT : 0) };
                int n = poll(&p, 1, left > 1000000 ? 1000000 : (int) left);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = -errno;
                        goto fail;
                }
                if (n == 0)
                        continue;
                if (writing && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
                        size_t chunk = stdin_len - sent < 65536 ? stdin_len - sent : 65536;
                        ssize_t w = send(fd, (const uint8_t *) stdin_data + sent, chunk, MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (w > 0)
                                sent += (size_t) w;
                        else if (w < 0 && errno != EAGAIN && errno != EINTR)
                                /* the process quit without reading all stdin: not our error */
                                sent = stdin_len;
                        if (sent == stdin_len) {
                                shutdown(fd, SHUT_WR);
                                writing = false;
                        }
                }
                if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
                        ssize_t rn = recv(fd, buf, 64 * 1024, MSG_DONTWAIT);
                        if (rn < 0 && (errno == EAGAIN || errno == EINTR))
                                continue;
                        if (rn < 0 && errno != ECONNRESET) {
                                r = -errno;
                                goto fail;
                        }
                        if (rn <= 0)
                                break;
                        r = docker_demux_feed(&dm, buf, (size_t) rn, run_cb, &c);
                        if (r < 0)
                                goto fail_proto;
                }
        }
        close(TAKE_FD(fd));
        log_debug("docker: exec %s: stream ended (%zu/%zu bytes out/err)", exec_id, c.out.len, c.err.len);

        /* The stream ends when the process's output closes; Docker may record the exit
         * code a moment later (noticeably so under runsc). */
        struct docker_exec_info info = {};
        for (int64_t sleep_ms = 2;; sleep_ms = sleep_ms < 50 ? sleep_ms * 2 : 50) {
                r = docker_exec_inspect(d, exec_id, &info);
                if (r < 0)
                        goto fail;
                if (!info.running && info.exit_code >= 0)
                        break;
                if (!info.running) {
                        /* Never ran: Docker writes errors that happen after the hijack
                         * ("Container ... is not running") into the stream as stdout. */
                        docker_set_error_n(c.out.buf ? c.out.buf : "exec did not run", c.out.buf ? c.out.len : 16);
                        return strstr(docker_last_error(), "is not running") ? -ESRCH : -EIO;
                }
                if (mono_ms() + sleep_ms > deadline) {
                        log_debug("docker: exec %s: no exit code yet (running=%d pid=%d)", exec_id, info.running, info.pid);
                        r = -ETIMEDOUT;
                        goto fail;
                }
                usleep((useconds_t) sleep_ms * 1000);
        }

        *ret = (struct docker_exec_result) {
                .out_len = c.out.len,
                .out_truncated = c.out.truncated,
                .err_len = c.err.len,
                .err_truncated = c.err.truncated,
                .exit_code = info.exit_code,
        };
        ret->out = strbuf_steal(&c.out);
        ret->err = strbuf_steal(&c.err);
        return 0;

fail_proto:
        docker_set_error("exec %s: malformed output stream", exec_id);
fail:
        if (r == -ETIMEDOUT)
                docker_set_error("exec %s did not finish within %ld ms", exec_id,
                          timeout_ms > 0 ? timeout_ms : EXEC_RUN_TIMEOUT_MS);
        return r;
}

void docker_exec_result_done(struct docker_exec_result *r) {
        if (!r)
                return;
        free_many(r->out, r->err);
        *r = (struct docker_exec_result) {};
}
