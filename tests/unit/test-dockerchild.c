/* Unit tests for controld/dockerchild*.c: the allowlist passes the Docker calls controld makes
 * and refuses anything more (a privileged or host-bound container, an endpoint controld never
 * calls, another's container or image); the child itself refuses malformed messages and calls
 * outside the allowlist before it would reach Docker (no Docker needed here: the socket it is
 * given does not exist, so a call that passes the allowlist fails on the transport instead). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "controld.h"
#include "dockerchild.h"
#include "dockerchild-private.h"
#include "testlib.h"

#define SB "0123456789abcdef01234567"
#define CT "paddock-" SB

static struct config *test_config(void) {
        struct config *c = xnew0(struct config, 1);
        c->driver = xstrdup("docker");
        c->docker_socket = xstrdup("/nonexistent/docker.sock");
        c->docker_runtime = xstrdup("runsc");
        c->docker_runtime_net = xstrdup("runsc-net");
        c->docker_network = xstrdup("paddock-sandbox");
        c->docker_network_internal = xstrdup("paddock-restricted");
        c->docker_volume_root = xstrdup("/srv/volumes");
        c->snap_registry = xstrdup("127.0.0.1:5000");
        c->snap_repository = xstrdup("paddock/snapshots");
        c->utpl_repository = xstrdup("paddock/templates");
        c->init_binary = xstrdup("");
        c->init_dir = xstrdup("");
        c->db_path = xstrdup("/var/lib/paddock/controld.db");
        c->run_user = xstrdup("");
        return c;
}

static int allowed(const char *method, const char *path, const char *body) {
        static struct config *cfg;
        char why[512] = "";
        if (!cfg)
                cfg = test_config();
        int r = dc_docker_allowed(cfg, method, path, body, body ? strlen(body) : 0, why, sizeof(why));
        if (r < 0)
                fprintf(stderr, "  refused: %s\n", why);
        return r;
}

/* What docker_container_create sends for a sandbox (driver-docker.c's options). */
static const char create_body[] =
        "{\"Image\":\"paddock/busybox:local\",\"Entrypoint\":[\"/.paddock/init\"],\"Labels\":{\"paddock.sandbox\":\"" SB "\"},"
        "\"AttachStdin\":false,\"AttachStdout\":false,\"AttachStderr\":false,\"Tty\":false,"
        "\"Healthcheck\":{\"Test\":[\"NONE\"]},"
        "\"HostConfig\":{\"Runtime\":\"runsc-net\",\"NetworkMode\":\"paddock-sandbox\",\"Memory\":167772160,"
        "\"MemoryReservation\":134217728,\"NanoCpus\":250000000,\"CpuShares\":250,\"PidsLimit\":4096,"
        "\"CapDrop\":[\"ALL\"],\"CapAdd\":[\"ALL\"],\"SecurityOpt\":[\"no-new-privileges\"],"
        "\"ExtraHosts\":[\"metadata:127.0.0.1\"],\"StorageOpt\":{\"size\":\"5G\"},"
        "\"Mounts\":[{\"Type\":\"volume\",\"Source\":\"paddock-init-" SB "\",\"Target\":\"/.paddock/run\",\"ReadOnly\":false},"
        "{\"Type\":\"tmpfs\",\"Target\":\"/data\",\"ReadOnly\":false,\"TmpfsOptions\":{\"SizeBytes\":1024}}]}}";

