/* Unit tests for the pure parts of controld/driver-nomad.c: the job the driver registers
 * (field by field against packaging/nomad/sandbox-job.json), the [nomad] config section, and
 * the parsers of Nomad's answers, fed with canned answers in Nomad's own shapes
 * (shared/reference/PROTOCOLS.md section 1). */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "cleanup.h"
#include "controld.h"
#include "docker.h"
#include "nomad-wire.h"
#include "json.h"
#include "jsondiff.h"
#include "nodeagent.h"
#include "strutil.h"
#include "storetest.h"
#include "testlib.h"

static const char base_conf[] = "[template \"python-3.11\"]\nimage = paddock/python-3.11:local\n"
                                "[region \"eu\"]\nid = 0123456789abcdef01234567\n";

static struct config *load_conf(const char *extra, struct err *err, int *ret_r) {
        _cleanup_free_ char *text = xasprintf("%s%s", base_conf, extra ? extra : "");
        return storetest_config(text, err, ret_r);
}

static struct config *conf_ok(const char *extra) {
        struct err err = { 0 };
        int r;
        struct config *c = load_conf(extra, &err, &r);
        if (r < 0)
                test_fail(__FILE__, __LINE__, "config: %s", err.message);
        return c;
}

/* The sandbox the reference file describes. */
static void reference_sandbox(struct sandbox *sb) {
        memset(sb, 0, sizeof(*sb));
        snprintf(sb->id, sizeof(sb->id), "0123456789abcdef01234567");
        snprintf(sb->account_id, sizeof(sb->account_id), "89abcdef0123456789abcdef");
        sb->image = xstrdup("paddock/python-3.11:local");
        sb->cpu = 500;
        sb->memory = 512;
        sb->egress.mode = PJ_EGRESS_RESTRICTED;
        sb->volume_id = xstrdup("aaaaaaaaaaaaaaaaaaaaaaaa");
        sb->mount_path = xstrdup("/workspace");
        sb->status = SB_STARTING;
}

TEST(nomad_config_defaults) {
        struct config *c = conf_ok("[scheduler]\ndriver = nomad\n");
        const struct {
                const char *key, *got, *want;
        } defaults[] = {
                { "driver", c->driver, "nomad" },
                { "address", c->nomad_addr, "http://127.0.0.1:4646" },
                { "token", c->nomad_token, "" },
                { "namespace", c->nomad_namespace, "sandboxes" },
                { "node_pool", c->nomad_node_pool, "sandbox" },
                { "region", c->nomad_region, "global" },
                { "datacenters[0]", c->nomad_datacenters[0], "*" },
                { "cni_open", c->nomad_cni_open, "sandbox-open" },
                { "cni_restricted", c->nomad_cni_restricted, "sandbox-restricted" },
                { "cni_no_egress", c->nomad_cni_no_egress, "sandbox-no-egress" },
                { "runtime", c->nomad_runtime, "runsc" },
                { "runtime_net", c->nomad_runtime_net, "runsc-net" },
                { "csi_plugin_id", c->nomad_csi_plugin_id, "" },
        };
        for (size_t i = 0; i < ELEMENTSOF(defaults); i++)
                if (!defaults[i].got || strcmp(defaults[i].got, defaults[i].want))
                        test_fail(__FILE__, __LINE__, "%s: \"%s\", want \"%s\"", defaults[i].key,
                                  defaults[i].got ? defaults[i].got : "(null)", defaults[i].want);
        ASSERT_TRUE(c->nomad_datacenters[1] == NULL);
        ASSERT_EQ(c->nomad_pids_limit, 4096);
        ASSERT_EQ(c->nomad_placement_timeout_ms, 120000);
        ASSERT_EQ(c->nomad_blocking_wait_ms, 30000);
        config_free(c);
}

