/* privsep-child.c — a privileged child of the agent (privsep.c starts it): it drops every
 * capability and group it does not need, says READY, then answers one checked message at a
 * time until the agent goes. Every message is checked here, size and fields, before any
 * work (contract in nodeagent.h, under "privsep.c").
 */
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"
#include "egress.h"
#include "fdio.h"
#include "log.h"
#include "nodeagent.h"
#include "privdrop.h"
#include "privsep.h"
#include "proxy.h"
#include "pj_egress.h"
#include <cjson/cJSON.h>
#include "strutil.h"

#ifndef SECBIT_NOROOT
#define SECBIT_NOROOT (1 << 0)
#define SECBIT_NOROOT_LOCKED (1 << 1)
#define SECBIT_NO_SETUID_FIXUP (1 << 2)
#define SECBIT_NO_SETUID_FIXUP_LOCKED (1 << 3)
#define SECBIT_KEEP_CAPS_LOCKED (1 << 5)
#define SECBIT_NO_CAP_AMBIENT_RAISE (1 << 6)
#define SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED (1 << 7)
#endif

/* The largest request a child takes, plus one (a longer one is refused by its real length):
 * the proxy child's rules, the egress child's apply for the others. */
static size_t recv_max(enum ps_child kind) {
        return (kind == PS_CHILD_PROXY ? sizeof(struct ps_proxy_set) : sizeof(struct ps_egress_apply)) + 1;
}

/* In a child: the fd the request just handled hands back with its result (PS_RELAY_OPEN). */
static int child_pass_fd = -1;
/* The configuration a child was started with (the relay child needs its docker_root). */
static const struct agent_config *child_cfg;
/* The proxy child's proxy. */
static struct proxy *child_proxy;

/* ---------------------------------------------------------------- message checks (child side) */

static int check_apply(const struct ps_egress_apply *m, struct ps_result *ret) {
        if (!privsep_id_field_valid(m->sandbox_id))
                return privsep_refuse(ret, "sandbox_id is not 24 lowercase hex characters");
        if (m->ip == 0 || m->ip == 0xffffffffu)
                return privsep_refuse(ret, "ip is not a usable IPv4 address");
        switch ((enum pj_egress_mode) m->mode) {
        case PJ_EGRESS_OPEN:
        case PJ_EGRESS_RESTRICTED:
        case PJ_EGRESS_DENY_ALL:
                break;
        default:
                return privsep_refuse(ret, "mode %u is not an egress mode", m->mode);
        }
        if (!privsep_zero(m->pad, sizeof(m->pad)))
                return privsep_refuse(ret, "padding is not zero");
        if (m->n_allow > EGRESS_MAX_ALLOW)
                return privsep_refuse(ret, "n_allow %u is over %d", m->n_allow, EGRESS_MAX_ALLOW);
        if (m->pid > INT32_MAX)
                return privsep_refuse(ret, "pid %u is not a process id", m->pid);
        if (m->n_allow > 0 && m->mode != PJ_EGRESS_RESTRICTED)
                return privsep_refuse(ret, "allow entries are only for restricted mode");
        for (uint32_t i = 0; i < m->n_allow; i++)
                if (m->allow[i].prefix > 32 || !privsep_zero(m->allow[i].pad, sizeof(m->allow[i].pad)))
                        return privsep_refuse(ret, "allow[%u] has prefix %u (0..32) or non-zero padding", i,
                                      m->allow[i].prefix);
        if (m->n_steer > EGRESS_MAX_STEER)
                return privsep_refuse(ret, "n_steer %u is over %d", m->n_steer, EGRESS_MAX_STEER);
        if (m->n_steer > 0 && m->mode == PJ_EGRESS_DENY_ALL)
                return privsep_refuse(ret, "nothing is steered to the proxy in deny_all mode");
        for (uint32_t i = 0; i < m->n_steer; i++)
                if (m->steer[i] == 0 || m->steer[i] == 0xffffffffu)
                        return privsep_refuse(ret, "steer[%u] is not a usable address", i);
        if (!privsep_zero(&m->steer[m->n_steer], (EGRESS_MAX_STEER - m->n_steer) * sizeof(m->steer[0])))
                return privsep_refuse(ret, "steer entries past n_steer are not zero");
        /* Unused slots must be zero too: nothing but what n_allow says is in the message. */
        if (!privsep_zero(&m->allow[m->n_allow], (EGRESS_MAX_ALLOW - m->n_allow) * sizeof(m->allow[0])))
                return privsep_refuse(ret, "allow entries past n_allow are not zero");
        return 0;
}

