/* admin.c — `controld admin -f CONF ...`: operator commands against the same store.
 *
 *   account create NAME [--plan PLAN]   prints the account id (existing one if NAME exists)
 *   account list
 *   key issue ACCOUNT [--e2b]           prints a new API key once (only its hash is stored);
 *                                       --e2b: shaped e2b_<40 hex>, as E2B's SDKs require
 *   key list ACCOUNT
 *   key revoke KEY_ID|PREFIX
 *   sandbox list [--status S] [--account ACCOUNT]
 *   sandbox destroy ID                  force-destroys through the scheduler driver
 *   backup PATH                         online, consistent copy of the store (controld may run)
 *   node list                           nodes: drained or not, live sandboxes, agent liveness
 *   node drain ID | node undrain ID     stop / resume placing new sandboxes on a node
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "log.h"
#include "strutil.h"
#include "sandbox.h"

static void admin_usage(void) {
        fprintf(stderr,
                "usage: controld admin -f CONF account create NAME [--plan PLAN]\n"
                "       controld admin -f CONF account list\n"
                "       controld admin -f CONF account plan ACCOUNT PLAN\n"
                "       controld admin -f CONF account limits ACCOUNT [KEY=N|KEY=plan ...]\n"
                "       controld admin -f CONF key issue ACCOUNT [--e2b]\n"
                "       controld admin -f CONF key list ACCOUNT\n"
                "       controld admin -f CONF key revoke KEY_ID|PREFIX\n"
                "       controld admin -f CONF sandbox list [--status STATUS] [--account ACCOUNT]\n"
                "       controld admin -f CONF sandbox destroy SANDBOX_ID\n"
                "       controld admin -f CONF backup PATH\n"
                "       controld admin -f CONF node list\n"
                "       controld admin -f CONF node drain|undrain NODE_ID\n"
                "       controld admin -f CONF pool [list]\n"
                "ACCOUNT is an account id or name. limits KEY is one of max_concurrent, max_cpu,\n"
                "max_memory, max_disk, max_volume_gb, max_volumes; KEY=plan goes back to the plan's amount.\n");
}

static int resolve_account(struct ctl *c, const char *k, struct account *ret) {
        int r = store_account_get(c->store, k, ret);
        if (r == -ENOENT)
                r = store_account_by_name(c->store, k, ret);
        if (r < 0)
                fprintf(stderr, "No account '%s'\n", k);
        return r;
}

static int print_account(const struct account *a, void *ud) {
        char ts[32];
        (void) ud;
        format_rfc3339_ms(a->created_at, ts);
        printf("%s\t%s\t%s\t%s\n", a->id, a->name, a->plan, ts);
        return 0;
}

static int print_key(const char *id, const char *prefix, int64_t created, int64_t revoked, void *ud) {
        char ts[32];
        (void) ud;
        format_rfc3339_ms(created, ts);
        printf("%s\t%s...\t%s\t%s\n", id, prefix, ts, revoked ? "revoked" : "active");
        return 0;
}

static bool name_ok(const char *s) {
        size_t n = strlen(s);
        if (n < 1 || n > 64)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
                      s[i] == '-' || s[i] == '_' || s[i] == '.' || s[i] == '@'))
                        return false;
        return true;
}

/* Prints each limit the account runs under and whether its plan or the account sets it. */
static int print_limits(struct ctl *c, const struct account *a) {
        struct plan buf;
        const struct plan *p = config_account_plan(c->cfg, a, &buf);
        if (!p) {
                fprintf(stderr, "Account %s has plan '%s', which %s does not configure\n", a->name, a->plan, c->cfg->path);
                return -ENOENT;
        }
        printf("plan\t%s\n", a->plan);
        for (size_t k = 0; k < _PLAN_LIMIT_MAX; k++)
                printf("%s\t%lld\t%s\n", config_plan_limits[k].key, (long long) *config_plan_limit(&buf, k),
                       a->limits[k] >= 0 ? "account" : "plan");
        return 0;
}