TEST(nomad_config_values_and_errors) {
        struct config *c = conf_ok("[scheduler]\ndriver = nomad\n[nomad]\naddress = https://nomad.internal:4646\n"
                                   "token = s3cret\nca_file = /etc/ca.pem\ncert_file = /etc/c.pem\nkey_file = /etc/k.pem\n"
                                   "namespace = sbx\nnode_pool = pool2\nregion = eu\ndatacenters = dc1, dc2\n"
                                   "cni_open = o\ncni_restricted = r\ncni_no_egress = n\ncsi_plugin_id = ebs\n"
                                   "placement_timeout = 45s\nblocking_wait = 5s\nrequest_timeout = 2s\n");
        ASSERT_STREQ(c->nomad_addr, "https://nomad.internal:4646");
        ASSERT_STREQ(c->nomad_token, "s3cret");
        ASSERT_STREQ(c->nomad_key_file, "/etc/k.pem");
        ASSERT_STREQ(c->nomad_datacenters[1], "dc2");
        ASSERT_STREQ(c->nomad_csi_plugin_id, "ebs");
        ASSERT_EQ(c->nomad_placement_timeout_ms, 45000);
        ASSERT_EQ(c->nomad_blocking_wait_ms, 5000);
        ASSERT_EQ(c->nomad_request_timeout_ms, 2000);
        config_free(c);

        struct err err = { 0 };
        int r;
        ASSERT_TRUE(load_conf("[nomad]\naddress = 127.0.0.1:4646\n", &err, &r) == NULL);
        ASSERT_EQ(r, -EINVAL);
        ASSERT_TRUE(strstr(err.message, "[nomad] address must start with http"));
        ASSERT_TRUE(load_conf("[nomad]\nnamepsace = x\n", &err, &r) == NULL);
        ASSERT_TRUE(strstr(err.message, "namepsace"));
        ASSERT_TRUE(load_conf("[scheduler]\ndriver = kubernetes\n", &err, &r) == NULL);
        ASSERT_TRUE(strstr(err.message, "supported: docker, nomad"));
}

/* The job c builds for sb equals ref, field by field; what names the case when it does not. */
static void check_job(const cJSON *ref, const struct config *c, const struct sandbox *sb, const char *what, int line) {
        _cleanup_json_ cJSON *job = nomad_job_build(c, "feedfacefeedfacefeedface", sb, NULL);
        char diff[4096];
        int n = json_diff(ref, job, NULL, diff, sizeof(diff));
        if (n)
                test_fail(__FILE__, line, "%d differences from packaging/nomad/sandbox-job.json (%s):\n%s", n, what, diff);
}

TEST(nomad_job_matches_reference_file) {
        struct config *c = conf_ok("[scheduler]\ndriver = nomad\n");
        struct sandbox sb;
        reference_sandbox(&sb);
        _cleanup_json_ cJSON *ref = json_load_file("packaging/nomad/sandbox-job.json");
        ASSERT_TRUE(ref != NULL);
        check_job(ref, c, &sb, "reference sandbox", __LINE__);
        sandbox_clear(&sb);
        config_free(c);
}

/* The comparison itself must catch a changed field, or the test above proves nothing. */
TEST(nomad_job_diff_catches_changes) {
        struct config *c = conf_ok("[scheduler]\ndriver = nomad\n");
        struct sandbox sb;
        reference_sandbox(&sb);
        sb.memory = 1024;
        _cleanup_json_ cJSON *job = nomad_job_build(c, "feedfacefeedfacefeedface", &sb, NULL);
        _cleanup_json_ cJSON *ref = json_load_file("packaging/nomad/sandbox-job.json");
        char diff[4096];
        ASSERT_EQ(json_diff(ref, job, NULL, diff, sizeof(diff)), 2);
        ASSERT_TRUE(strstr(diff, "Job.TaskGroups[0].Tasks[0].Resources.MemoryMB: want 512, got 1024"));
        ASSERT_TRUE(strstr(diff, "MemoryMaxMB: want 640, got 1280"));
        const char *skip[] = { "Job.TaskGroups[0].Tasks[0].Resources.MemoryMB", "Job.TaskGroups[0].Tasks[0].Resources.MemoryMaxMB",
                               NULL };
        ASSERT_EQ(json_diff(ref, job, skip, diff, sizeof(diff)), 0);
        sandbox_clear(&sb);
        config_free(c);
}

