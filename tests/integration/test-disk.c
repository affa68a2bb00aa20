/* Disk limits as a user sees them (issue 9), on real dockerd + gVisor with Docker's data-root on
 * btrfs (tests/env/services.sh): specs.disk caps the sandbox's writable root, a volume's sizeGB
 * caps the volume; a write past the cap fails inside the sandbox, the host's filesystem does not
 * fill, and other sandboxes are unaffected. Skipped where Docker does not store on btrfs. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "json.h"
#include "strutil.h"
#include "testlib.h"

#define LOCAL_REGION "6a06df21cc6bef51342e199e"
#define MB (1024LL * 1024)

static char *sh_line(const char *cmd) {
        FILE *p = popen(cmd, "r");
        ASSERT_NOT_NULL(p);
        char buf[1024] = "";
        if (!fgets(buf, sizeof(buf), p))
                buf[0] = 0;
        pclose(p);
        buf[strcspn(buf, "\n")] = 0;
        return xstrdup(buf);
}

/* Docker's data-root, when Docker stores on btrfs; skips the test otherwise. */
static char *btrfs_data_root(void) {
        if (!test_have_docker())
                TEST_SKIP("dockerd is not answering on /var/run/docker.sock (start it with tests/env/services.sh start docker)");
        _cleanup_free_ char *drv = sh_line("docker info -f '{{.Driver}}' 2>/dev/null");
        if (strcmp(drv, "btrfs") != 0)
                TEST_SKIP("Docker's storage driver is not btrfs (tests/env/services.sh puts its data-root on btrfs)");
        char *root = xstrdup(ctld_docker_root());
        ASSERT_TRUE(root[0] == '/');
        return root;
}

/* A directory for capped volumes on the same btrfs filesystem as Docker's data-root. */
static char *volume_root(const char *data_root) {
        _cleanup_free_ char *d = xstrdup(data_root);
        char *v = xasprintf("%s/volumes", dirname(d));   /* services.sh: <fs>/docker, <fs>/volumes */
        (void) mkdir(v, 0700);
        _cleanup_free_ char *cmd = xasprintf("stat -f -c %%T %s", v);
        _cleanup_free_ char *fs = sh_line(cmd);
        ASSERT_STREQ(fs, "btrfs");
        return v;
}

static long long free_bytes(const char *path) {
        sync();
        struct statvfs s;
        ASSERT_EQ(statvfs(path, &s), 0);
        return (long long) s.f_bavail * (long long) s.f_frsize;
}

static void exec_req(struct ctld *c, const char *key, const char *id, const char *cmd, int timeout_s, struct hres *r) {
        ctld_exec(c, key, id, cmd, timeout_s, r);
        if (r->status != 200)
                test_fail(__FILE__, __LINE__, "exec %s: HTTP %ld %.400s", cmd, r->status, r->body);
}

static long long exit_code(const struct hres *r) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(r->json, "data");
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(d, "exit_code");
        ASSERT_TRUE(cJSON_IsNumber(e));
        return (long long) e->valuedouble;
}

/* Writes 1.5 GB to file inside the sandbox; asserts it fails with the quota error, that at
 * most ~1 GB landed, and that the host's filesystem lost at most ~1.1 GB. */
static void write_past_cap(struct ctld *c, const char *key, const char *id, const char *file, const char *data_root) {
        long long before = free_bytes(data_root);
        _cleanup_free_ char *cmd = xasprintf("dd if=/dev/zero of=%s bs=1M count=1536", file);
        struct hres r;
        exec_req(c, key, id, cmd, 240, &r);
        fprintf(stderr, "  %s: exit %lld, stderr: %.300s\n", cmd, exit_code(&r), hres_data_str(&r, "stderr"));
        ASSERT_NE(exit_code(&r), 0);
        ASSERT_CONTAINS(hres_data_str(&r, "stderr"), "Disk quota exceeded");
        hres_done(&r);
        free(cmd);
        /* Its size, not its bytes: reading a file written up to the quota back through gVisor
         * can stall for minutes (seen with `docker exec ... wc -c` as well as through the agent). */
        cmd = xasprintf("stat -c %%s %s", file);
        exec_req(c, key, id, cmd, 60, &r);
        long long written = atoll(hres_data_str(&r, "stdout"));
        if (written < 512 * MB)
                fprintf(stderr, "  %s: %.600s\n", cmd, r.body);
        hres_done(&r);
        long long used = before - free_bytes(data_root);
        fprintf(stderr, "  %s holds %lld MB; the host's filesystem lost %lld MB\n", file, written / MB, used / MB);
        ASSERT_LE(written, 1024 * MB);
        ASSERT_GE(written, 512 * MB);   /* the write did run until the cap */
        ASSERT_LE(used, 1126 * MB);
}