TEST(the_calls_controld_makes_pass) {
        ASSERT_EQ(allowed("GET", "/_ping", NULL), 0);
        ASSERT_EQ(allowed("GET", "/info", NULL), 0);
        ASSERT_EQ(allowed("GET", "/containers/" CT "/json", NULL), 0);
        ASSERT_EQ(allowed("GET", "/containers/" CT "/stats?stream=false&one-shot=true", NULL), 0);
        ASSERT_EQ(allowed("GET", "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22x%22%5D%7D", NULL), 0);
        ASSERT_EQ(allowed("POST", "/containers/create?name=" CT, create_body), 0);
        ASSERT_EQ(allowed("POST", "/containers/" CT "/start", NULL), 0);
        ASSERT_EQ(allowed("POST", "/containers/" CT "/kill?signal=SIGKILL", NULL), 0);
        ASSERT_EQ(allowed("DELETE", "/containers/" CT "?force=1&v=1", NULL), 0);
        ASSERT_EQ(allowed("POST", "/containers/" CT "/exec",
                          "{\"AttachStdin\":false,\"AttachStdout\":true,\"AttachStderr\":true,\"Tty\":false,\"Cmd\":[\"ls\"]}"),
                  0);
        ASSERT_EQ(allowed("GET", "/exec/" SB SB "0123456789abcdef/json", NULL), 0);
        ASSERT_EQ(allowed("POST", "/containers/" CT "/checkpoints", "{\"CheckpointID\":\"p1\",\"Exit\":true}"), 0);
        ASSERT_EQ(allowed("POST", "/volumes/create",
                          "{\"Name\":\"paddock-init-" SB "\",\"Driver\":\"local\",\"DriverOpts\":{\"type\":\"tmpfs\","
                          "\"device\":\"tmpfs\",\"o\":\"size=1048576,mode=0700,nosuid,nodev,noexec\"},\"Labels\":{}}"),
                  0);
        ASSERT_EQ(allowed("POST", "/volumes/create",
                          "{\"Name\":\"paddock-vol-" SB "\",\"Driver\":\"local\",\"DriverOpts\":{\"type\":\"none\","
                          "\"o\":\"bind\",\"device\":\"/srv/volumes/paddock-vol-" SB "\"}}"),
                  0);
        ASSERT_EQ(allowed("DELETE", "/volumes/paddock-vol-" SB "?force=0", NULL), 0);
        ASSERT_EQ(allowed("GET", "/images/paddock%2Fbusybox%3Alocal/json", NULL), 0);
        ASSERT_EQ(allowed("DELETE", "/images/127.0.0.1%3A5000%2Fpaddock%2Fsnapshots%3Aabc?force=0&noprune=0", NULL), 0);
        ASSERT_EQ(allowed("GET", "/networks/paddock-sandbox", NULL), 0);
}

TEST(containers_beyond_a_sandbox_are_refused) {
        static const char *const bad_host[] = {
                "\"Privileged\":true", "\"Binds\":[\"/:/host\"]", "\"PidMode\":\"host\"", "\"Devices\":[]",
                "\"NetworkMode\":\"host\"", "\"Runtime\":\"runc\"", "\"CapAdd\":[\"SYS_ADMIN\"]",
                "\"SecurityOpt\":[\"seccomp=unconfined\"]",
                "\"Mounts\":[{\"Type\":\"bind\",\"Source\":\"/etc\",\"Target\":\"/x\",\"ReadOnly\":true}]",
                "\"Mounts\":[{\"Type\":\"volume\",\"Source\":\"someone-elses\",\"Target\":\"/x\"}]",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad_host); i++) {
                _cleanup_free_ char *b = xasprintf("{\"Image\":\"x\",\"HostConfig\":{\"Runtime\":\"runsc\",%s}}", bad_host[i]);
                /* "Runtime" twice among them: cJSON reads the first, Docker the last; refused */
                ASSERT_EQ(allowed("POST", "/containers/create?name=" CT, b), -EPERM);
        }
        ASSERT_EQ(allowed("POST", "/containers/create?name=" CT, "{\"Image\":\"x\",\"Volumes\":{},\"HostConfig\":{\"Runtime\":\"runsc\"}}"),
                  -EPERM);
        ASSERT_EQ(allowed("POST", "/containers/create?name=registry", create_body), -EPERM);
        ASSERT_EQ(allowed("POST", "/containers/create", create_body), -EPERM);
        ASSERT_EQ(allowed("POST", "/containers/create?name=" CT, "not json"), -EPERM);
}