TEST(nomad_job_by_egress_mode_and_without_volume) {
        struct config *c = conf_ok("[scheduler]\ndriver = nomad\n[nomad]\nruntime_network = runsc-net\ndatacenters = dc1\n");
        struct sandbox sb;
        reference_sandbox(&sb);
        free(sb.volume_id);
        sb.volume_id = NULL;
        sb.egress.mode = PJ_EGRESS_DENY_ALL;
        _cleanup_json_ cJSON *job = nomad_job_build(c, "i", &sb, NULL);
        cJSON *j = cJSON_GetObjectItem(job, "Job");
        cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "TaskGroups"), 0);
        cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Tasks"), 0);
        ASSERT_STREQ(json_get_str(cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Networks"), 0), "Mode"), "cni/sandbox-no-egress");
        ASSERT_STREQ(json_get_str(cJSON_GetObjectItem(t, "Config"), "runtime"), "runsc");
        ASSERT_TRUE(cJSON_GetObjectItem(g, "Volumes") == NULL);
        ASSERT_TRUE(cJSON_GetObjectItem(t, "VolumeMounts") == NULL);
        ASSERT_STREQ(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "Datacenters"), 0)->valuestring, "dc1");
        cJSON_Delete(job);

        sb.egress.mode = PJ_EGRESS_OPEN;
        job = nomad_job_build(c, "i", &sb, NULL);
        j = cJSON_GetObjectItem(job, "Job");
        g = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "TaskGroups"), 0);
        t = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Tasks"), 0);
        ASSERT_STREQ(json_get_str(cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Networks"), 0), "Mode"), "cni/sandbox-open");
        ASSERT_STREQ(json_get_str(cJSON_GetObjectItem(t, "Config"), "runtime"), "runsc-net");
        sandbox_clear(&sb);
        config_free(c);
}

/* What an image says that the node's Docker would act on: no healthcheck ever runs (the
 * reference file has healthchecks.disable), and each VOLUME gets a tmpfs of the given size
 * instead of an anonymous volume, except where something is mounted already. A warm-pool
 * member (no account) says it was pooled instead of carrying an empty account. */
TEST(nomad_job_tmpfs_over_image_volumes_and_pooled_meta) {
        struct config *c = conf_ok("[scheduler]\ndriver = nomad\n");
        struct sandbox sb;
        reference_sandbox(&sb);
        _cleanup_json_ cJSON *job = nomad_job_build(c, "i", &sb, NULL);
        cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(job, "Job"),
                                                                                                  "TaskGroups"), 0), "Tasks"), 0);
        cJSON *conf = cJSON_GetObjectItem(t, "Config");
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(conf, "healthchecks"), "disable")));
        const char *vols[] = { "/data", "/workspace", "/var/cache", NULL };
        ASSERT_EQ(nomad_job_add_tmpfs(job, vols, 512 << 20), 2);       /* /workspace is the volume's */
        cJSON *mounts = cJSON_GetObjectItem(conf, "mounts");
        ASSERT_EQ(cJSON_GetArraySize(mounts), 2);
        cJSON *m0 = cJSON_GetArrayItem(mounts, 0);
        ASSERT_STREQ(json_get_str(m0, "type"), "tmpfs");
        ASSERT_STREQ(json_get_str(m0, "target"), "/data");
        ASSERT_TRUE(cJSON_GetObjectItem(m0, "source") == NULL);
        int64_t size = 0;
        ASSERT_TRUE(json_get_int(cJSON_GetObjectItem(m0, "tmpfs_options"), "size", &size));
        ASSERT_EQ(size, 512 << 20);
        ASSERT_STREQ(json_get_str(cJSON_GetArrayItem(mounts, 1), "target"), "/var/cache");
        ASSERT_EQ(nomad_job_add_tmpfs(job, NULL, 1), 0);
        ASSERT_EQ(nomad_job_add_tmpfs(cJSON_GetObjectItem(job, "Job"), vols, 1), -EINVAL);
        cJSON_Delete(job);

        sb.account_id[0] = 0;
        job = nomad_job_build(c, "i", &sb, NULL);
        cJSON *meta = cJSON_GetObjectItem(cJSON_GetObjectItem(job, "Job"), "Meta");
        ASSERT_STREQ(json_get_str(meta, "paddock_pooled"), "1");
        ASSERT_TRUE(cJSON_GetObjectItem(meta, "paddock_account_id") == NULL);
        sandbox_clear(&sb);
        config_free(c);
}

/* An image config's VOLUMEs as Docker takes them: cleaned, sorted, once each; "/" or a relative
 * path refused; a bounded count. */
TEST(image_config_volumes_cleaned_and_bounded) {
        char **v = NULL;
        _cleanup_json_ cJSON *cfg = cJSON_Parse("{\"Volumes\":{\"/data/\":{},\"//var/./lib/../cache\":{},\"/data\":{}}}");
        ASSERT_OK(docker_config_volumes(cfg, &v));
        ASSERT_STREQ(v[0], "/data");
        ASSERT_STREQ(v[1], "/var/cache");
        ASSERT_TRUE(v[2] == NULL);
        strv_free(v);
        ASSERT_OK(docker_config_volumes(NULL, &v));
        ASSERT_TRUE(v[0] == NULL);
        strv_free(v);
        const char *bad[] = { "{\"Volumes\":{\"/\":{}}}", "{\"Volumes\":{\"/a/..\":{}}}", "{\"Volumes\":{\"data\":{}}}",
                              "{\"Volumes\":{\"/a\\nb\":{}}}", NULL };
        for (const char **b = bad; *b; b++) {
                _cleanup_json_ cJSON *x = cJSON_Parse(*b);
                ASSERT_NOT_NULL(x);
                ASSERT_EQ(docker_config_volumes(x, &v), -EDOM);
        }
        _cleanup_json_ cJSON *many = cJSON_CreateObject();
        cJSON *vo = cJSON_AddObjectToObject(many, "Volumes");
        for (int i = 0; i <= DOCKER_IMAGE_VOLUMES_MAX; i++) {
                char p[16];
                snprintf(p, sizeof(p), "/v%d", i);
                cJSON_AddObjectToObject(vo, p);
        }
        ASSERT_EQ(docker_config_volumes(many, &v), -E2BIG);
}