static void do_apply(const struct ps_egress_apply *m, struct ps_result *ret) {
        _cleanup_free_ struct pj_allow_entry *allow = xnew0(struct pj_allow_entry, m->n_allow ? m->n_allow : 1);
        for (uint32_t i = 0; i < m->n_allow; i++)
                allow[i] = (struct pj_allow_entry) {
                        .kind = m->allow[i].prefix == 32 ? PJ_ALLOW_IPV4 : PJ_ALLOW_CIDR,
                        .addr = m->allow[i].addr,
                        .prefix = m->allow[i].prefix,
                };
        struct egress_policy p = {
                .sandbox_id = m->sandbox_id,
                .ip = m->ip,
                .mode = (enum pj_egress_mode) m->mode,
                .allow = allow,
                .n_allow = m->n_allow,
                .pid = m->pid,
                .steer = m->steer,
                .n_steer = m->n_steer,
        };
        struct err err = { 0 };
        ret->r = egress_apply(&p, &err);
        snprintf(ret->msg, sizeof(ret->msg), "%s", err.message);
}

/* The fields of a message that names one sandbox and nothing else to check: its id, then its
 * padding. 0 or privsep_refuse's -EBADMSG. */
static int check_sandbox_msg(const char id[EGRESS_ID_LEN + 1], const void *pad, size_t n, struct ps_result *ret) {
        if (!privsep_id_field_valid(id))
                return privsep_refuse(ret, "sandbox_id is not 24 lowercase hex characters");
        if (!privsep_zero(pad, n))
                return privsep_refuse(ret, "padding is not zero");
        return 0;
}

/* PS_PROXY_SET after its id and padding were checked: the rules text (its length, NUL, zero
 * tail), parsed as proto-json checks a node message's rules, handed to the proxy; the CA's PEM
 * is the answer. */
static int proxy_set_checked(const struct ps_proxy_set *m, struct ps_result *ret) {
        if (m->ip == 0 || m->ip == 0xffffffffu)
                return privsep_refuse(ret, "ip is not a usable IPv4 address");
        if (m->len >= PS_PROXY_RULES_MAX || memchr(m->rules, 0, m->len) || m->rules[m->len] != 0 ||
            !privsep_zero(m->rules + m->len, PS_PROXY_RULES_MAX - m->len))
                return privsep_refuse(ret, "rules are not %u bytes of text followed by zeros", m->len);
        if (!child_proxy) {
                snprintf(ret->msg, sizeof(ret->msg), "the egress proxy is not running");
                return ret->r = -ENOTCONN;
        }
        struct err err = { 0 };
        _cleanup_(pj_egress_done) struct pj_egress e = { 0 };
        cJSON *j = cJSON_ParseWithLength(m->rules, m->len);
        int r = j ? pj_egress_rules_from_json(j, true, &e, &err) : -EINVAL;
        pj_egress_rules_json_wipe(j);   /* the values are secrets: wiped before the tree goes */
        cJSON_Delete(j);
        if (r < 0) {
                snprintf(ret->msg, sizeof(ret->msg), "the rules do not read: %s", err.message[0] ? err.message : "not JSON");
                return ret->r = -EBADMSG;
        }
        _cleanup_free_ struct proxy_rule *rules = xnew0(struct proxy_rule, e.n_rules ? e.n_rules : 1);
        _cleanup_free_ struct proxy_header *hdrs = NULL;
        size_t n_h = 0;
        for (size_t i = 0; i < e.n_rules; i++)
                n_h += e.rules[i].n_headers;
        hdrs = xnew0(struct proxy_header, n_h ? n_h : 1);
        n_h = 0;
        for (size_t i = 0; i < e.n_rules; i++) {
                rules[i] = (struct proxy_rule) { .host = e.rules[i].host, .headers = hdrs + n_h, .n_headers = e.rules[i].n_headers };
                for (size_t k = 0; k < e.rules[i].n_headers; k++)
                        hdrs[n_h++] = (struct proxy_header) { e.rules[i].headers[k].name, e.rules[i].headers[k].value };
        }
        _cleanup_free_ char *pem = NULL;
        /* The egress table gives ip to this sandbox (an older holder's rules are gone from
         * it): so does the proxy. */
        struct err ierr = { 0 };
        r = proxy_sandbox_set(child_proxy, m->sandbox_id, m->ip, rules, e.n_rules, &pem, &ierr);
        if (r == -EADDRINUSE) {
                (void) proxy_sandbox_drop_ip(child_proxy, m->ip);
                r = proxy_sandbox_set(child_proxy, m->sandbox_id, m->ip, rules, e.n_rules, &pem, &err);
        } else
                err = ierr;
        pj_egress_rules_wipe(&e);
        if (r < 0) {
                snprintf(ret->msg, sizeof(ret->msg), "%s", err.message);
                return ret->r = r;
        }
        if (!pem || strlen(pem) >= sizeof(ret->msg)) {
                snprintf(ret->msg, sizeof(ret->msg), "the sandbox's CA certificate does not fit a result");
                return ret->r = -E2BIG;
        }
        snprintf(ret->msg, sizeof(ret->msg), "%s", pem);
        return ret->r = 0;
}

