/* Packaging and operations: the Debian packages (install into a clean root, -n on the installed
 * configs, upgrade, purge), the systemd units (verify, exposure ceilings), the host reference
 * configs in packaging/ (CNI conflists, Nomad client/namespace/node pool), and
 * `controld admin backup` taken while controld serves, then restored.
 * The package and unit cases are in tests/integration/packaging-cases.sh. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "cleanup.h"
#include "ctltest.h"
#include "testlib.h"

static char *slurp(const char *path) {
        FILE *f = fopen(path, "re");
        if (!f)
                test_fail(__FILE__, __LINE__, "cannot read %s: %s", path, strerror(errno));
        size_t cap = 1 << 16, n = 0;
        char *buf = xmalloc(cap);
        size_t k;
        while ((k = fread(buf + n, 1, cap - n - 1, f)) > 0) {
                n += k;
                if (cap - n < 2)
                        buf = xrealloc(buf, cap *= 2);
        }
        fclose(f);
        buf[n] = 0;
        return buf;
}

static void run_case(const char *name) {
        if (geteuid() != 0)
                TEST_SKIP("needs root (dpkg --root chowns files to the package's users)");
        char work[512];
        snprintf(work, sizeof(work), "%s/%s", test_tmpdir(), name);
        char *argv[] = { "tests/integration/packaging-cases.sh", (char *) name, (char *) test_build_path(""), work, NULL };
        _cleanup_free_ char *out = NULL;
        /* stderr of the script goes to ours: FAIL lines show in the log. */
        int r = test_run_capture(argv, &out, 1 << 20);
        fputs(out ? out : "", stdout);
        fflush(stdout);
        ASSERT_EQ(r, 0);
}

TEST_FULL(deb_install_check_upgrade_purge, 300) { run_case("deb"); }

TEST_FULL(units_verify_and_exposure, 300) { run_case("units"); }

/* ---- CNI conflists ---------------------------------------------------------------------- */

static cJSON *load_json(const char *path) {
        _cleanup_free_ char *text = slurp(path);
        cJSON *j = cJSON_Parse(text);
        if (!j)
                test_fail(__FILE__, __LINE__, "%s is not valid JSON near: %.40s", path, cJSON_GetErrorPtr());
        return j;
}

static bool json_true(const cJSON *o, const char *k) { return cJSON_IsTrue(cJSON_GetObjectItem(o, k)); }

static const cJSON *plugin_of_type(const cJSON *conf, const char *type) {
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItem(conf, "plugins")) {
                const cJSON *t = cJSON_GetObjectItem(p, "type");
                if (cJSON_IsString(t) && !strcmp(t->valuestring, type))
                        return p;
        }
        return NULL;
}

static bool has_key_anywhere(const cJSON *j, const char *key) {
        const cJSON *c;
        if (!cJSON_IsObject(j) && !cJSON_IsArray(j))
                return false;
        cJSON_ArrayForEach(c, j) {
                if (c->string && !strcmp(c->string, key))
                        return true;
                if (has_key_anywhere(c, key))
                        return true;
        }
        return false;
}

static bool has_default_route(const cJSON *ipam) {
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItem(ipam, "routes")) {
                const cJSON *d = cJSON_GetObjectItem(r, "dst");
                if (cJSON_IsString(d) && !strcmp(d->valuestring, "0.0.0.0/0"))
                        return true;
        }
        return false;
}

static const char *subnet_of(const cJSON *ipam) {
        const cJSON *ranges = cJSON_GetObjectItem(ipam, "ranges");
        const cJSON *r0 = cJSON_GetArrayItem(cJSON_GetArrayItem(ranges, 0), 0);
        const cJSON *s = cJSON_GetObjectItem(r0, "subnet");
        return cJSON_IsString(s) ? s->valuestring : NULL;
}