/* fromSnapshot: the task runs the snapshot's image and, when [snapshots] has credentials,
 * carries them in the docker driver's auth block (Nomad pulls with them on a node that lacks
 * the image). Everything else is the reference job, field by field. */
TEST(nomad_job_from_snapshot_image_and_registry_auth) {
        static const char snaps[] = "[scheduler]\ndriver = nomad\n[snapshots]\nregistry = reg.internal:5000\n"
                                    "repository = paddock/snapshots\nusername = pusher\npassword = s3cret\n";
        struct config *c = conf_ok(snaps);
        struct sandbox sb;
        reference_sandbox(&sb);
        free(sb.image);
        sb.image = xstrdup("reg.internal:5000/paddock/snapshots:fedcba9876543210fedcba98");
        sb.from_snapshot = xstrdup("fedcba9876543210fedcba98");
        _cleanup_json_ cJSON *ref = json_load_file("packaging/nomad/sandbox-job.json");
        ASSERT_TRUE(ref != NULL);
        cJSON *rconf = cJSON_GetObjectItem(
                cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "Job"),
                                                                                              "TaskGroups"),
                                                                           0),
                                                       "Tasks"),
                                   0),
                "Config");
        cJSON_ReplaceItemInObject(rconf, "image", cJSON_CreateString("reg.internal:5000/paddock/snapshots:fedcba9876543210fedcba98"));
        cJSON_AddItemToObject(rconf, "auth", cJSON_Parse("[{\"username\":\"pusher\",\"password\":\"s3cret\","
                                                         "\"server_address\":\"reg.internal:5000\"}]"));
        check_job(ref, c, &sb, "the snapshot's image and auth", __LINE__);

        /* An anonymous registry: the image, no auth block. */
        config_free(c);
        c = conf_ok("[scheduler]\ndriver = nomad\n[snapshots]\nregistry = reg.internal:5000\n");
        cJSON_DeleteItemFromObject(rconf, "auth");
        check_job(ref, c, &sb, "anonymous registry", __LINE__);

        /* A template sandbox never carries the snapshot registry's credentials. */
        config_free(c);
        c = conf_ok(snaps);
        sandbox_clear(&sb);
        reference_sandbox(&sb);
        cJSON_Delete(ref);
        ref = json_load_file("packaging/nomad/sandbox-job.json");
        check_job(ref, c, &sb, "template sandbox", __LINE__);
        sandbox_clear(&sb);
        config_free(c);
}

TEST(nomad_volume_body) {
        struct config *c = conf_ok("[nomad]\ncsi_plugin_id = hostpath\n");
        _cleanup_json_ cJSON *v = nomad_volume_build(c, "paddock-vol-x", 10);
        cJSON *v0 = cJSON_GetArrayItem(cJSON_GetObjectItem(v, "Volumes"), 0);
        ASSERT_STREQ(json_get_str(v0, "ID"), "paddock-vol-x");
        ASSERT_STREQ(json_get_str(v0, "PluginID"), "hostpath");
        ASSERT_STREQ(json_get_str(v0, "Namespace"), "sandboxes");
        int64_t min = 0;
        ASSERT_TRUE(json_get_int(v0, "RequestedCapacityMin", &min));
        ASSERT_EQ(min, 10LL << 30);
        cJSON *cap = cJSON_GetArrayItem(cJSON_GetObjectItem(v0, "RequestedCapabilities"), 0);
        ASSERT_STREQ(json_get_str(cap, "AccessMode"), "single-node-writer");
        ASSERT_STREQ(json_get_str(cap, "AttachmentMode"), "file-system");
        config_free(c);
}

/* GET /v1/job/:id/allocations, in Nomad's shape: an old stopped allocation (before a resume)
 * and the new one. */
