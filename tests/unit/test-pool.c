/* Unit tests for warm pools (controld/pool.c, the pool rows of store.c): the [pool] config
 * section, which creates a pool serves and why the others miss, and the claim transaction
 * that moves a member to exactly one sandbox record. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cleanup.h"
#include "json.h"
#include "controld.h"
#include "pj_api.h"
#include "storetest.h"
#include "strutil.h"
#include "testlib.h"
#include "pool.h"
#include "render.h"
#include "template.h"

static const char base_conf[] = "[template \"busybox\"]\nimage = paddock/busybox:local\ncpu = 250\nmemory = 128\n"
                                "[template \"python-3.11\"]\nimage = paddock/python-3.11:local\n"
                                "[region \"local\"]\nid = 0123456789abcdef01234567\n";

static struct config *load_conf(const char *extra, struct err *err, int *ret_r) {
        _cleanup_free_ char *text = xasprintf("%s%s", base_conf, extra ? extra : "");
        return storetest_config(text, err, ret_r);
}

static void conf_refused(const char *extra, const char *want) {
        struct err err = { 0 };
        int r;
        struct config *c = load_conf(extra, &err, &r);
        ASSERT_EQ(r, -EINVAL);
        ASSERT_NULL(c);
        ASSERT_CONTAINS(err.message, want);
}

TEST(pool_config_defaults_and_refusals) {
        struct err err = { 0 };
        int r;
        struct config *c = load_conf("[pool \"bb\"]\ntemplate = busybox\n", &err, &r);
        ASSERT_EQ(r, 0);
        ASSERT_EQ(c->n_pools, 1);
        const struct pool_conf *p = &c->pools[0];
        ASSERT_STREQ(p->name, "bb");
        /* The template's specs unless the pool names its own. */
        ASSERT_EQ(p->cpu, 250);
        ASSERT_EQ(p->memory, 128);
        ASSERT_EQ(p->disk, 1);
        ASSERT_TRUE(p->networked);
        ASSERT_EQ(p->size, 2);
        ASSERT_EQ(p->max_age_ms, 3600 * 1000);
        ASSERT_EQ(p->refill_per_min, 60);
        config_free(c);

        conf_refused("[pool \"x\"]\n", "template");
        conf_refused("[pool \"x\"]\ntemplate = nope\n", "'nope' is not a configured template");
        conf_refused("[pool \"x\"]\ntemplate = busybox\negress = open\n", "egress must be networked or deny_all");
        conf_refused("[pool \"x\"]\ntemplate = busybox\nsize = 257\n", "size");
        conf_refused("[pool \"x\"]\ntemplate = busybox\nmax_age = 1s\n", "max_age");
        conf_refused("[pool \"x\"]\ntemplate = busybox\nrefill_rate = 0\n", "refill_rate");
        conf_refused("[pool \"x\"]\ntemplate = busybox\nsizes = 3\n", "sizes");
        conf_refused("[pool \"a\"]\ntemplate = busybox\n[pool \"b\"]\ntemplate = busybox\ncpu = 250\n",
                     "hold the same template, specs and egress class");
}