/* a.b.c.d/len -> network and mask; false when malformed or host bits are set. */
static bool parse_cidr(const char *s, uint32_t *net, uint32_t *mask) {
        unsigned a, b, c, d, len;
        char tail;
        if (!s || sscanf(s, "%u.%u.%u.%u/%u%c", &a, &b, &c, &d, &len, &tail) != 5 || a > 255 || b > 255 || c > 255 ||
            d > 255 || len < 8 || len > 30)
                return false;
        *net = a << 24 | b << 16 | c << 8 | d;
        *mask = len == 0 ? 0 : ~0u << (32 - len);
        return (*net & ~*mask) == 0;
}

TEST(cni_conflists_for_the_three_egress_profiles) {
        const char *names[] = { "sandbox-no-egress", "sandbox-restricted", "sandbox-open" };
        uint32_t nets[3], masks[3];
        char bridges[3][32];
        for (int i = 0; i < 3; i++) {
                char path[256];
                snprintf(path, sizeof(path), "packaging/cni/%s.conflist", names[i]);
                _cleanup_(cJSON_Deletep) cJSON *conf = load_json(path);
                /* Nomad offers a conflist as cni/<name>: the name must be the profile's. */
                ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(conf, "name")), names[i]);
                ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(conf, "cniVersion")), "1.0.0");
                ASSERT_NOT_NULL(plugin_of_type(conf, "loopback"));
                const cJSON *br = plugin_of_type(conf, "bridge");
                ASSERT_NOT_NULL(br);
                const char *bname = cJSON_GetStringValue(cJSON_GetObjectItem(br, "bridge"));
                ASSERT_NOT_NULL(bname);
                ASSERT_TRUE(strlen(bname) >= 1 && strlen(bname) <= 15);   /* IFNAMSIZ */
                snprintf(bridges[i], sizeof(bridges[i]), "%s", bname);
                const cJSON *ipam = cJSON_GetObjectItem(br, "ipam");
                ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(ipam, "type")), "host-local");
                ASSERT_TRUE(parse_cidr(subnet_of(ipam), &nets[i], &masks[i]));
                /* Nothing that would open ports or bypass the nft forward chain. */
                ASSERT_NULL(plugin_of_type(conf, "portmap"));
                ASSERT_FALSE(json_true(br, "hairpinMode"));
                if (i == 0) {
                        /* no-egress: no gateway, no masquerade, no route, no DNS. */
                        ASSERT_FALSE(json_true(br, "isGateway"));
                        ASSERT_FALSE(json_true(br, "isDefaultGateway"));
                        ASSERT_FALSE(json_true(br, "ipMasq"));
                        ASSERT_FALSE(has_default_route(ipam));
                        const cJSON *routes = cJSON_GetObjectItem(ipam, "routes");
                        ASSERT_TRUE(!routes || cJSON_GetArraySize(routes) == 0);
                        ASSERT_FALSE(has_key_anywhere(conf, "dns"));
                        ASSERT_FALSE(has_key_anywhere(conf, "gateway"));
                } else {
                        /* restricted / open: bridge + gateway + masquerade + default route;
                         * what may leave is nodeagent's nft policy, not the CNI config. */
                        ASSERT_TRUE(json_true(br, "isGateway"));
                        ASSERT_TRUE(json_true(br, "ipMasq"));
                        ASSERT_TRUE(has_default_route(ipam));
                        const cJSON *r0 = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ipam, "ranges"), 0), 0);
                        uint32_t gw, gm;
                        char gwc[40];
                        snprintf(gwc, sizeof(gwc), "%s/30", cJSON_GetStringValue(cJSON_GetObjectItem(r0, "gateway")));
                        /* the gateway is an address inside the subnet */
                        unsigned a, b, c, d;
                        ASSERT_EQ(sscanf(gwc, "%u.%u.%u.%u/", &a, &b, &c, &d), 4);
                        gw = a << 24 | b << 16 | c << 8 | d;
                        gm = masks[i];
                        ASSERT_EQ(gw & gm, nets[i]);
                }
        }
        /* Three distinct bridges (nodeagent's egress.bridges names them) and disjoint subnets. */
        for (int i = 0; i < 3; i++)
                for (int j = i + 1; j < 3; j++) {
                        ASSERT_TRUE(strcmp(bridges[i], bridges[j]) != 0);
                        uint32_t m = masks[i] & masks[j];
                        ASSERT_TRUE((nets[i] & m) != (nets[j] & m));
                }
}