static const char allocs_running[] =
        "[{\"ID\":\"old-alloc\",\"EvalID\":\"e0\",\"Name\":\"sandbox-x.sandbox[0]\",\"Namespace\":\"sandboxes\","
        "\"NodeID\":\"node-a\",\"NodeName\":\"a\",\"JobID\":\"sandbox-x\",\"JobType\":\"service\",\"TaskGroup\":\"sandbox\","
        "\"DesiredStatus\":\"stop\",\"DesiredDescription\":\"alloc not needed due to job update\",\"ClientStatus\":\"complete\","
        "\"ClientDescription\":\"All tasks have completed\",\"TaskStates\":null,\"CreateIndex\":10,\"ModifyIndex\":30,"
        "\"CreateTime\":1700000000000000000,\"ModifyTime\":1700000001000000000},"
        "{\"ID\":\"new-alloc\",\"EvalID\":\"e1\",\"Name\":\"sandbox-x.sandbox[0]\",\"Namespace\":\"sandboxes\","
        "\"NodeID\":\"node-b\",\"NodeName\":\"b\",\"JobID\":\"sandbox-x\",\"JobType\":\"service\",\"TaskGroup\":\"sandbox\","
        "\"DesiredStatus\":\"run\",\"DesiredDescription\":\"\",\"ClientStatus\":\"running\",\"ClientDescription\":\"Tasks are running\","
        "\"TaskStates\":{\"sandbox\":{\"State\":\"running\",\"Failed\":false,\"Restarts\":0,\"StartedAt\":\"2023-11-14T22:13:21Z\","
        "\"FinishedAt\":null,\"Events\":[{\"Type\":\"Received\",\"Time\":1,\"Message\":\"\",\"DisplayMessage\":\"Task received by client\"},"
        "{\"Type\":\"Started\",\"Time\":2,\"DisplayMessage\":\"Task started by client\"}]}},"
        "\"CreateIndex\":41,\"ModifyIndex\":45,\"CreateTime\":1700000002000000000,\"ModifyTime\":1700000003000000000}]";

TEST(nomad_allocs_pick_newest_after_index) {
        _cleanup_json_ cJSON *j = cJSON_Parse(allocs_running);
        struct nomad_alloc a = { 0 };
        ASSERT_EQ(nomad_allocs_pick(j, 40, &a), 1);
        ASSERT_STREQ(a.id, "new-alloc");
        ASSERT_STREQ(a.node_id, "node-b");
        ASSERT_EQ(a.phase, NOMAD_ALLOC_RUNNING);
        ASSERT_EQ(a.create_index, 41);
        nomad_alloc_clear(&a);
        /* After the resume's index nothing is new yet: the stopped one must not count. */
        ASSERT_EQ(nomad_allocs_pick(j, 42, &a), 0);
        ASSERT_EQ(nomad_allocs_pick(j, 0, &a), 1);
        ASSERT_STREQ(a.id, "new-alloc");
        nomad_alloc_clear(&a);
        ASSERT_TRUE(nomad_allocs_any_live(j));
        _cleanup_json_ cJSON *empty = cJSON_Parse("[]");
        ASSERT_EQ(nomad_allocs_pick(empty, 0, &a), 0);
        ASSERT_FALSE(nomad_allocs_any_live(empty));
        _cleanup_json_ cJSON *obj = cJSON_Parse("{}");
        ASSERT_EQ(nomad_allocs_pick(obj, 0, &a), -EINVAL);
}

/* text parses as an allocation in phase, on node_id (NULL: none), saying reason. */
static void check_alloc(const char *text, enum nomad_alloc_phase phase, const char *node_id, const char *reason, int line) {
        _cleanup_json_ cJSON *j = cJSON_Parse(text);
        struct nomad_alloc a = { 0 };
        if (nomad_alloc_parse(j, &a) < 0)
                test_fail(__FILE__, line, "not parsed: %s", text);
        if (a.phase != phase || !a.reason || strcmp(a.reason, reason) != 0 ||
            (node_id ? !a.node_id || strcmp(a.node_id, node_id) != 0 : a.node_id != NULL))
                test_fail(__FILE__, line, "phase %d (want %d), node %s (want %s), reason \"%s\" (want \"%s\")", a.phase,
                          phase, a.node_id ? a.node_id : "(none)", node_id ? node_id : "(none)",
                          a.reason ? a.reason : "(none)", reason);
        nomad_alloc_clear(&a);
}