/* A template's contents for GET /sandbox/templates and its start command. */
TEST(template_config_contents_start_and_refusals) {
        struct err err = { 0 };
        int r;
        struct config *c = load_conf("[template \"docker\"]\nimage = paddock/docker:local\nlanguage = Docker 20.10\n"
                                     "tools = docker, git , curl\nsize_mb = 433\nstart = /usr/local/lib/paddock/start-dockerd\n"
                                     "start_timeout = 90\n", &err, &r);
        ASSERT_EQ(r, 0);
        const struct template *t = config_template(c, "docker");
        ASSERT_NOT_NULL(t);
        ASSERT_STREQ(t->language, "Docker 20.10");
        ASSERT_EQ(strv_length(t->tools), 3);
        ASSERT_STREQ(t->tools[1], "git");
        ASSERT_STREQ(t->start, "/usr/local/lib/paddock/start-dockerd");
        ASSERT_EQ(t->start_timeout_s, 90);
        _cleanup_(cJSON_Deletep) cJSON *j = template_to_json(t, t->size_mb);
        _cleanup_free_ char *text = cJSON_PrintUnformatted(j);
        ASSERT_STREQ(text, "{\"name\":\"docker\",\"display_name\":\"docker\",\"description\":\"\",\"language\":\"Docker 20.10\","
                           "\"tools\":[\"docker\",\"git\",\"curl\"],\"size_mb\":433,"
                           "\"default_specs\":{\"cpu\":500,\"memory\":512,\"disk\":1}}");
        /* Nothing said: null language and size, no tools, no start. */
        const struct template *b = config_template(c, "busybox");
        ASSERT_NULL(b->start);
        _cleanup_(cJSON_Deletep) cJSON *bj = template_to_json(b, 0);
        _cleanup_free_ char *btext = cJSON_PrintUnformatted(bj);
        ASSERT_CONTAINS(btext, "\"language\":null,\"tools\":[],\"size_mb\":null");
        config_free(c);

        conf_refused("[template \"d\"]\nimage = x\nstart = start-dockerd\n", "start must be the absolute path");
        conf_refused("[template \"d\"]\nimage = x\nstart = /bin/sh -c true\n", "start must be the absolute path");
        conf_refused("[template \"d\"]\nimage = x\nstart_timeout = 601\n", "start_timeout");
        conf_refused("[template \"d\"]\nimage = x\nlanguage = "
                     "0123456789012345678901234567890123456789012345678901234567890123456789\n", "language");
}

/* Names of the templates users build: what a registry repository and a create accept. */
TEST(user_template_names) {
        const char *good[] = { "a", "hello", "my-tools", "0", "a1-b2-c3", "abcdefghijabcdefghijabcdefghijabcdefghij" };
        const char *bad[] = { "", "-a", "a-", "Hello", "a_b", "a.b", "a/b", "../x", "a b",
                              "abcdefghijabcdefghijabcdefghijabcdefghijk" };
        for (size_t i = 0; i < ELEMENTSOF(good); i++)
                if (!template_name_ok(good[i]))
                        test_fail(__FILE__, __LINE__, "'%s' should be a valid name", good[i]);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                if (template_name_ok(bad[i]))
                        test_fail(__FILE__, __LINE__, "'%s' should be refused", bad[i]);
        ASSERT_FALSE(template_name_ok(NULL));
}

/* What pool_match says of body (a POST /sandboxes body) against the pools of conf. */
static const struct pool_conf *match(struct ctl *c, const char *body, enum pool_miss *miss) {
        struct pj_sandbox_create in = { 0 };
        struct err pe = { 0 };
        if (pj_sandbox_create_parse(body, strlen(body), &in, &pe) < 0)
                test_fail(__FILE__, __LINE__, "%s: %s", body, pe.message);
        const struct template *t = config_template(c->cfg, in.template_name ? in.template_name : "busybox");
        ASSERT_NOT_NULL(t);
        int64_t cpu = in.has_cpu ? in.cpu : t->cpu, mem = in.has_memory ? in.memory : t->memory,
                disk = in.has_disk ? in.disk : t->disk;
        const struct pool_conf *p = pool_match(c, t, cpu, mem, disk, &in, miss);
        pj_sandbox_create_done(&in);
        return p;
}

#define EXPECT_HIT(c, body, pool)                                    \
        do {                                                         \
                enum pool_miss m_;                                   \
                const struct pool_conf *p_ = match(c, body, &m_);    \
                ASSERT_NOT_NULL(p_);                                 \
                ASSERT_STREQ(p_->name, pool);                        \
                ASSERT_EQ(m_, POOL_MISS_NONE);                       \
        } while (0)