/* ---- a small HCL reader: enough for Nomad's agent, namespace and node pool files --------- */
/* body := (IDENT '=' value | IDENT STRING* '{' body '}')*; value := STRING | NUMBER | true |
 * false | '[' value,* ']' | '{' (KEY ('='|':') value ','?)* '}'. A block becomes an object under
 * its name, then one object level per label; repeated blocks merge. Comments: # // and C. */
struct hcl { const char *p; const char *file; int line; };

static void hcl_skip(struct hcl *h) {
        for (;;) {
                while (*h->p && isspace((unsigned char) *h->p)) {
                        if (*h->p == '\n')
                                h->line++;
                        h->p++;
                }
                if (*h->p == '#' || (h->p[0] == '/' && h->p[1] == '/')) {
                        while (*h->p && *h->p != '\n')
                                h->p++;
                } else if (h->p[0] == '/' && h->p[1] == '*') {
                        const char *e = strstr(h->p + 2, "*/");
                        if (!e)
                                test_fail(h->file, h->line, "unterminated comment");
                        for (; h->p < e + 2; h->p++)
                                h->line += *h->p == '\n';
                } else
                        return;
        }
}

static char *hcl_ident(struct hcl *h) {
        const char *s = h->p;
        while (isalnum((unsigned char) *h->p) || *h->p == '_' || *h->p == '-' || *h->p == '.')
                h->p++;
        if (h->p == s)
                test_fail(h->file, h->line, "HCL: expected a name at '%.20s'", s);
        return strndup(s, (size_t) (h->p - s));
}

static char *hcl_string(struct hcl *h) {
        if (*h->p != '"')
                test_fail(h->file, h->line, "HCL: expected a string at '%.20s'", h->p);
        const char *s = ++h->p;
        while (*h->p && *h->p != '"' && *h->p != '\n')
                h->p += *h->p == '\\' ? 2 : 1;
        if (*h->p != '"')
                test_fail(h->file, h->line, "HCL: unterminated string");
        char *r = strndup(s, (size_t) (h->p - s));
        h->p++;
        return r;
}

static cJSON *hcl_value(struct hcl *h);

static void hcl_merge(cJSON *into, const char *key, cJSON *v) {
        cJSON *old = cJSON_GetObjectItem(into, key);
        if (old && cJSON_IsObject(old) && cJSON_IsObject(v)) {
                while (v->child) {
                        cJSON *c = cJSON_DetachItemViaPointer(v, v->child);
                        hcl_merge(old, c->string, c);
                }
                cJSON_Delete(v);
        } else if (old)
                test_fail(__FILE__, __LINE__, "HCL: '%s' given twice", key);
        else
                cJSON_AddItemToObject(into, key, v);
}

static cJSON *hcl_body(struct hcl *h, char end) {
        cJSON *o = cJSON_CreateObject();
        for (;;) {
                hcl_skip(h);
                if (*h->p == end) {
                        if (end)
                                h->p++;
                        return o;
                }
                if (!*h->p)
                        test_fail(h->file, h->line, "HCL: unexpected end of file");
                _cleanup_free_ char *name = *h->p == '"' ? hcl_string(h) : hcl_ident(h);
                hcl_skip(h);
                if (*h->p == '=' || *h->p == ':') {
                        h->p++;
                        hcl_skip(h);
                        hcl_merge(o, name, hcl_value(h));
                        hcl_skip(h);
                        if (*h->p == ',')
                                h->p++;
                        continue;
                }
                char *labels[4];
                int nl = 0;
                while (*h->p == '"' && nl < 4) {
                        labels[nl++] = hcl_string(h);
                        hcl_skip(h);
                }
                if (*h->p != '{')
                        test_fail(h->file, h->line, "HCL: expected '=' or '{' after '%s'", name);
                h->p++;
                cJSON *v = hcl_body(h, '}');
                for (int i = nl - 1; i >= 0; i--) {
                        cJSON *w = cJSON_CreateObject();
                        cJSON_AddItemToObject(w, labels[i], v);
                        free(labels[i]);
                        v = w;
                }
                hcl_merge(o, name, v);
        }
}