/* KEY=N or KEY=plan, checked against the range the config itself allows for KEY. */
static int parse_limit(const char *arg, enum plan_limit *ret_k, int64_t *ret_v) {
        const char *eq = strchr(arg, '=');
        char key[32];
        if (!eq || (size_t) (eq - arg) >= sizeof(key)) {
                fprintf(stderr, "'%s': expected KEY=N or KEY=plan\n", arg);
                return -EINVAL;
        }
        snprintf(key, sizeof(key), "%.*s", (int) (eq - arg), arg);
        int k = config_plan_limit_from_key(key);
        if (k < 0) {
                fprintf(stderr, "'%s' is not a plan limit (max_concurrent, max_cpu, max_memory, max_disk, max_volume_gb, "
                                "max_volumes)\n", key);
                return -EINVAL;
        }
        const struct plan_limit_info *l = &config_plan_limits[k];
        int64_t v = -1;
        if (strcmp(eq + 1, "plan") != 0 && (safe_atoi64(eq + 1, &v) < 0 || v < l->min || v > l->max)) {
                fprintf(stderr, "%s must be an integer from %lld to %lld, or 'plan'\n", key, (long long) l->min,
                        (long long) l->max);
                return -EINVAL;
        }
        *ret_k = (enum plan_limit) k;
        *ret_v = v;
        return 0;
}

static int account_limits(struct ctl *c, const char *who, int n, char **args) {
        _cleanup_(account_clear) struct account a = { 0 };
        enum plan_limit keys[_PLAN_LIMIT_MAX * 4];
        int64_t vals[ELEMENTSOF(keys)];
        int r;
        if ((size_t) n > ELEMENTSOF(keys)) {
                fprintf(stderr, "Too many limits at once (at most %zu)\n", ELEMENTSOF(keys));
                return -E2BIG;
        }
        /* All checked before any is written: a typo changes nothing. */
        for (int i = 0; i < n; i++)
                if ((r = parse_limit(args[i], &keys[i], &vals[i])) < 0)
                        return r;
        if ((r = resolve_account(c, who, &a)) < 0)
                return r;
        for (int i = 0; i < n; i++)
                if ((r = store_account_set_limit(c->store, a.id, keys[i], vals[i])) < 0) {
                        fprintf(stderr, "Failed to set %s: %s\n", config_plan_limits[keys[i]].key, strerror(-r));
                        return r;
                }
        account_clear(&a);
        if ((r = resolve_account(c, who, &a)) < 0)
                return r;
        return print_limits(c, &a);
}

static int account_plan(struct ctl *c, const char *who, const char *plan) {
        _cleanup_(account_clear) struct account a = { 0 };
        int r;
        if (!config_plan(c->cfg, plan)) {
                fprintf(stderr, "No plan '%s' in %s\n", plan, c->cfg->path);
                return -EINVAL;
        }
        if ((r = resolve_account(c, who, &a)) < 0)
                return r;
        if ((r = store_account_set_plan(c->store, a.id, plan)) < 0) {
                fprintf(stderr, "Failed to set the plan: %s\n", strerror(-r));
                return r;
        }
        account_clear(&a);
        if ((r = resolve_account(c, who, &a)) < 0)
                return r;
        return print_limits(c, &a);
}

static int cmd_account(struct ctl *c, int argc, char **argv) {
        if (argc >= 1 && !strcmp(argv[0], "list"))
                return store_account_foreach(c->store, print_account, NULL);
        if (argc >= 2 && !strcmp(argv[0], "limits"))
                return account_limits(c, argv[1], argc - 2, argv + 2);
        if (argc == 3 && !strcmp(argv[0], "plan"))
                return account_plan(c, argv[1], argv[2]);
        if (argc >= 2 && !strcmp(argv[0], "create")) {
                const char *name = argv[1], *plan = c->cfg->default_plan;
                struct account a = { 0 };
                for (int i = 2; i < argc; i++) {
                        if (!strcmp(argv[i], "--plan") && i + 1 < argc)
                                plan = argv[++i];
                        else {
                                admin_usage();
                                return -EINVAL;
                        }
                }
                if (!name_ok(name)) {
                        fprintf(stderr, "Account name must be 1-64 characters of letters, digits, '-', '_', '.', '@'\n");
                        return -EINVAL;
                }
                if (!config_plan(c->cfg, plan)) {
                        fprintf(stderr, "No plan '%s' in %s\n", plan, c->cfg->path);
                        return -EINVAL;
                }
                int r = store_account_create(c->store, name, plan, &a);
                if (r == -EEXIST)
                        r = store_account_by_name(c->store, name, &a);
                if (r < 0) {
                        fprintf(stderr, "Failed to create account: %s\n", strerror(-r));
                        return r;
                }
                printf("%s\n", a.id);
                account_clear(&a);
                return 0;
        }
        admin_usage();
        return -EINVAL;
}

