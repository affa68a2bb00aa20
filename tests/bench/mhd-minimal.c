/* mhd-minimal.c — the baseline for the GET benchmark: libmicrohttpd in the same
 * threading mode as controld, answering every request with a fixed JSON body of
 * about the size of a sandbox record, with no auth and no store. */
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char body[1400];

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *up, size_t *up_size, void **con_cls) {
        (void) cls; (void) url; (void) method; (void) version; (void) up; (void) up_size; (void) con_cls;
        struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Content-Type", "application/json; charset=utf-8");
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
}

int main(int argc, char **argv) {
        int port = argc > 1 ? atoi(argv[1]) : 18124;
        memset(body, 'x', sizeof(body) - 1);
        memcpy(body, "{\"message\":\"Sandbox fetched\",\"data\":\"", 37);
        memcpy(body + sizeof(body) - 3, "\"}", 2);
        body[sizeof(body) - 1] = 0;
        struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL,
                                                (uint16_t) port, NULL, NULL, handle, NULL,
                                                MHD_OPTION_CONNECTION_LIMIT, 1024u, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                                                MHD_OPTION_END);
        if (!d) {
                fprintf(stderr, "mhd-minimal: cannot listen on %d\n", port);
                return 1;
        }
        sigset_t ss;
        sigemptyset(&ss);
        sigaddset(&ss, SIGTERM);
        sigaddset(&ss, SIGINT);
        sigprocmask(SIG_BLOCK, &ss, NULL);
        int sig;
        sigwait(&ss, &sig);
        MHD_stop_daemon(d);
        return 0;
}