static cJSON *hcl_value(struct hcl *h) {
        if (*h->p == '"') {
                _cleanup_free_ char *s = hcl_string(h);
                return cJSON_CreateString(s);
        }
        if (*h->p == '[') {
                cJSON *a = cJSON_CreateArray();
                h->p++;
                for (;;) {
                        hcl_skip(h);
                        if (*h->p == ']') {
                                h->p++;
                                return a;
                        }
                        cJSON_AddItemToArray(a, hcl_value(h));
                        hcl_skip(h);
                        if (*h->p == ',')
                                h->p++;
                }
        }
        if (*h->p == '{') {
                h->p++;
                return hcl_body(h, '}');
        }
        if (isdigit((unsigned char) *h->p) || *h->p == '-') {
                char *e;
                double d = strtod(h->p, &e);
                h->p = e;
                return cJSON_CreateNumber(d);
        }
        _cleanup_free_ char *w = hcl_ident(h);
        if (!strcmp(w, "true") || !strcmp(w, "false"))
                return cJSON_CreateBool(!strcmp(w, "true"));
        test_fail(h->file, h->line, "HCL: unsupported value '%s'", w);
}

static cJSON *load_hcl(const char *path) {
        _cleanup_free_ char *text = slurp(path);
        struct hcl h = { text, path, 1 };
        return hcl_body(&h, 0);
}

static cJSON *at(cJSON *j, const char *p1, const char *p2, const char *p3) {
        const char *ks[] = { p1, p2, p3 };
        for (int i = 0; i < 3 && ks[i] && j; i++)
                j = cJSON_GetObjectItem(j, ks[i]);
        return j;
}

static bool str_array_has(const cJSON *a, const char *s) {
        const cJSON *e;
        cJSON_ArrayForEach(e, a)
                if (cJSON_IsString(e) && !strcmp(e->valuestring, s))
                        return true;
        return false;
}

