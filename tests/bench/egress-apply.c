/* egress-apply — the cost of one egress apply with N sandboxes already on the node,
 * against `nft -f` of the equivalent change, measured side by side in one run.
 *
 *   egress-apply new|tighten <sandboxes> <applies>
 *
 * Runs in a network namespace of its own (nothing of the host's ruleset is touched):
 * a bridge, egress_init, N sandboxes with a restricted policy (5 entries) each; then
 * <applies> applies, each interleaved with `nft -f` of a file that makes the same
 * change, one nft process per change as an operator's script would:
 *   new      the policy of a sandbox arriving on the node (chain, set, rules, map
 *            element), removed again untimed so that N stays N;
 *   tighten  a sandbox's allowlist replaced by another (flush and refill chain and
 *            set); ours then also sweeps conntrack for the connections it forbids,
 *            which nft -f does not do (a dump walks the kernel's whole conntrack hash).
 * Prints "N ours_p50 ours_p99 nft_p50 nft_p99" in milliseconds. Ours also includes
 * the generation check and the dump of the map that nft -f does without.
 */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "egress.h"
#include "strutil.h"

#define BRIDGE "pdkbench0"

static int run(char *const argv[]) {
        pid_t p = fork();
        if (p < 0)
                return -errno;
        if (p == 0) {
                execvp(argv[0], argv);
                _exit(127);
        }
        int st = 0;
        if (waitpid(p, &st, 0) < 0)
                return -errno;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int cmp_d(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y ? 1 : 0;
}

static double pct(double *v, int n, int p) {
        qsort(v, (size_t) n, sizeof(*v), cmp_d);
        int i = (n - 1) * p / 100;
        return v[i];
}

static double now_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

static void sbx_id(int i, char id[EGRESS_ID_LEN + 1]) {
        snprintf(id, EGRESS_ID_LEN + 1, "%024x", (unsigned) i + 1);
}

static uint32_t sbx_ip(int i) {
        return (169u << 24) | (254u << 16) | ((uint32_t) (i / 250 + 1) << 8) | (uint32_t) (i % 250 + 2);
}

/* Five entries that change with k: four hosts and a /24. */
static void allow_for(int k, struct pj_allow_entry e[5]) {
        for (int j = 0; j < 4; j++)
                e[j] = (struct pj_allow_entry) { .kind = PJ_ALLOW_IPV4, .addr = (203u << 24) | (113u << 8) | (uint32_t) ((k * 4 + j) % 250 + 1), .prefix = 32 };
        e[4] = (struct pj_allow_entry) { .kind = PJ_ALLOW_CIDR, .addr = (198u << 24) | (51u << 16) | ((uint32_t) (k % 200) << 8), .prefix = 24 };
}

static int apply(int i, int k, struct err *err) {
        char id[EGRESS_ID_LEN + 1];
        struct pj_allow_entry e[5];
        sbx_id(i, id);
        allow_for(k, e);
        struct egress_policy p = { .sandbox_id = id, .ip = sbx_ip(i), .mode = PJ_EGRESS_RESTRICTED, .allow = e, .n_allow = 5 };
        return egress_apply(&p, err);
}

static void ip_str(uint32_t a, char buf[16]) {
        snprintf(buf, 16, "%u.%u.%u.%u", a >> 24, (a >> 16) & 0xff, (a >> 8) & 0xff, a & 0xff);
}

static void write_nft(const char *path, int i, int k, bool fresh) {
        char id[EGRESS_ID_LEN + 1], ip[16], a[16];
        struct pj_allow_entry e[5];
        sbx_id(i, id);
        allow_for(k, e);
        ip_str(sbx_ip(i), ip);
        FILE *f = fopen(path, "w");
        if (!f)
                exit(2);
        if (fresh)
                fprintf(f, "add chain inet paddock sbx_%s\nadd set inet paddock allow_%s { type ipv4_addr; flags interval; }\n", id, id);
        else
                fprintf(f, "flush chain inet paddock sbx_%s\nflush set inet paddock allow_%s\n", id, id);
        fprintf(f, "add element inet paddock allow_%s { ", id);
        for (int j = 0; j < 5; j++) {
                ip_str(e[j].addr, a);
                fprintf(f, "%s%s/%d", j ? ", " : "", a, e[j].prefix);
        }
        fprintf(f, " }\nadd rule inet paddock sbx_%s counter\nadd rule inet paddock sbx_%s ip daddr @allow_%s counter accept\n"
                   "add rule inet paddock sbx_%s counter drop\nadd element inet paddock sandboxes { %s : jump sbx_%s }\n",
                id, id, id, id, ip, id);
        fclose(f);
}

int main(int argc, char **argv) {
        if (argc != 4 || (strcmp(argv[1], "new") != 0 && strcmp(argv[1], "tighten") != 0)) {
                fprintf(stderr, "usage: egress-apply new|tighten <sandboxes> <applies>\n");
                return 2;
        }
        bool fresh = !strcmp(argv[1], "new");
        int n = atoi(argv[2]), k = atoi(argv[3]);
        if (n < 1 || n + 2 * k > 60000 || k < 2) {
                fprintf(stderr, "egress-apply: 1..60000 sandboxes, at least 2 applies\n");
                return 2;
        }
        if (unshare(CLONE_NEWNET) < 0) {
                fprintf(stderr, "egress-apply: unshare(CLONE_NEWNET): %s\n", strerror(errno));
                return 1;
        }
        if (run((char *[]) { "ip", "link", "add", BRIDGE, "type", "bridge", NULL }) != 0)
                return 1;
        char path[] = "/tmp/egress-apply.XXXXXX";
        struct err err = { 0 };
        static const char *const bridges[] = { BRIDGE, NULL };
        struct egress_config cfg = { .table = "paddock", .bridges = bridges, .priority = -10 };
        if (egress_init(&cfg, &err) < 0) {
                fprintf(stderr, "egress-apply: egress_init: %s\n", err.message);
                return 1;
        }
        for (int i = 0; i < n; i++)
                if (apply(i, i, &err) < 0) {
                        fprintf(stderr, "egress-apply: populating sandbox %d: %s\n", i, err.message);
                        return 1;
                }
        int fd = mkstemp(path);
        if (fd < 0)
                return 1;
        close(fd);
        double *ours = calloc((size_t) k, sizeof(double)), *nft = calloc((size_t) k, sizeof(double));
        if (!ours || !nft)
                return 1;
        for (int r = 0; r < k; r++) {
                int i = fresh ? n + 2 * r : (r * 7919) % n, j = fresh ? n + 2 * r + 1 : i;
                char id[EGRESS_ID_LEN + 1];
                double t0 = now_us();
                if (apply(i, n + r, &err) < 0) {
                        fprintf(stderr, "egress-apply: apply: %s\n", err.message);
                        unlink(path);
                        return 1;
                }
                ours[r] = (now_us() - t0) / 1000.0;
                write_nft(path, j, n + r + k, fresh);
                t0 = now_us();
                if (run((char *[]) { "nft", "-f", path, NULL }) != 0) {
                        fprintf(stderr, "egress-apply: nft -f failed\n");
                        unlink(path);
                        return 1;
                }
                nft[r] = (now_us() - t0) / 1000.0;
                for (int x = 0; fresh && x < 2; x++) {
                        sbx_id(x ? j : i, id);
                        if (egress_remove(id, sbx_ip(x ? j : i), &err) < 0) {
                                fprintf(stderr, "egress-apply: remove: %s\n", err.message);
                                unlink(path);
                                return 1;
                        }
                }
        }
        unlink(path);
        printf("%d %.2f %.2f %.2f %.2f\n", n, pct(ours, k, 50), pct(ours, k, 99), pct(nft, k, 50), pct(nft, k, 99));
        free(ours);
        free(nft);
        return 0;
}