TEST_FULL(disk_spec_caps_the_sandbox_root, 420) {
        _cleanup_free_ char *data_root = btrfs_data_root();
        struct ctld c;
        char id[25], other[25];
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "dora", NULL, NULL);
        ctld_create(&c, key, "{\"template\":\"busybox\",\"specs\":{\"disk\":1}}", id);
        ctld_create(&c, key, "{\"template\":\"busybox\",\"specs\":{\"disk\":2}}", other);

        write_past_cap(&c, key, id, "/root/big", data_root);

        /* The full sandbox still answers, and freeing space there works again. */
        struct hres r;
        exec_req(&c, key, id, "rm /root/big && echo ok > /root/small && cat /root/small", 60, &r);
        ASSERT_EQ(exit_code(&r), 0);
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "ok\n");
        hres_done(&r);
        /* Another sandbox is unaffected: 300 MB fit in its own 2 GB. */
        exec_req(&c, key, other, "dd if=/dev/zero of=/root/f bs=1M count=300 && sync && wc -c < /root/f", 120, &r);
        ASSERT_EQ(exit_code(&r), 0);
        ASSERT_CONTAINS(hres_data_str(&r, "stdout"), "314572800");
        hres_done(&r);
        ctld_stop(&c);
}

TEST_FULL(volume_size_caps_the_volume, 420) {
        _cleanup_free_ char *data_root = btrfs_data_root();
        _cleanup_free_ char *vroot = volume_root(data_root);
        struct ctld c;
        char id[25], vid[25], path[256], body[256];
        _cleanup_free_ char *extra = xasprintf("[docker]\nvolume_root = %s\n", vroot);
        ctld_start(&c, NULL, extra);
        _cleanup_free_ char *key = ctld_account_key(&c, "vera", NULL, NULL);

        struct hres r;
        http_req(&c, "POST", "/volumes", key, "{\"name\":\"capped\",\"sizeGB\":10,\"region\":\"" LOCAL_REGION "\"}", &r);
        if (r.status != 201)
                test_fail(__FILE__, __LINE__, "POST /volumes: HTTP %ld %.400s", r.status, r.body);
        snprintf(vid, sizeof(vid), "%s", hres_data_str(&r, "id"));
        hres_done(&r);
        ASSERT_TRUE(hexid_valid(vid));
        /* The volume is a subvolume under volume_root. */
        snprintf(path, sizeof(path), "%s/paddock-vol-%s", vroot, vid);
        struct stat st;
        ASSERT_EQ(stat(path, &st), 0);
        ASSERT_EQ((long long) st.st_ino, 256);   /* a btrfs subvolume's root directory */

        snprintf(body, sizeof(body), "{\"template\":\"python-3.11\",\"volumeId\":\"%s\",\"mountPath\":\"/workspace\",\"specs\":{\"disk\":2}}", vid);
        ctld_create(&c, key, body, id);
        /* 10 GB is the smallest volume: take 9 GB of it at once (fallocate: no data written),
         * then write past the remaining ~1 GB. */
        exec_req(&c, key, id, "fallocate -l 9G /workspace/pre && sync", 120, &r);
        if (exit_code(&r) != 0)
                test_fail(__FILE__, __LINE__, "fallocate: %.400s", r.body);
        hres_done(&r);
        write_past_cap(&c, key, id, "/workspace/big", data_root);
        /* The sandbox's root (2 GB) is not the volume's cap: 300 MB fit there. */
        exec_req(&c, key, id, "dd if=/dev/zero of=/root/f bs=1M count=300 && sync && wc -c < /root/f", 120, &r);
        ASSERT_EQ(exit_code(&r), 0);
        ASSERT_CONTAINS(hres_data_str(&r, "stdout"), "314572800");
        hres_done(&r);

        /* Deleting the volume deletes its subvolume (and data). */
        snprintf(body, sizeof(body), "/sandboxes/%s", id);
        http_req(&c, "DELETE", body, key, NULL, &r);
        ASSERT_TRUE(r.status == 200 || r.status == 204);
        hres_done(&r);
        snprintf(body, sizeof(body), "/volumes/%s", vid);
        for (int i = 0; i < 100; i++) {   /* the volume is free once the sandbox is gone */
                http_req(&c, "DELETE", body, key, NULL, &r);
                long s = r.status;
                if (s == 200 || s == 204)
                        break;
                fprintf(stderr, "  DELETE %s: %ld %.200s\n", body, s, r.body);
                hres_done(&r);
                usleep(200 * 1000);
        }
        ASSERT_TRUE(r.status == 200 || r.status == 204);
        hres_done(&r);
        ASSERT_EQ(stat(path, &st), -1);
        ASSERT_EQ(errno, ENOENT);
        ctld_stop(&c);
}