static int cmd_key(struct ctl *c, int argc, char **argv) {
        struct account a = { 0 };
        int r;
        bool e2b = argc == 3 && !strcmp(argv[0], "issue") && !strcmp(argv[2], "--e2b");
        if ((argc == 2 || e2b) && !strcmp(argv[0], "issue")) {
                char tok[65], key[80], hash[65], id[25], prefix[16];
                if ((r = resolve_account(c, argv[1], &a)) < 0)
                        return r;
                /* E2B's SDKs take only keys shaped e2b_<hex> (random_token is hex) */
                random_token(tok, e2b ? 20 : 24);
                snprintf(key, sizeof(key), "%s_%s", e2b ? "e2b" : "pdk", tok);
                sha256_hex(key, strlen(key), hash);
                snprintf(prefix, sizeof(prefix), "%.12s", key);
                r = store_key_add(c->store, a.id, hash, prefix, id);
                account_clear(&a);
                if (r < 0) {
                        fprintf(stderr, "Failed to store the key: %s\n", strerror(-r));
                        return r;
                }
                printf("%s\n", key);
                fprintf(stderr, "Key %s issued (prefix %s). It is shown only once.\n", id, prefix);
                return 0;
        }
        if (argc == 2 && !strcmp(argv[0], "list")) {
                if ((r = resolve_account(c, argv[1], &a)) < 0)
                        return r;
                r = store_key_foreach(c->store, a.id, print_key, NULL);
                account_clear(&a);
                return r;
        }
        if (argc == 2 && !strcmp(argv[0], "revoke")) {
                r = store_key_revoke(c->store, argv[1]);
                if (r == -ENOENT)
                        fprintf(stderr, "No active key with id or prefix '%s'\n", argv[1]);
                else if (r >= 0)
                        printf("revoked\n");
                return r;
        }
        admin_usage();
        return -EINVAL;
}

static int cmd_sandbox(struct ctl *c, int argc, char **argv) {
        if (argc >= 1 && !strcmp(argv[0], "list")) {
                int status = -1;
                struct account a = { 0 };
                bool have_acc = false;
                for (int i = 1; i < argc; i++) {
                        if (!strcmp(argv[i], "--status") && i + 1 < argc) {
                                if ((status = sb_status_from_str(argv[++i])) < 0) {
                                        fprintf(stderr, "Unknown status '%s'\n", argv[i]);
                                        return -EINVAL;
                                }
                        } else if (!strcmp(argv[i], "--account") && i + 1 < argc) {
                                if (resolve_account(c, argv[++i], &a) < 0)
                                        return -ENOENT;
                                have_acc = true;
                        } else {
                                admin_usage();
                                return -EINVAL;
                        }
                }
                struct sandbox *sb = NULL;
                size_t n = 0;
                int r = store_sandbox_list_status(c->store, have_acc ? a.id : NULL, status, &sb, &n);
                account_clear(&a);
                if (r < 0)
                        return r;
                for (size_t i = 0; i < n; i++) {
                        char ts[32];
                        format_rfc3339_ms(sb[i].created_at, ts);
                        printf("%s\t%s\t%s\t%s\t%s\t%s\n", sb[i].id, sb[i].account_id, sb_status_str(sb[i].status),
                               sb[i].template_name, sb[i].name, ts);
                }
                sandbox_array_free(sb, n);
                return 0;
        }
        if (argc == 2 && !strcmp(argv[0], "destroy")) {
                struct err e = { 0 };
                if (!hexid_valid(argv[1])) {
                        fprintf(stderr, "Invalid sandbox id '%s'\n", argv[1]);
                        return -EINVAL;
                }
                if (sandbox_destroy(c, argv[1], "user", &e) < 0) {
                        fprintf(stderr, "%s\n", e.message);
                        return -EIO;
                }
                printf("destroyed\n");
                return 0;
        }
        admin_usage();
        return -EINVAL;
}