TEST(hcl_reader_rejects_what_it_cannot_read) {
        /* The reader must be able to fail, or the checks below prove nothing. */
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                int fd = open("/dev/null", O_WRONLY);
                dup2(fd, 1);
                dup2(fd, 2);
                struct hcl h = { "plugin \"docker\" { config { allow_runtimes = [\"runc\" } }", "inline", 1 };
                cJSON_Delete(hcl_body(&h, 0));
                _exit(0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
        struct hcl ok = { "a = 1 # c\nb \"x\" { c = [\"d\", \"e\"] }\nb \"y\" { f = true }\n", "inline", 1 };
        _cleanup_(cJSON_Deletep) cJSON *j = hcl_body(&ok, 0);
        ASSERT_EQ(cJSON_GetObjectItem(j, "a")->valueint, 1);
        ASSERT_TRUE(str_array_has(at(j, "b", "x", "c"), "e"));
        ASSERT_TRUE(cJSON_IsTrue(at(j, "b", "y", "f")));
}

TEST(nomad_client_plugin_config) {
        _cleanup_(cJSON_Deletep) cJSON *j = load_hcl("packaging/nomad/client-sandbox.hcl");
        cJSON *cfg = at(j, "plugin", "docker", "config");
        ASSERT_NOT_NULL(cfg);
        /* Jobs ask for runtime runsc (deny_all) or runsc-net (CNI networks): both allowed. */
        cJSON *rt = cJSON_GetObjectItem(cfg, "allow_runtimes");
        ASSERT_TRUE(str_array_has(rt, "runsc"));
        ASSERT_TRUE(str_array_has(rt, "runsc-net"));
        /* The job's pids_limit (controld's [docker] pids_limit, 4096) must not exceed the plugin's. */
        cJSON *pl = cJSON_GetObjectItem(cfg, "pids_limit");
        ASSERT_TRUE(cJSON_IsNumber(pl));
        ASSERT_GE(pl->valueint, 4096);
        /* cap_add ALL (inside gVisor) must be within allow_caps. */
        ASSERT_TRUE(str_array_has(cJSON_GetObjectItem(cfg, "allow_caps"), "all"));
        ASSERT_FALSE(cJSON_IsTrue(cJSON_GetObjectItem(cfg, "allow_privileged")));
        /* Enabled for the in-sandbox agent's read-only binary bind: the job spec is controld's,
         * tenants choose no mount. */
        ASSERT_TRUE(cJSON_IsTrue(at(cfg, "volumes", "enabled", NULL)));
        /* The client joins the pool the namespace sends sandboxes to, and only runs docker. */
        ASSERT_STREQ(cJSON_GetStringValue(at(j, "client", "node_pool", NULL)), "sandbox");
        ASSERT_STREQ(cJSON_GetStringValue(at(j, "client", "options", "driver.allowlist")), "docker");
        ASSERT_NOT_NULL(cJSON_GetStringValue(at(j, "client", "cni_config_dir", NULL)));
}

TEST(nomad_namespace_and_node_pool) {
        _cleanup_(cJSON_Deletep) cJSON *ns = load_hcl("packaging/nomad/namespace-sandboxes.hcl");
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(ns, "name")), "sandboxes");
        ASSERT_STREQ(cJSON_GetStringValue(at(ns, "node_pool_config", "default", NULL)), "sandbox");
        cJSON *allowed = at(ns, "node_pool_config", "allowed", NULL);
        ASSERT_EQ(cJSON_GetArraySize(allowed), 1);
        ASSERT_TRUE(str_array_has(allowed, "sandbox"));
        ASSERT_TRUE(str_array_has(at(ns, "capabilities", "enabled_task_drivers", NULL), "docker"));
        ASSERT_EQ(cJSON_GetArraySize(at(ns, "capabilities", "enabled_task_drivers", NULL)), 1);
        ASSERT_TRUE(str_array_has(at(ns, "capabilities", "disabled_task_drivers", NULL), "raw_exec"));

        _cleanup_(cJSON_Deletep) cJSON *pool = load_hcl("packaging/nomad/node-pool-sandbox.hcl");
        cJSON *p = at(pool, "node_pool", "sandbox", NULL);
        ASSERT_NOT_NULL(p);
        ASSERT_NOT_NULL(cJSON_GetStringValue(cJSON_GetObjectItem(p, "description")));
}

/* ---- controld admin backup ------------------------------------------------------------- */

static int sqlite_scalar(const char *db, const char *sql, char **ret) {
        char *argv[] = { "sqlite3", (char *) db, (char *) sql, NULL };
        int r = test_run_capture(argv, ret, 1 << 16);
        if (*ret)
                (*ret)[strcspn(*ret, "\n")] = 0;
        return r;
}

static long get_status(struct ctld *c, const char *key) {
        struct hres r;
        http_req(c, "GET", "/sandboxes", key, NULL, &r);
        long s = r.status;
        hres_done(&r);
        return s;
}

/* Writes accounts through the admin CLI until killed: the store changes under the backup. */
static pid_t start_writer(struct ctld *c) {
        pid_t pid = fork();
        if (pid == 0) {
                for (int i = 0;; i++) {
                        char name[32];
                        snprintf(name, sizeof(name), "writer-%d", i);
                        ctld_admin(c, NULL, "account", "create", name, NULL);
                }
        }
        return pid;
}