TEST(nomad_alloc_failed_reason_from_task_events) {
        /* The docker driver refusing runsc: the Driver Failure event carries the reason;
         * "Not Restarting" follows it and must not hide it. */
        static const char failed[] =
                "{\"ID\":\"a1\",\"NodeID\":\"n1\",\"ClientStatus\":\"failed\",\"DesiredStatus\":\"run\",\"CreateIndex\":5,"
                "\"TaskStates\":{\"sandbox\":{\"State\":\"dead\",\"Failed\":true,\"Events\":["
                "{\"Type\":\"Received\",\"Time\":100,\"DisplayMessage\":\"Task received by client\",\"FailsTask\":false},"
                "{\"Type\":\"Driver Failure\",\"Time\":200,\"Message\":\"\",\"DisplayMessage\":\"Failed to create container "
                "configuration for image: requested runtime \\\"runsc\\\" is not allowed\",\"DriverError\":\"requested runtime "
                "\\\"runsc\\\" is not allowed\",\"FailsTask\":false},"
                "{\"Type\":\"Not Restarting\",\"Time\":300,\"DisplayMessage\":\"Policy allows no restarts\",\"FailsTask\":true}]}}}";
        _cleanup_json_ cJSON *j = cJSON_Parse(failed);
        struct nomad_alloc a = { 0 };
        ASSERT_OK(nomad_alloc_parse(j, &a));
        ASSERT_EQ(a.phase, NOMAD_ALLOC_FAILED);
        ASSERT_TRUE(a.reason && strstr(a.reason, "Driver Failure"));
        ASSERT_TRUE(strstr(a.reason, "requested runtime \"runsc\" is not allowed"));
        nomad_alloc_clear(&a);

        /* Lost: the node went away; no task events say so. */
        check_alloc("{\"ID\":\"a2\",\"NodeID\":\"n1\",\"ClientStatus\":\"lost\",\"DesiredStatus\":\"stop\","
                    "\"ClientDescription\":\"alloc is lost since its node is down\",\"TaskStates\":{}}",
                    NOMAD_ALLOC_FAILED, "n1", "allocation lost: alloc is lost since its node is down", __LINE__);

        /* Pending: the latest event says what it waits for. */
        check_alloc("{\"ID\":\"a3\",\"ClientStatus\":\"pending\",\"DesiredStatus\":\"run\",\"TaskStates\":"
                    "{\"sandbox\":{\"State\":\"pending\",\"Events\":[{\"Type\":\"Driver\",\"Time\":9,"
                    "\"DisplayMessage\":\"Downloading image\"}]}}}",
                    NOMAD_ALLOC_PENDING, NULL, "Driver: Downloading image", __LINE__);

        /* A task that exited by itself (the keepalive killed). */
        check_alloc("{\"ID\":\"a4\",\"ClientStatus\":\"failed\",\"TaskStates\":{\"sandbox\":{\"State\":\"dead\","
                    "\"Events\":[{\"Type\":\"Terminated\",\"Time\":5,\"ExitCode\":137,\"Signal\":9,"
                    "\"Details\":{\"oom_killed\":\"true\"}}]}}}",
                    NOMAD_ALLOC_FAILED, NULL, "Terminated: exit code 137, signal 9", __LINE__);

        cJSON *noid = cJSON_Parse("{\"ClientStatus\":\"running\"}");
        ASSERT_EQ(nomad_alloc_parse(noid, &a), -EINVAL);
        cJSON_Delete(noid);
}

TEST(nomad_alloc_address) {
        _cleanup_json_ cJSON *j = cJSON_Parse("{\"ID\":\"a\",\"NetworkStatus\":{\"InterfaceName\":\"eth0\","
                                              "\"Address\":\"172.26.64.5\",\"AddressIPv6\":\"\",\"DNS\":null}}");
        _cleanup_free_ char *ip = nomad_alloc_address(j);
        ASSERT_STREQ(ip, "172.26.64.5");
        _cleanup_json_ cJSON *k = cJSON_Parse("{\"ID\":\"a\",\"NetworkStatus\":null}");
        ASSERT_TRUE(nomad_alloc_address(k) == NULL);
}