#define EXPECT_MISS(c, body, why)                                                  \
        do {                                                                       \
                enum pool_miss m_;                                                 \
                (void) match(c, body, &m_);                                        \
                if (m_ != (why))                                                   \
                        test_fail(__FILE__, __LINE__, "%s: miss %s, not %s", body, \
                                  pool_miss_name(m_), pool_miss_name(why));        \
        } while (0)

TEST(every_field_that_decides_a_claim) {
        struct err err = { 0 };
        int r;
        struct config *cfg = load_conf("[pool \"bb\"]\ntemplate = busybox\n[pool \"bb-off\"]\ntemplate = busybox\negress = deny_all\n",
                                       &err, &r);
        ASSERT_EQ(r, 0);
        struct ctl c = { .cfg = cfg };
        /* The template's specs, networked or not. */
        EXPECT_HIT(&c, "{}", "bb");
        EXPECT_HIT(&c, "{\"template\":\"busybox\",\"specs\":{\"cpu\":250,\"memory\":128,\"disk\":1}}", "bb");
        EXPECT_HIT(&c, "{\"egress\":{\"mode\":\"open\"}}", "bb");
        EXPECT_HIT(&c, "{\"blockOutbound\":true}", "bb-off");
        EXPECT_HIT(&c, "{\"egress\":{\"mode\":\"deny_all\"}}", "bb-off");
        /* What is only on the record does not decide. */
        EXPECT_HIT(&c, "{\"name\":\"mine\",\"autoDestroy\":true,\"destroyTimeout\":\"1h\"}", "bb");
        /* Another template or any other spec: no pool holds it. */
        EXPECT_MISS(&c, "{\"template\":\"python-3.11\"}", POOL_MISS_NO_POOL);
        EXPECT_MISS(&c, "{\"specs\":{\"cpu\":300}}", POOL_MISS_NO_POOL);
        EXPECT_MISS(&c, "{\"specs\":{\"memory\":256}}", POOL_MISS_NO_POOL);
        EXPECT_MISS(&c, "{\"specs\":{\"disk\":2}}", POOL_MISS_NO_POOL);
        /* What a member made ahead cannot give. */
        EXPECT_MISS(&c, "{\"volumeId\":\"0123456789abcdef01234567\"}", POOL_MISS_VOLUME);
        EXPECT_MISS(&c, "{\"persistent\":true,\"persistentDiskGB\":10}", POOL_MISS_VOLUME);
        EXPECT_MISS(&c, "{\"fromSnapshot\":\"0123456789abcdef01234567\"}", POOL_MISS_SNAPSHOT);
        EXPECT_MISS(&c, "{\"oneShot\":true}", POOL_MISS_ONE_SHOT);
        /* Restricted without node agents is another network than the pool's. */
        EXPECT_MISS(&c, "{\"egress\":{\"mode\":\"restricted\",\"allow\":[\"198.51.100.2\"]}}", POOL_MISS_NO_AGENT);
        c.bus = (struct nodebus *) 1;   /* only tested for presence */
        EXPECT_HIT(&c, "{\"egress\":{\"mode\":\"restricted\",\"allow\":[\"198.51.100.2\"]}}", "bb");
        config_free(cfg);
}

static void member(struct store *s, const char *pool, const char *image, const char *state, int64_t created_at, char ret_id[25]) {
        struct pool_member m = { 0 };
        hexid_new(m.id);
        m.pool = xstrdup(pool);
        m.image = xstrdup(image);
        m.state = xstrdup(state);
        m.created_at = created_at;
        m.container_id = xasprintf("ctr-%s", m.id);
        m.node_id = xstrdup("node-1");
        m.ip = xstrdup("169.254.66.9");
        ASSERT_OK(store_pool_insert(s, &m));
        if (ret_id)
                snprintf(ret_id, 25, "%s", m.id);
        pool_member_clear(&m);
}