static int proxy_stats_msg(const char *id, struct ps_result *ret) {
        _cleanup_free_ struct proxy_host_stats *v = NULL;
        int n = proxy_sandbox_stats(child_proxy, id, &v);
        if (n < 0) {
                snprintf(ret->msg, sizeof(ret->msg), "the egress proxy has no rules for this sandbox");
                return ret->r = n;
        }
        size_t o = 0;
        for (int i = 0; i < n; i++) {
                char line[400];
                int l = snprintf(line, sizeof(line), "%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ";", v[i].host, v[i].requests,
                                 v[i].injections, v[i].upstream_refused);
                if (l < 0 || o + (size_t) l >= sizeof(ret->msg))
                        break;
                memcpy(ret->msg + o, line, (size_t) l);
                o += (size_t) l;
        }
        ret->msg[o] = 0;
        return ret->r = 0;
}

static int child_handle(enum ps_child kind, const void *buf, size_t len, struct ps_result *ret) {
        struct ps_hdr h;
        privsep_result_init(ret, PS_RESULT, 0);
        if (len < sizeof(h))
                return privsep_refuse(ret, "a %zu byte message is shorter than its header", len);
        memcpy(&h, buf, sizeof(h));
        ret->hdr.seq = h.seq;
        if (h.version != PS_VERSION)
                return privsep_refuse(ret, "version %u, want %u", h.version, PS_VERSION);
        if (h.len != len)
                return privsep_refuse(ret, "header says %u bytes, the message has %zu", h.len, len);
        if (h.reserved != 0)
                return privsep_refuse(ret, "reserved header field is not zero");

        size_t want;
        switch ((enum ps_type) h.type) {
        case PS_PING:
                want = sizeof(struct ps_ping);
                break;
        case PS_EGRESS_APPLY:
                want = sizeof(struct ps_egress_apply);
                break;
        case PS_EGRESS_REMOVE:
                want = sizeof(struct ps_egress_remove);
                break;
        case PS_EGRESS_LIST:
        case PS_EGRESS_STATS:
                want = sizeof(struct ps_egress_list);
                break;
        case PS_DOCKER_COMMIT:
        case PS_DOCKER_PUSH:
        case PS_DOCKER_VERIFY:
        case PS_DOCKER_REMOVE:
        case PS_DOCKER_PRUNE:
        case PS_DOCKER_PID:
                want = sizeof(struct ps_docker);
                break;
        case PS_RELAY_OPEN:
                want = sizeof(struct ps_relay_open);
                break;
        case PS_PROXY_SET:
                want = sizeof(struct ps_proxy_set);
                break;
        case PS_PROXY_DROP:
        case PS_PROXY_STATS:
                want = sizeof(struct ps_proxy_id);
                break;
        case PS_READY:
        case PS_RESULT:
        default:
                return privsep_refuse(ret, "message type %u is not a request", h.type);
        }
        if (len != want)
                return privsep_refuse(ret, "type %u takes %zu bytes, got %zu", h.type, want, len);
        if (kind == PS_CHILD_DOCKER && h.type != PS_PING && !privsep_docker_type(h.type))
                return privsep_refuse(ret, "the docker process does not take message type %u", h.type);
        if (kind == PS_CHILD_EGRESS && (privsep_docker_type(h.type) || h.type == PS_RELAY_OPEN))
                return privsep_refuse(ret, "the egress process does not take message type %u", h.type);
        if ((kind == PS_CHILD_LOOKUP) != (h.type == PS_DOCKER_PID) && h.type != PS_PING)
                return privsep_refuse(ret, "the %s process does not take message type %u", privsep_child_name(kind), h.type);
        if ((kind == PS_CHILD_RELAY) != (h.type == PS_RELAY_OPEN) && h.type != PS_PING)
                return privsep_refuse(ret, "the %s process does not take message type %u", privsep_child_name(kind), h.type);
        bool proxy_type = h.type == PS_PROXY_SET || h.type == PS_PROXY_DROP || h.type == PS_PROXY_STATS;
        if ((kind == PS_CHILD_PROXY) != proxy_type && h.type != PS_PING)
                return privsep_refuse(ret, "the %s process does not take message type %u", privsep_child_name(kind), h.type);

        switch ((enum ps_type) h.type) {
        case PS_PING:
                snprintf(ret->msg, sizeof(ret->msg), "paddock nodeagent %s process, protocol %d", privsep_child_name(kind),
                         PS_VERSION);
                return 0;
        case PS_EGRESS_APPLY: {
                /* Copied out of buf: buf may not be aligned for the struct. */
                _cleanup_free_ struct ps_egress_apply *m = xmalloc(sizeof(*m));
                memcpy(m, buf, sizeof(*m));
                if (check_apply(m, ret) < 0)
                        return ret->r;
                do_apply(m, ret);
                return ret->r;
        }
        case PS_EGRESS_REMOVE: {
                struct ps_egress_remove m;
                memcpy(&m, buf, sizeof(m));
                int r = check_sandbox_msg(m.sandbox_id, m.pad, sizeof(m.pad), ret);
                if (r < 0)
                        return r;
                struct err err = { 0 };
                ret->r = egress_remove(m.sandbox_id, m.ip, &err);
                snprintf(ret->msg, sizeof(ret->msg), "%s", err.message);
                return ret->r;
        }
        case PS_EGRESS_LIST: {
                struct ps_egress_list m;
                memcpy(&m, buf, sizeof(m));
                if (m.reserved != 0)
                        return privsep_refuse(ret, "reserved field is not zero");
                char **ids = NULL;
                int n = egress_list(&ids);
                if (n < 0) {
                        snprintf(ret->msg, sizeof(ret->msg), "cannot list the egress table: %s", strerror(-n));
                        return ret->r = n;
                }
                /* r stays 0 (results are <= 0 by protocol): "<total>:" then the ids */
                size_t o = (size_t) snprintf(ret->msg, sizeof(ret->msg), "%d:", n);
                for (uint32_t i = m.offset; i < (uint32_t) n && i < m.offset + PS_LIST_PAGE; i++, o += EGRESS_ID_LEN)
                        memcpy(ret->msg + o, ids[i], EGRESS_ID_LEN);
                ret->msg[o] = 0;
                strv_free(ids);
                return ret->r = 0;
        }
        case PS_EGRESS_STATS: {
                static struct egress_stats *snap;
                static int n_snap;
                struct ps_egress_list m;
                memcpy(&m, buf, sizeof(m));
                if (m.reserved != 0)
                        return privsep_refuse(ret, "reserved field is not zero");
                if (m.offset == 0 || !snap) {
                        free(snap);
                        snap = NULL;
                        n_snap = egress_stats(&snap);
                        if (n_snap < 0) {
                                int e = n_snap;
                                n_snap = 0;
                                snprintf(ret->msg, sizeof(ret->msg), "cannot read the egress counters: %s", strerror(-e));
                                return ret->r = e;
                        }
                }
                size_t o = (size_t) snprintf(ret->msg, sizeof(ret->msg), "%d:", n_snap);
                for (uint32_t i = m.offset; i < (uint32_t) n_snap && i < m.offset + PS_STATS_PAGE; i++)
                        o += (size_t) snprintf(ret->msg + o, sizeof(ret->msg) - o, "%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ";",
                                               snap[i].sandbox_id, snap[i].allowed_packets, snap[i].allowed_bytes,
                                               snap[i].dropped_packets, snap[i].dropped_bytes);
                return ret->r = 0;
        }
        case PS_DOCKER_COMMIT:
        case PS_DOCKER_PUSH:
        case PS_DOCKER_VERIFY:
        case PS_DOCKER_REMOVE:
        case PS_DOCKER_PRUNE:
        case PS_DOCKER_PID: {
                struct ps_docker m;
                memcpy(&m, buf, sizeof(m));
                if (privsep_docker_check(h.type, &m, ret) < 0)
                        return ret->r;
                privsep_docker_do(h.type, &m, ret);
                return ret->r;
        }
        case PS_RELAY_OPEN: {
                struct ps_relay_open m;
                memcpy(&m, buf, sizeof(m));
                int r = check_sandbox_msg(m.sandbox_id, m.pad, sizeof(m.pad), ret);
                if (r < 0)
                        return r;
                if (!child_cfg || !child_cfg->relay_docker_root) {
                        snprintf(ret->msg, sizeof(ret->msg), "this process has no [relay] configuration");
                        return ret->r = -ENOTCONN;
                }
                return ret->r = relay_open_agent(child_cfg, m.sandbox_id, &child_pass_fd, ret->msg, sizeof(ret->msg));
        }
        case PS_PROXY_SET: {
                _cleanup_free_ struct ps_proxy_set *m = xmalloc(sizeof(*m));
                memcpy(m, buf, sizeof(*m));
                int r = check_sandbox_msg(m->sandbox_id, m->pad, sizeof(m->pad), ret);
                if (r >= 0)
                        r = proxy_set_checked(m, ret);
                explicit_bzero(m, sizeof(*m));
                return r;
        }
        case PS_PROXY_DROP:
        case PS_PROXY_STATS: {
                struct ps_proxy_id m;
                memcpy(&m, buf, sizeof(m));
                int r = check_sandbox_msg(m.sandbox_id, m.pad, sizeof(m.pad), ret);
                if (r < 0)
                        return r;
                if (!child_proxy) {
                        snprintf(ret->msg, sizeof(ret->msg), "the egress proxy is not running");
                        return ret->r = -ENOTCONN;
                }
                if (h.type == PS_PROXY_DROP)
                        return ret->r = proxy_sandbox_drop(child_proxy, m.sandbox_id);
                return proxy_stats_msg(m.sandbox_id, ret);
        }
        case PS_READY:
        case PS_RESULT:
                break;
        }
        return privsep_refuse(ret, "message type %u is not a request", h.type);
}