TEST(nomad_eval_placement_failure) {
        static const char blocked[] =
                "{\"ID\":\"e1\",\"Status\":\"complete\",\"Type\":\"service\",\"TriggeredBy\":\"job-register\","
                "\"JobID\":\"sandbox-x\",\"BlockedEval\":\"e2\",\"FailedTGAllocs\":{\"sandbox\":{\"NodesEvaluated\":2,"
                "\"NodesFiltered\":0,\"NodesAvailable\":{\"dc1\":2},\"ClassFiltered\":null,\"ConstraintFiltered\":null,"
                "\"NodesExhausted\":2,\"ClassExhausted\":null,\"DimensionExhausted\":{\"memory\":2},"
                "\"QuotaExhausted\":null,\"Scores\":null,\"AllocationTime\":12345,\"CoalescedFailures\":0}},"
                "\"CreateIndex\":7,\"ModifyIndex\":8}";
        _cleanup_json_ cJSON *j = cJSON_Parse(blocked);
        bool done = false;
        _cleanup_free_ char *why = nomad_eval_failure(j, &done);
        ASSERT_TRUE(done);
        ASSERT_TRUE(why && strstr(why, "no Nomad node could place the sandbox"));
        ASSERT_TRUE(strstr(why, "2 nodes evaluated"));
        ASSERT_TRUE(strstr(why, "exhausted memory (2)"));

        _cleanup_json_ cJSON *ok = cJSON_Parse("{\"ID\":\"e1\",\"Status\":\"complete\",\"FailedTGAllocs\":null}");
        ASSERT_TRUE(nomad_eval_failure(ok, &done) == NULL);
        ASSERT_TRUE(done);
        _cleanup_json_ cJSON *pend = cJSON_Parse("{\"ID\":\"e1\",\"Status\":\"pending\"}");
        ASSERT_TRUE(nomad_eval_failure(pend, &done) == NULL);
        ASSERT_FALSE(done);
        _cleanup_json_ cJSON *fail = cJSON_Parse("{\"ID\":\"e1\",\"Status\":\"failed\",\"StatusDescription\":\"maximum attempts reached (5)\"}");
        _cleanup_free_ char *w2 = nomad_eval_failure(fail, &done);
        ASSERT_STREQ(w2, "Nomad's evaluation failed: maximum attempts reached (5)");
}

TEST(nomad_jobs_filter_by_instance) {
        static const char jobs[] =
                "[{\"ID\":\"sandbox-0123456789abcdef01234567\",\"Status\":\"running\",\"Meta\":{\"paddock_controld\":\"me\"}},"
                "{\"ID\":\"sandbox-1123456789abcdef01234567\",\"Status\":\"running\",\"Meta\":{\"paddock_controld\":\"other\"}},"
                "{\"ID\":\"sandbox-2123456789abcdef01234567\",\"Status\":\"dead\",\"Meta\":{\"paddock_controld\":\"me\"}},"
                "{\"ID\":\"sandbox-nothex\",\"Status\":\"running\",\"Meta\":{\"paddock_controld\":\"me\"}},"
                "{\"ID\":\"web\",\"Status\":\"running\",\"Meta\":{\"paddock_controld\":\"me\"}},"
                "{\"ID\":\"sandbox-3123456789abcdef01234567\",\"Status\":\"pending\"}]";
        _cleanup_json_ cJSON *j = cJSON_Parse(jobs);
        size_t need = 0;
        char **ids = nomad_jobs_filter(j, "me", &need);
        ASSERT_EQ(strv_length(ids), 1);
        ASSERT_STREQ(ids[0], "0123456789abcdef01234567");
        ASSERT_EQ(need, 1);
        strv_free(ids);
}

TEST(nomad_exec_frames) {
        struct nomad_exec_frame f = { 0 };
        static const char out[] = "{\"stdout\":{\"data\":\"aGVsbG8K\"}}";
        ASSERT_OK(nomad_exec_frame_parse(out, strlen(out), &f));
        ASSERT_EQ(f.stream, 1);
        ASSERT_EQ(f.len, 6);
        ASSERT_TRUE(!memcmp(f.data, "hello\n", 6));
        nomad_exec_frame_done(&f);
        static const char err[] = "{\"stderr\":{\"data\":\"AP8=\"}}";
        ASSERT_OK(nomad_exec_frame_parse(err, strlen(err), &f));
        ASSERT_EQ(f.stream, 2);
        ASSERT_EQ(f.len, 2);
        ASSERT_EQ(f.data[0], 0);
        ASSERT_EQ(f.data[1], 0xff);
        nomad_exec_frame_done(&f);
        static const char cl[] = "{\"stdout\":{\"close\":true}}";
        ASSERT_OK(nomad_exec_frame_parse(cl, strlen(cl), &f));
        ASSERT_TRUE(f.closed);
        ASSERT_EQ(f.len, 0);
        nomad_exec_frame_done(&f);
        /* exit_code is omitted when 0. */
        static const char ex0[] = "{\"exited\":true,\"result\":{}}";
        ASSERT_OK(nomad_exec_frame_parse(ex0, strlen(ex0), &f));
        ASSERT_TRUE(f.exited);
        ASSERT_EQ(f.exit_code, 0);
        static const char ex3[] = "{\"exited\":true,\"result\":{\"exit_code\":3}}";
        ASSERT_OK(nomad_exec_frame_parse(ex3, strlen(ex3), &f));
        ASSERT_EQ(f.exit_code, 3);
        ASSERT_OK(nomad_exec_frame_parse("{}", 2, &f));
        ASSERT_FALSE(f.exited);
        ASSERT_EQ(f.stream, 0);
        ASSERT_EQ(nomad_exec_frame_parse("not json", 8, &f), -EBADMSG);
        static const char bad[] = "{\"stdout\":{\"data\":\"***\"}}";
        ASSERT_EQ(nomad_exec_frame_parse(bad, strlen(bad), &f), -EBADMSG);
        static const char bad2[] = "{\"stdout\":\"x\"}";
        ASSERT_EQ(nomad_exec_frame_parse(bad2, strlen(bad2), &f), -EBADMSG);

        _cleanup_free_ char *in = nomad_exec_stdin_frame("hi\n", 3);
        ASSERT_STREQ(in, "{\"stdin\":{\"data\":\"aGkK\"}}");
}

