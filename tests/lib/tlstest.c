/* tlstest.c — see tlstest.h. */
#include <stdio.h>

#include "cleanup.h"
#include "testlib.h"
#include "tlstest.h"

static void run(char *const argv[]) {
        _cleanup_free_ char *out = NULL;
        if (test_run_capture(argv, &out, 1 << 16) != 0)
                test_fail(__FILE__, __LINE__, "%s %s failed", argv[0], argv[1]);
}

void tlstest_make(struct tlstest *t, const char *dir, const char *prefix, const char *san) {
        char cakey[300], csr[300], ext[300], serial[300], extline[200];
        snprintf(t->ca, sizeof(t->ca), "%s/%s-ca.pem", dir, prefix);
        snprintf(cakey, sizeof(cakey), "%s/%s-ca.key", dir, prefix);
        snprintf(t->cert, sizeof(t->cert), "%s/%s.pem", dir, prefix);
        snprintf(t->key, sizeof(t->key), "%s/%s.key", dir, prefix);
        snprintf(csr, sizeof(csr), "%s/%s.csr", dir, prefix);
        snprintf(ext, sizeof(ext), "%s/%s.ext", dir, prefix);
        snprintf(serial, sizeof(serial), "%s/%s-ca.srl", dir, prefix);
        snprintf(extline, sizeof(extline), "subjectAltName=%s\n", san);
        FILE *f = fopen(ext, "w");
        ASSERT_NOT_NULL(f);
        fputs(extline, f);
        fclose(f);
        run((char *[]) { "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                         "-keyout", cakey, "-out", t->ca, "-days", "2", "-subj", "/CN=paddock-test-ca", NULL });
        run((char *[]) { "openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                         t->key, "-out", csr, "-subj", "/CN=paddock-test-relay", NULL });
        run((char *[]) { "openssl", "x509", "-req", "-in", csr, "-CA", t->ca, "-CAkey", cakey, "-CAserial", serial,
                         "-CAcreateserial", "-out", t->cert, "-days", "2", "-extfile", ext, NULL });
}
