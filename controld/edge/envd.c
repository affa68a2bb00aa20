/* envd.c — envd's surface (E2B's in-sandbox daemon, port 49983), served by controld over the
 * sandbox's agent: the Connect protocol with the JSON codec for process.Process and
 * filesystem.Filesystem (unary calls and server streams), and HTTP /files, /health, /envs.
 *
 * A request reaches here through e2b.c (E2b-Sandbox-Id or Host 49983-<id>.<domain>). It must
 * carry the sandbox's access token (X-Access-Token, compared in constant time); the sandbox
 * must be running. Commands, files and terminals are E2B's `user` (uid 1000, HOME /home/user) or
 * root (HOME /root), as the request names them; unnamed, `user` in E2B sandboxes of a template
 * with that account ([e2b] user_templates), root elsewhere. The home is where relative paths
 * start. Everything the agent says is bounded by its codec; every wait here has a deadline.
 *
 * This file is the route table; the services are envd-process.c (process.Process), envd-fs.c
 * (filesystem.Filesystem) and envd-files.c (/files, /health, /envs), and what they share (the
 * tokens, the request's sandbox and user, Connect answers and streams) is envd-common.c's,
 * through envd-private.h. Calls go one way: envd.c -> services -> envd-common.c. */
#include <stdio.h>

#include "controld.h"
#include "e2b.h"
#include "envd-private.h"
#include "http.h"

/* ---- routes ---- */

static enum MHD_Result not_found(struct req *r) {
        return respond_error(r, 404, "No such envd endpoint: %s %s", r->method, r->path);
}

#define J ROUTE_BODY_JSON
#define L ROUTE_BODY_LARGE
#define S ROUTE_BODY_STREAM
static const struct route envd_routes[] = {
        /* method pattern                                   label                                  noun  auth   head   body prepare handler */
        { "GET",  "/health",                                "envd /health",                        NULL, false, true,  J, NULL, envd_get_health },
        { "GET",  "/envs",                                  "envd /envs",                          NULL, false, false, J, NULL, envd_get_envs },
        { "GET",  "/files",                                 "envd /files",                         NULL, false, false, J, NULL, envd_get_files },
        { "POST", "/files",                                 "envd /files",                         NULL, false, false, S, envd_prepare_post_files, envd_post_files },
        { "POST", "/process.Process/Start",                 "envd process.Start",                  NULL, false, false, L, NULL, envd_p_start },
        { "POST", "/process.Process/Connect",               "envd process.Connect",                NULL, false, false, L, NULL, envd_p_connect },
        { "POST", "/process.Process/List",                  "envd process.List",                   NULL, false, false, L, NULL, envd_p_list },
        { "POST", "/process.Process/SendInput",             "envd process.SendInput",              NULL, false, false, L, NULL, envd_p_input },
        { "POST", "/process.Process/SendSignal",            "envd process.SendSignal",             NULL, false, false, L, NULL, envd_p_signal },
        { "POST", "/process.Process/CloseStdin",            "envd process.CloseStdin",             NULL, false, false, L, NULL, envd_p_close_stdin },
        { "POST", "/process.Process/Update",                "envd process.Update",                 NULL, false, false, L, NULL, envd_p_update },
        { "POST", "/process.Process/StreamInput",           "envd process.StreamInput",            NULL, false, false, L, NULL, envd_p_stream_input },
        { "POST", "/filesystem.Filesystem/Stat",            "envd filesystem.Stat",                NULL, false, false, L, NULL, envd_fs_stat },
        { "POST", "/filesystem.Filesystem/MakeDir",         "envd filesystem.MakeDir",             NULL, false, false, L, NULL, envd_fs_mkdir },
        { "POST", "/filesystem.Filesystem/Move",            "envd filesystem.Move",                NULL, false, false, L, NULL, envd_fs_move },
        { "POST", "/filesystem.Filesystem/ListDir",         "envd filesystem.ListDir",             NULL, false, false, L, NULL, envd_fs_listdir },
        { "POST", "/filesystem.Filesystem/Remove",          "envd filesystem.Remove",              NULL, false, false, L, NULL, envd_fs_remove },
        { "POST", "/filesystem.Filesystem/WatchDir",        "envd filesystem.WatchDir",            NULL, false, false, L, NULL, envd_fs_watch },
        { "POST", "/filesystem.Filesystem/CreateWatcher",   "envd filesystem.CreateWatcher",       NULL, false, false, L, NULL, envd_fs_create_watcher },
        { "POST", "/filesystem.Filesystem/GetWatcherEvents", "envd filesystem.GetWatcherEvents",   NULL, false, false, L, NULL, envd_fs_get_watcher_events },
        { "POST", "/filesystem.Filesystem/RemoveWatcher",   "envd filesystem.RemoveWatcher",       NULL, false, false, L, NULL, envd_fs_remove_watcher },
};
static const struct route unknown_row = { "GET", "/", "envd unknown", NULL, false, false, J, NULL, not_found };
#undef J
#undef L
#undef S

enum route_status envd_route(struct req *r, const char *sandbox_id) {
        enum route_status st = route_match_in(envd_routes, ELEMENTSOF(envd_routes), r->method, r->path, &r->m);
        if (st == ROUTE_NOT_FOUND) {
                r->m = (struct route_match) { .status = ROUTE_FOUND, .row = &unknown_row };
                st = ROUTE_FOUND;
        }
        snprintf(r->m.id, sizeof(r->m.id), "%s", sandbox_id ? sandbox_id : "");
        return st;
}