TEST(nomad_exec_command_wraps_only_for_cwd_or_env) {
        const char *argv[] = { "echo", "a b", NULL };
        struct exec_spec s = { .argv = argv };
        _cleanup_free_ char *plain = nomad_exec_command(&s);
        ASSERT_STREQ(plain, "[\"echo\",\"a b\"]");
        const char *env[] = { "A=1", NULL };
        s.env = env;
        s.cwd = "/tmp";
        _cleanup_free_ char *w = nomad_exec_command(&s);
        ASSERT_TRUE(startswith(w, "[\"/bin/sh\",\"-c\","));
        ASSERT_TRUE(endswith(w, ",\"/tmp\",\"A=1\",\"echo\",\"a b\"]"));
}


/* nodeagent node_id = nomad: the client node id from GET /v1/agent/self (trimmed answer of a
 * Nomad 1.9 agent running server and client). */
TEST(nodeagent_agent_self_node_id) {
        static const char self[] =
                "{\"config\":{\"Region\":\"global\",\"Datacenter\":\"dc1\",\"Client\":{\"Enabled\":true,\"NodePool\":\"sandbox\"}},"
                "\"member\":{\"Name\":\"n1.global\",\"Addr\":\"127.0.0.1\",\"Port\":4648,\"Status\":\"alive\"},"
                "\"stats\":{\"client\":{\"heartbeat_ttl\":\"17.3s\",\"known_servers\":\"127.0.0.1:4647\","
                "\"last_heartbeat\":\"3.2s\",\"node_id\":\"2f1c3a8e-7f0b-4a9e-9d1e-5c6b7a8d9e0f\",\"num_allocations\":\"1\"},"
                "\"nomad\":{\"leader\":\"true\"},\"runtime\":{\"arch\":\"amd64\"}}}";
        char *id = NULL;
        ASSERT_OK(nomad_self_parse(self, strlen(self), &id));
        ASSERT_STREQ(id, "2f1c3a8e-7f0b-4a9e-9d1e-5c6b7a8d9e0f");
        free(id);
        static const char server_only[] = "{\"config\":{},\"stats\":{\"nomad\":{\"leader\":\"true\"}}}";
        ASSERT_EQ(nomad_self_parse(server_only, strlen(server_only), &id), -ENOENT);
        ASSERT_EQ(nomad_self_parse("Permission denied", 17, &id), -EBADMSG);
}

/* A literal node id is left alone; nomad with no agent answering fails with the address. */
TEST(nodeagent_resolve_node_id) {
        struct agent_config cfg = { 0 };
        struct err err = { 0 };
        cfg.node_id = xstrdup("node-7");
        ASSERT_OK(nomad_self_resolve_node_id(&cfg, 100, &err));
        ASSERT_STREQ(cfg.node_id, "node-7");
        free(cfg.node_id);
        cfg.node_id = xstrdup("nomad");
        cfg.nomad_addr = xstrdup("http://127.0.0.1:1");
        cfg.nomad_token = xstrdup("");
        cfg.nomad_ca_file = xstrdup("");
        cfg.nomad_cert_file = xstrdup("");
        cfg.nomad_key_file = xstrdup("");
        ASSERT_EQ(nomad_self_resolve_node_id(&cfg, 100, &err), -EHOSTUNREACH);
        ASSERT_TRUE(strstr(err.message, "node_id = nomad: the Nomad agent at http://127.0.0.1:1 did not answer"));
        ASSERT_STREQ(cfg.node_id, "nomad");
        agent_config_done(&cfg);
}