TEST(endpoints_and_names_controld_never_uses_are_refused) {
        ASSERT_EQ(allowed("POST", "/containers/" CT "/attach?stream=1", NULL), -EPERM);
        ASSERT_EQ(allowed("GET", "/containers/" CT "/archive?path=%2F", NULL), -EPERM);
        ASSERT_EQ(allowed("PUT", "/containers/" CT "/archive?path=%2F", NULL), -EPERM);
        ASSERT_EQ(allowed("POST", "/build", NULL), -EPERM);
        ASSERT_EQ(allowed("POST", "/images/create?fromImage=evil", NULL), -EPERM);
        ASSERT_EQ(allowed("POST", "/commit?container=x", NULL), -EPERM);
        ASSERT_EQ(allowed("GET", "/secrets", NULL), -EPERM);
        ASSERT_EQ(allowed("POST", "/containers/registry/exec", "{\"Cmd\":[\"sh\"]}"), -EPERM);
        ASSERT_EQ(allowed("POST", "/containers/" CT "/exec", "{\"Cmd\":[\"sh\"],\"Privileged\":true}"), -EPERM);
        ASSERT_EQ(allowed("DELETE", "/containers/registry?force=1", NULL), -EPERM);
        ASSERT_EQ(allowed("DELETE", "/images/debian%3A12?force=1&noprune=0", NULL), -EPERM);
        ASSERT_EQ(allowed("POST", "/containers/" CT "/stop?t=1&signal=9", NULL), -EPERM);
        ASSERT_EQ(allowed("GET", "/containers/" CT "/../../info", NULL), -EPERM);
        ASSERT_EQ(allowed("GET", "/containers/%2E%2E/json", NULL), -EPERM);
        ASSERT_EQ(allowed("GET", "/containers/a%2Fb/json", NULL), -EPERM);
        ASSERT_EQ(allowed("GET", "/containers//json", NULL), -EPERM);
        ASSERT_EQ(allowed("GET", "/_ping", "{}"), -EPERM);
        ASSERT_EQ(allowed("POST", "/volumes/create",
                          "{\"Name\":\"paddock-vol-x\",\"DriverOpts\":{\"type\":\"none\",\"o\":\"bind\",\"device\":\"/\"}}"),
                  -EPERM);
        ASSERT_EQ(allowed("POST", "/volumes/create",
                          "{\"Name\":\"paddock-vol-x\",\"DriverOpts\":{\"type\":\"nfs\",\"o\":\"addr=1.2.3.4\",\"device\":\":/\"}}"),
                  -EPERM);
        ASSERT_EQ(allowed("POST", "/networks/create", "{\"Name\":\"host\",\"Driver\":\"bridge\"}"), -EPERM);
}

/* The child over its socket: started here with a Docker socket that does not exist. Its
 * config lives as long as the process (a global: the sanitizer's leak check sees it). */
struct config *child_cfg;
static void start_child(void) {
        struct err err = { 0 };
        child_cfg = test_config();
        int r = dockerchild_start(child_cfg, &err);
        if (r < 0)
                fprintf(stderr, "  %s\n", err.message);
        ASSERT_EQ(r, 0);
}

static size_t build(uint8_t *buf, uint16_t op, unsigned nargs, const char *const *args) {
        struct dc_req m = { .hdr = { .version = DC_VERSION, .type = DC_REQ }, .op = op, .nargs = (uint16_t) nargs };
        size_t o = sizeof(m);
        for (unsigned i = 0; i < nargs; i++) {
                m.arglen[i] = (uint32_t) strlen(args[i]);
                memcpy(buf + o, args[i], m.arglen[i]);
                o += m.arglen[i];
        }
        m.hdr.len = (uint32_t) o;
        memcpy(buf, &m, sizeof(m));
        return o;
}

TEST(the_child_refuses_before_it_reaches_docker) {
        char msg[DC_ERR_MAX];
        start_child();
        ASSERT_EQ(dockerchild_ping(msg, sizeof(msg)), 0);
        ASSERT_TRUE(strstr(msg, "docker child") != NULL);

        long status = 0;
        char *body = NULL;
        size_t len = 0;
        /* outside the allowlist: refused, Docker never asked */
        ASSERT_EQ(dockerchild_docker_call("POST", "/containers/create?name=evil", "{}", 2, 1000, &status, &body, &len), -EPERM);
        ASSERT_EQ(dockerchild_docker_call("GET", "/containers/" CT "/archive?path=%2Fetc", NULL, 0, 1000, &status, &body, &len),
                  -EPERM);
        /* inside: passed on, and fails only because there is no Docker here */
        int r = dockerchild_docker_call("GET", "/_ping", NULL, 0, 1000, &status, &body, &len);
        ASSERT_TRUE(r < 0 && r != -EPERM && r != -EBADMSG);
        free(body);
}