void privsep_child_handle(enum ps_child kind, const void *buf, size_t len, struct ps_result *ret) {
        (void) child_handle(kind, buf, len, ret);
}

/* ---------------------------------------------------------------- child process */

static volatile sig_atomic_t child_stop;

static void child_on_signal(int sig) {
        (void) sig;
        child_stop = 1;
}

_noreturn_ void privsep_child_main(enum ps_child kind, int fd, const struct agent_config *cfg) {
        struct ps_result res;
        char name[16];
        int r;

        snprintf(name, sizeof(name), "agent-%s", privsep_child_name(kind));
        (void) prctl(PR_SET_NAME, name, 0, 0, 0);
        /* Goes with the parent: also via EOF on fd, this is for a parent stuck elsewhere. */
        (void) prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
        struct sigaction sa = { .sa_handler = child_on_signal };
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        signal(SIGCHLD, SIG_DFL);
        log_ctx_set("PROCESS", privsep_child_name(kind));

        privsep_result_init(&res, PS_READY, 0);
        child_cfg = cfg;
        /* Only the docker and lookup processes keep the supplementary groups (the docker group:
         * root on the host through the socket); the others have no use for them. */
        r = kind == PS_CHILD_DOCKER || kind == PS_CHILD_LOOKUP ? 0 : groups_drop();
        if (r < 0)
                snprintf(res.msg, sizeof(res.msg), "cannot drop the supplementary groups: %s", strerror(-r));
        else if ((r = caps_drop_except(kind == PS_CHILD_EGRESS  ? UINT64_C(1) << CAP_NET_ADMIN
                                       : kind == PS_CHILD_RELAY ? UINT64_C(1) << CAP_DAC_OVERRIDE
                                                                : 0)) < 0)
                snprintf(res.msg, sizeof(res.msg), "cannot drop capabilities: %s", strerror(-r));
        else if (kind == PS_CHILD_EGRESS) {
                struct egress_config ec = {
                        .table = cfg->egress_table,
                        .bridges = (const char *const *) cfg->egress_bridges,
                        .deny_cidrs = (const char *const *) cfg->egress_deny,
                        .dns_resolver = cfg->egress_dns,
                        .priority = (int) cfg->egress_priority,
                        .proxy_port = cfg->proxy_enabled ? (uint16_t) cfg->proxy_port : 0,
                };
                struct err err = { 0 };
                r = egress_init(&ec, &err);
                snprintf(res.msg, sizeof(res.msg), "%s", err.message);
        } else if (kind == PS_CHILD_DOCKER && cfg && cfg->snap_registry)
                r = privsep_docker_init(cfg, res.msg, sizeof(res.msg));
        else if (kind == PS_CHILD_LOOKUP && cfg)
                r = privsep_lookup_init(cfg, res.msg, sizeof(res.msg));
        else if (kind == PS_CHILD_PROXY && cfg) {
                struct proxy_config pc = {
                        .port = (uint16_t) cfg->proxy_port,
                        .upstream_ca_file = cfg->proxy_ca_file && *cfg->proxy_ca_file ? cfg->proxy_ca_file : NULL,
                        .max_conns_per_sandbox = (unsigned) cfg->proxy_max_per_sandbox,
                        .max_conns = (unsigned) cfg->proxy_max_conns,
                };
                struct err err = { 0 };
                r = proxy_new(&pc, &child_proxy, &err);
                if (r >= 0)
                        r = proxy_start(child_proxy, &err);
                snprintf(res.msg, sizeof(res.msg), "%s", err.message);
        }
        res.r = r;
        if (privsep_send_all(fd, &res, sizeof(res)) < 0 || r < 0)
                _exit(r < 0 ? 1 : 0);

        const size_t rmax = recv_max(kind);
        _cleanup_free_ uint8_t *buf = xmalloc(rmax);
        while (!child_stop) {
                ssize_t n = recv(fd, buf, rmax, MSG_TRUNC);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        log_error_errno(errno, "%s process: cannot read from the agent: %m", privsep_child_name(kind));
                        _exit(1);
                }
                if (n == 0)
                        break;  /* the parent is gone */
                if ((size_t) n >= rmax) {
                        struct ps_hdr h;
                        memcpy(&h, buf, sizeof(h));     /* the start of it did arrive */
                        privsep_result_init(&res, PS_RESULT, h.seq);
                        privsep_refuse(&res, "a %zd byte message is larger than any request", n);
                } else
                        privsep_child_handle(kind, buf, (size_t) n, &res);
                if (res.r == -EBADMSG)
                        log_warning("%s process refused a malformed request: %s", privsep_child_name(kind), res.msg);
                int sent = child_pass_fd >= 0 ? fd_send_msg(fd, &res, sizeof(res), child_pass_fd)
                                              : privsep_send_all(fd, &res, sizeof(res));
                if (child_pass_fd >= 0) {
                        close(child_pass_fd);
                        child_pass_fd = -1;
                }
                if (sent < 0)
                        _exit(1);
        }
        _exit(0);
}
