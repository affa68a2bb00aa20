/* sse-ttfb URL KEY JSON-BODY [RUNS]
 *
 * POSTs a streamed exec and prints, per run, the milliseconds from the start of the
 * request to the first "data:" line (the ": open" comment before it does not count)
 * and to the end of the stream:  "<first-frame-ms> <total-ms>".
 * Plain libcurl; links with nothing of the test library (its own main). */
#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct st {
        double t0, first;
        char tail[8];   /* last bytes seen, to find "\ndata:" across writes */
        size_t seen;
};

static double now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static size_t on_data(char *p, size_t sz, size_t nm, void *ud) {
        struct st *s = ud;
        size_t k = sz * nm;
        if (s->first < 0) {
                /* Look for "data:" at the start of a line, also split across writes. */
                char buf[8 + 65536];
                size_t tl = strlen(s->tail), n = k > 65536 ? 65536 : k;
                memcpy(buf, s->tail, tl);
                memcpy(buf + tl, p, n);
                buf[tl + n] = 0;
                bool at_start = s->seen == 0;
                for (size_t i = 0; i + 5 <= tl + n; i++)
                        if ((i == 0 ? (at_start && tl == 0) : buf[i - 1] == '\n') && !memcmp(buf + i, "data:", 5)) {
                                s->first = now_ms() - s->t0;
                                break;
                        }
                size_t keep = tl + n < 6 ? tl + n : 6;
                memcpy(s->tail, buf + tl + n - keep, keep);
                s->tail[keep] = 0;
        }
        s->seen += k;
        return k;
}

int main(int argc, char **argv) {
        if (argc < 4) {
                fprintf(stderr, "usage: %s URL KEY JSON-BODY [RUNS]\n", argv[0]);
                return 2;
        }
        int runs = argc > 4 ? atoi(argv[4]) : 1;
        char kh[512];
        snprintf(kh, sizeof(kh), "x-brimble-key: %s", argv[2]);
        curl_global_init(CURL_GLOBAL_DEFAULT);
        for (int i = 0; i < runs; i++) {
                struct st s = { .first = -1 };
                CURL *h = curl_easy_init();
                struct curl_slist *hl = curl_slist_append(NULL, kh);
                hl = curl_slist_append(hl, "Content-Type: application/json");
                hl = curl_slist_append(hl, "Expect:");
                curl_easy_setopt(h, CURLOPT_URL, argv[1]);
                curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, argv[3]);
                curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
                curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
                curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
                curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
                s.t0 = now_ms();
                CURLcode rc = curl_easy_perform(h);
                double total = now_ms() - s.t0;
                long st = 0;
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
                curl_slist_free_all(hl);
                curl_easy_cleanup(h);
                if (rc != CURLE_OK || st != 200 || s.first < 0) {
                        fprintf(stderr, "sse-ttfb: run %d: curl %d (%s), HTTP %ld, first frame %s\n", i, rc, curl_easy_strerror(rc), st,
                                s.first < 0 ? "never" : "seen");
                        return 1;
                }
                printf("%.1f %.1f\n", s.first, total);
                fflush(stdout);
        }
        curl_global_cleanup();
        return 0;
}