TEST(malformed_messages_are_refused) {
        char msg[DC_ERR_MAX];
        _cleanup_free_ uint8_t *buf = xmalloc(DC_REQ_MAX + 64);
        start_child();
        const char *ping_args[] = { "GET", "/_ping", "" };

        size_t n = build(buf, DC_OP_DOCKER, 3, ping_args);
        struct dc_req m;
        memcpy(&m, buf, sizeof(m));

        /* short of a header */
        ASSERT_EQ(dockerchild_send_raw(buf, 6, -1, msg, sizeof(msg)), -EBADMSG);
        /* header length that is not the message's */
        struct dc_req bad = m;
        bad.hdr.len = (uint32_t) n + 1;
        memcpy(buf, &bad, sizeof(bad));
        ASSERT_EQ(dockerchild_send_raw(buf, n, -1, msg, sizeof(msg)), -EBADMSG);
        ASSERT_TRUE(strstr(msg, "header says") != NULL);
        /* argument lengths that do not add up */
        bad = m;
        bad.arglen[1] += 1;
        memcpy(buf, &bad, sizeof(bad));
        ASSERT_EQ(dockerchild_send_raw(buf, n, -1, msg, sizeof(msg)), -EBADMSG);
        /* another version, an unknown op, the wrong argument count, a reserved field */
        bad = m;
        bad.hdr.version = DC_VERSION + 1;
        memcpy(buf, &bad, sizeof(bad));
        ASSERT_EQ(dockerchild_send_raw(buf, n, -1, msg, sizeof(msg)), -EBADMSG);
        bad = m;
        bad.op = DC_OP_MAX;
        memcpy(buf, &bad, sizeof(bad));
        ASSERT_EQ(dockerchild_send_raw(buf, n, -1, msg, sizeof(msg)), -EBADMSG);
        bad = m;
        bad.reserved = 1;
        memcpy(buf, &bad, sizeof(bad));
        ASSERT_EQ(dockerchild_send_raw(buf, n, -1, msg, sizeof(msg)), -EBADMSG);
        n = build(buf, DC_OP_DOCKER, 2, ping_args);
        ASSERT_EQ(dockerchild_send_raw(buf, n, -1, msg, sizeof(msg)), -EBADMSG);
        /* a NUL inside a text argument (a path cut short on one side, not on the other) */
        const char *nul_args[] = { "GET", "/_ping", "" };
        n = build(buf, DC_OP_DOCKER, 3, nul_args);
        memcpy(&m, buf, sizeof(m));
        buf[sizeof(m) + 4] = 0;         /* inside "/_ping" */
        ASSERT_EQ(dockerchild_send_raw(buf, n, -1, msg, sizeof(msg)), -EBADMSG);
        /* an fd with an op that takes none */
        n = build(buf, DC_OP_DOCKER, 3, ping_args);
        ASSERT_EQ(dockerchild_send_raw(buf, n, STDIN_FILENO, msg, sizeof(msg)), -EBADMSG);
        /* larger than any request */
        memset(buf, 'x', DC_REQ_MAX + 8);
        ASSERT_EQ(dockerchild_send_raw(buf, DC_REQ_MAX + 8, -1, msg, sizeof(msg)), -EBADMSG);
        /* and a well-formed one still works after all that */
        ASSERT_EQ(dockerchild_ping(msg, sizeof(msg)), 0);
}

TEST(other_asks_are_held_to_their_paths) {
        char msg[DC_ERR_MAX];
        start_child();
        ASSERT_EQ(dockerchild_cgroup_open("/etc/shadow"), -EPERM);
        ASSERT_EQ(dockerchild_cgroup_open("/sys/fs/cgroup/../../etc/cpu.max.burst"), -EPERM);
        ASSERT_EQ(dockerchild_agent_wait("../../etc", 10), -EPERM);
        ASSERT_TRUE(dockerchild_tree_bytes("/") < 0);
        ASSERT_EQ(dockerchild_ping(msg, sizeof(msg)), 0);
}