/* An agent that answered within this long is "up": controld pings every node each 30 s
 * (background.c) and an agent's node.sync counts too. */
#define NODE_UP_WITHIN_MS 90000

/* node list: id, active|drained, live sandboxes, agent up|down|never, last contact.
 * node drain|undrain ID: recorded in the store, which the running controld reads on every
 * create and resume; a multi-node driver is told too (Nomad: node eligibility), first, so
 * a failure there records nothing. A single-node driver knows only its own node. */
static int cmd_node(struct ctl *c, int argc, char **argv) {
        if (argc == 1 && !strcmp(argv[0], "list")) {
                struct node_info *n = NULL;
                size_t k = 0;
                int64_t now = now_ms();
                int r = store_node_list(c->store, &n, &k);
                if (r < 0) {
                        fprintf(stderr, "Failed to read the nodes: %s\n", strerror(-r));
                        return r;
                }
                /* The docker driver's one node is listed before anything was heard from it. */
                bool own = strcmp(c->cfg->driver, "docker") != 0;
                for (size_t i = 0; i < k && !own; i++)
                        own = !strcmp(n[i].id, c->cfg->docker_node_id);
                if (!own) {
                        n = xrealloc(n, (k + 1) * sizeof(*n));
                        n[k] = (struct node_info) { 0 };
                        snprintf(n[k++].id, sizeof(n->id), "%s", c->cfg->docker_node_id);
                }
                for (size_t i = 0; i < k; i++) {
                        char ts[32] = "-";
                        const char *agent = "never";
                        if (n[i].last_contact_at > 0) {
                                format_rfc3339_ms(n[i].last_contact_at, ts);
                                agent = now - n[i].last_contact_at <= NODE_UP_WITHIN_MS ? "up" : "down";
                        }
                        printf("%s\t%s\t%lld\t%s\t%s\n", n[i].id, n[i].drained ? "drained" : "active",
                               (long long) n[i].live_sandboxes, agent, ts);
                }
                free(n);
                return 0;
        }
        if (argc == 2 && (!strcmp(argv[0], "drain") || !strcmp(argv[0], "undrain"))) {
                bool drain = !strcmp(argv[0], "drain");
                const char *id = argv[1];
                struct err err = { 0 };
                size_t len = strlen(id);
                if (len < 1 || len > 128 || strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != len) {
                        fprintf(stderr, "Invalid node id '%s'\n", id);
                        return -EINVAL;
                }
                if (c->drv && c->drv->ops->node_set_eligible) {
                        int r = c->drv->ops->node_set_eligible(c->drv, id, !drain, &err);
                        if (r < 0) {
                                fprintf(stderr, "Failed to mark node %s %s: %s\n", id, drain ? "ineligible" : "eligible", err.message);
                                return r;
                        }
                } else if (strcmp(id, c->cfg->docker_node_id) != 0) {
                        fprintf(stderr, "No node '%s': the %s driver has the single node '%s'\n", id, c->cfg->driver,
                                c->cfg->docker_node_id);
                        return -ENOENT;
                }
                int r = store_node_set_drained(c->store, id, drain, now_ms());
                if (r < 0) {
                        fprintf(stderr, "Failed to record the node: %s\n", strerror(-r));
                        return r;
                }
                printf("%s\n", drain ? "drained" : "undrained");
                return 0;
        }
        admin_usage();
        return -EINVAL;
}