TEST_FULL(admin_backup_online_then_restore, 240) {
        struct ctld c;
        char db[512], dir[512], bak[600], path[700];
        if (!test_have_docker())
                TEST_SKIP("dockerd is not answering on /var/run/docker.sock (controld's docker driver needs it)");
        ctld_start(&c, NULL, NULL);
        snprintf(db, sizeof(db), "%s/controld.db", c.dir);
        snprintf(dir, sizeof(dir), "%s/backups", test_tmpdir());
        ASSERT_EQ(mkdir(dir, 0700), 0);
        snprintf(bak, sizeof(bak), "%s/controld.db.bak", dir);

        _cleanup_free_ char *key_before = ctld_account_key(&c, "before-backup", NULL, NULL);
        ASSERT_EQ(get_status(&c, key_before), 200);

        /* Back up three times while controld serves and a writer keeps changing the store. */
        pid_t w = start_writer(&c);
        ASSERT_TRUE(w > 0);
        for (int i = 0; i < 100; i++) {                                 /* writes under way */
                _cleanup_free_ char *list = NULL;
                ASSERT_EQ(ctld_admin(&c, &list, "account", "list", NULL), 0);
                if (strstr(list, "writer-1\t"))
                        break;
                usleep(50 * 1000);
        }
        for (int i = 0; i < 3; i++) {
                _cleanup_free_ char *out = NULL, *chk = NULL, *n = NULL;
                ASSERT_EQ(ctld_admin(&c, &out, "backup", bak, NULL), 0);
                ASSERT_CONTAINS(out, bak);
                ASSERT_EQ(get_status(&c, key_before), 200);           /* still serving */
                ASSERT_EQ(sqlite_scalar(bak, "PRAGMA integrity_check", &chk), 0);
                ASSERT_STREQ(chk, "ok");
                ASSERT_EQ(sqlite_scalar(bak, "SELECT count(*) FROM accounts WHERE name = 'before-backup'", &n), 0);
                ASSERT_STREQ(n, "1");
        }
        kill(w, SIGKILL);
        waitpid(w, NULL, 0);
        {
                struct stat st;
                ASSERT_EQ(stat(bak, &st), 0);
                ASSERT_EQ(st.st_mode & 0777, 0600);                    /* key hashes inside */
                /* No temporary file left next to it. */
                _cleanup_free_ char *ls = NULL;
                char *argv[] = { "ls", "-A", dir, NULL };
                ASSERT_EQ(test_run_capture(argv, &ls, 4096), 0);
                ASSERT_STREQ(ls, "controld.db.bak\n");
        }
        /* The store itself is refused as a destination; a missing directory is an error. */
        ASSERT_NE(ctld_admin(&c, NULL, "backup", db, NULL), 0);
        snprintf(path, sizeof(path), "%s/missing/x.db", dir);
        ASSERT_NE(ctld_admin(&c, NULL, "backup", path, NULL), 0);

        /* Changes after the last backup are lost by a restore, as they should be. */
        _cleanup_free_ char *key_after = ctld_account_key(&c, "after-backup", NULL, NULL);
        ASSERT_EQ(get_status(&c, key_after), 200);

        /* Restore as OPERATIONS.md says: stop, copy over the store, drop -wal/-shm, start. */
        ctld_stop_daemon(&c);
        {
                char *cp[] = { "cp", bak, db, NULL };
                ASSERT_EQ(test_run_capture(cp, NULL, 0), 0);
                snprintf(path, sizeof(path), "%s-wal", db);
                unlink(path);
                snprintf(path, sizeof(path), "%s-shm", db);
                unlink(path);
        }
        ctld_start_daemon(&c);
        ASSERT_EQ(get_status(&c, key_before), 200);
        ASSERT_EQ(get_status(&c, key_after), 401);
        {
                _cleanup_free_ char *list = NULL;
                ASSERT_EQ(ctld_admin(&c, &list, "account", "list", NULL), 0);
                ASSERT_CONTAINS(list, "before-backup");
                ASSERT_NULL(strstr(list, "after-backup"));
        }
        ctld_stop(&c);
}