static void claimant(struct sandbox *sb, const char *account) {
        storetest_sandbox(sb, account, "claimed", "paddock/busybox:local");
        sb->cpu = 250;
        sb->memory = 128;
        sb->disk = 1;
        sb->mount_path = xstrdup("/workspace");
        sb->snapshot_mode = xstrdup("manual");
        sb->created_at = sb->last_activity_at = 1000;
        sb->expires_at = 100000;
        sb->driver = xstrdup("docker");
}

TEST(a_claim_moves_the_oldest_ready_member_to_one_record) {
        _cleanup_(storetest_closep) struct store *s = storetest_open("claim");
        char acc[25], other[25], old[25], young[25], starting[25], stale[25];
        storetest_new_account(s, "alice", acc);
        storetest_new_account(s, "bob", other);
        member(s, "bb", "paddock/busybox:local", "ready", 2000, young);
        member(s, "bb", "paddock/busybox:local", "ready", 1000, old);
        member(s, "bb", "paddock/busybox:local", "starting", 500, starting);
        member(s, "bb", "paddock/busybox:old", "ready", 100, stale);      /* another image */

        _cleanup_sandbox_ struct sandbox a = { 0 };
        claimant(&a, acc);
        ASSERT_OK(store_pool_claim(s, "bb", "paddock/busybox:local", &a, 10));
        /* The oldest ready member of this image: its id and placement are the record's. */
        ASSERT_STREQ(a.id, old);
        ASSERT_STREQ(a.node_id, "node-1");
        ASSERT_STREQ(a.ip, "169.254.66.9");
        _cleanup_sandbox_ struct sandbox got = { 0 };
        ASSERT_OK(store_sandbox_get(s, old, &got));
        ASSERT_STREQ(got.account_id, acc);
        _cleanup_free_ char *ctr = xasprintf("ctr-%s", old);
        ASSERT_STREQ(got.container_id, ctr);
        struct pool_member m = { 0 };
        ASSERT_EQ(store_pool_get(s, old, &m), -ENOENT);

        /* The next claim gets the next one, never the same; a starting member or another
         * image is never handed out. */
        _cleanup_sandbox_ struct sandbox b = { 0 };
        claimant(&b, other);
        ASSERT_OK(store_pool_claim(s, "bb", "paddock/busybox:local", &b, 10));
        ASSERT_STREQ(b.id, young);
        _cleanup_sandbox_ struct sandbox c = { 0 };
        claimant(&c, other);
        char before[25];
        snprintf(before, sizeof(before), "%s", c.id);
        ASSERT_EQ(store_pool_claim(s, "bb", "paddock/busybox:local", &c, 10), -ENOENT);
        ASSERT_STREQ(c.id, before);     /* untouched: the cold path uses it */
        ASSERT_EQ(store_sandbox_get(s, before, &got), -ENOENT);
        ASSERT_OK(store_pool_get(s, starting, &m));
        pool_member_clear(&m);
        ASSERT_OK(store_pool_get(s, stale, &m));
        pool_member_clear(&m);
}

TEST(a_claim_over_the_quota_takes_nothing) {
        _cleanup_(storetest_closep) struct store *s = storetest_open("quota");
        char acc[25], id[25];
        storetest_new_account(s, "alice", acc);
        member(s, "bb", "img", "ready", 1000, id);
        _cleanup_sandbox_ struct sandbox a = { 0 };
        claimant(&a, acc);
        free(a.image);
        a.image = xstrdup("img");
        ASSERT_EQ(store_pool_claim(s, "bb", "img", &a, 0), -EDQUOT);
        struct pool_member m = { 0 };
        ASSERT_OK(store_pool_get(s, id, &m));   /* still the pool's */
        ASSERT_STREQ(m.state, "ready");
        pool_member_clear(&m);
        struct pool_member *all = NULL;
        size_t n = 0;
        ASSERT_OK(store_pool_list(s, "bb", &all, &n));
        ASSERT_EQ(n, 1);
        pool_member_array_free(all, n);
        ASSERT_OK(store_pool_list(s, "other", &all, &n));
        ASSERT_EQ(n, 0);
        free(all);
}