static int fsync_path(const char *path, int flags) {
        int fd = open(path, flags | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int r = fsync(fd) < 0 ? -errno : 0;
        close(fd);
        return r;
}

static void sqlite3_closep(sqlite3 **db) {
        if (*db)
                sqlite3_close_v2(*db);
}

/* backup PATH: an online, consistent copy of the store while controld keeps serving.
 * sqlite's backup API copies every page inside ONE read transaction of a read-only
 * connection (the store is in WAL mode: controld's writes go on meanwhile and land after the
 * snapshot). The copy is written to PATH.tmp-PID next to PATH with mode 0600 (it holds key
 * hashes), switched to a self-contained rollback journal, checked (quick_check), fsynced and
 * renamed over PATH: PATH is either the old file or a complete backup, never half of one.
 * Restore: stop controld, copy the file to store.path (removing its -wal and -shm), start. */
static int cmd_backup(const char *db_path, const char *dest) {
        _cleanup_(sqlite3_closep) sqlite3 *src = NULL;
        _cleanup_(sqlite3_closep) sqlite3 *dst = NULL;
        _cleanup_free_ char *tmp = NULL, *dir_copy = NULL;
        struct stat a, b;
        int rc;

        if (stat(db_path, &a) < 0) {
                fprintf(stderr, "No store at %s: %s\n", db_path, strerror(errno));
                return -errno;
        }
        if (stat(dest, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
                fprintf(stderr, "%s is the store itself; give another path\n", dest);
                return -EINVAL;
        }
        rc = sqlite3_open_v2(db_path, &src, SQLITE_OPEN_READONLY, NULL);
        if (rc != SQLITE_OK) {
                fprintf(stderr, "Cannot open the store %s: %s\n", db_path, src ? sqlite3_errmsg(src) : sqlite3_errstr(rc));
                return -EIO;
        }
        sqlite3_busy_timeout(src, 10000);

        tmp = xasprintf("%s.tmp-%d", dest, (int) getpid());
        (void) unlink(tmp);
        mode_t old_mask = umask(077);
        rc = sqlite3_open_v2(tmp, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
        umask(old_mask);
        if (rc != SQLITE_OK) {
                fprintf(stderr, "Cannot create %s: %s\n", tmp, dst ? sqlite3_errmsg(dst) : sqlite3_errstr(rc));
                return -EIO;
        }
        sqlite3_backup *bk = sqlite3_backup_init(dst, "main", src, "main");
        if (!bk) {
                fprintf(stderr, "Cannot start the backup: %s\n", sqlite3_errmsg(dst));
                goto fail;
        }
        /* -1: all pages in one step, so the copy is one snapshot. BUSY/LOCKED only while
         * a checkpoint or recovery holds a lock: retry for up to ~10 s. */
        for (int tries = 0;; tries++) {
                rc = sqlite3_backup_step(bk, -1);
                if ((rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && tries < 100) {
                        usleep(100 * 1000);
                        continue;
                }
                break;
        }
        int pages = sqlite3_backup_pagecount(bk);
        sqlite3_backup_finish(bk);
        if (rc != SQLITE_DONE) {
                fprintf(stderr, "Backup failed: %s\n", sqlite3_errstr(rc));
                goto fail;
        }
        {
                sqlite3_stmt *st = NULL;
                bool good = false;
                if (sqlite3_exec(dst, "PRAGMA journal_mode=DELETE;", NULL, NULL, NULL) == SQLITE_OK &&
                    sqlite3_prepare_v2(dst, "PRAGMA quick_check", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
                        good = !strcmp((const char *) sqlite3_column_text(st, 0), "ok");
                sqlite3_finalize(st);
                if (!good) {
                        fprintf(stderr, "The copy in %s failed sqlite's quick_check; the store itself may be damaged\n", tmp);
                        goto fail;
                }
        }
        sqlite3_close_v2(TAKE_PTR(dst));
        int r = fsync_path(tmp, O_RDONLY);
        if (r >= 0 && rename(tmp, dest) < 0)
                r = -errno;
        if (r < 0) {
                fprintf(stderr, "Cannot write %s: %s\n", dest, strerror(-r));
                (void) unlink(tmp);
                return r;
        }
        dir_copy = xstrdup(dest);
        (void) fsync_path(dirname(dir_copy), O_RDONLY | O_DIRECTORY);
        printf("%s\n", dest);
        fprintf(stderr, "Backed up %s to %s (%d pages).\n", db_path, dest, pages);
        return 0;
fail:
        (void) unlink(tmp);
        return -EIO;
}

/* `pool`: each configured pool (name, template, specs, egress class, target size), then
 * each member (id, pool, state, age, node, container). */
static int cmd_pool(struct ctl *c, int argc, char **argv) {
        (void) argv;
        if (argc > 1 || (argc == 1 && strcmp(argv[0], "list") != 0)) {
                admin_usage();
                return -EINVAL;
        }
        struct pool_member *a = NULL;
        size_t n = 0;
        int r = store_pool_list(c->store, NULL, &a, &n);
        if (r < 0) {
                fprintf(stderr, "Failed to read the pool members: %s\n", strerror(-r));
                return r;
        }
        int64_t now = now_ms();
        for (size_t i = 0; i < c->cfg->n_pools; i++) {
                const struct pool_conf *p = &c->cfg->pools[i];
                size_t ready = 0, starting = 0;
                for (size_t k = 0; k < n; k++)
                        if (!strcmp(a[k].pool, p->name))
                                (*(strcmp(a[k].state, "ready") ? &starting : &ready))++;
                printf("pool\t%s\ttemplate=%s\tcpu=%lld\tmemory=%lld\tdisk=%lld\tegress=%s\tsize=%lld\tready=%zu\tstarting=%zu\n",
                       p->name, p->template_name, (long long) p->cpu, (long long) p->memory, (long long) p->disk,
                       p->networked ? "networked" : "deny_all", (long long) p->size, ready, starting);
        }
        for (size_t k = 0; k < n; k++)
                printf("member\t%s\t%s\t%s\t%llds\t%s\t%s\n", a[k].id, a[k].pool, a[k].state,
                       (long long) ((now - a[k].created_at) / 1000), a[k].node_id ?: "-", a[k].container_id ?: "-");
        pool_member_array_free(a, n);
        return 0;
}

int admin_main(int argc, char **argv) {
        const char *conf = "/etc/paddock/controld.conf";
        struct ctl c;
        int i = 1, r;

        log_open("controld-admin", LOG_TARGET_STDERR);
        log_set_max_level(LOG_WARNING);
        while (i < argc && argv[i][0] == '-') {
                if (!strcmp(argv[i], "-f") && i + 1 < argc) {
                        conf = argv[i + 1];
                        i += 2;
                } else {
                        admin_usage();
                        return 2;
                }
        }
        if (i >= argc || !strcmp(argv[i], "help")) {
                admin_usage();
                return i >= argc ? 2 : 0;
        }
        if (!strcmp(argv[i], "backup")) {
                /* Reads the store through its own read-only connection: no migration, no
                 * driver, and it works while controld holds the store. */
                struct err err = { 0 };
                struct config *cfg = NULL;
                if (i + 2 != argc) {
                        admin_usage();
                        return 2;
                }
                if (config_load(conf, &cfg, &err) < 0) {
                        fprintf(stderr, "%s\n", err.message);
                        return 1;
                }
                r = cmd_backup(cfg->db_path, argv[i + 1]);
                config_free(cfg);
                return r < 0 ? 1 : 0;
        }
        bool needs_driver = !strcmp(argv[i], "sandbox") && i + 1 < argc && !strcmp(argv[i + 1], "destroy");
        if (!strcmp(argv[i], "node") && i + 1 < argc && strcmp(argv[i + 1], "list") != 0) {
                /* Only a multi-node driver has anything to be told: the docker driver's single node
                 * is refused by controld from the store alone (and needs no Docker access here). */
                struct err err = { 0 };
                struct config *cfg = NULL;
                if (config_load(conf, &cfg, &err) < 0) {
                        fprintf(stderr, "%s\n", err.message);
                        return 1;
                }
                needs_driver = strcmp(cfg->driver, "docker") != 0;
                config_free(cfg);
        }
        r = ctl_open(&c, conf, needs_driver);
        if (r < 0) {
                ctl_close(&c);
                return 1;
        }
        if (!strcmp(argv[i], "account"))
                r = cmd_account(&c, argc - i - 1, argv + i + 1);
        else if (!strcmp(argv[i], "key"))
                r = cmd_key(&c, argc - i - 1, argv + i + 1);
        else if (!strcmp(argv[i], "sandbox"))
                r = cmd_sandbox(&c, argc - i - 1, argv + i + 1);
        else if (!strcmp(argv[i], "node"))
                r = cmd_node(&c, argc - i - 1, argv + i + 1);
        else if (!strcmp(argv[i], "pool"))
                r = cmd_pool(&c, argc - i - 1, argv + i + 1);
        else {
                admin_usage();
                r = -EINVAL;
        }
        ctl_close(&c);
        return r < 0 ? 1 : 0;
}
