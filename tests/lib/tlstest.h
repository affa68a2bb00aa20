/* tlstest.h — a throwaway CA and a certificate it signed, made with the openssl command, for
 * tests of TLS between Paddock's own daemons (the node relay). */
#pragma once

#include <stddef.h>

struct tlstest {
        char ca[300];          /* CA certificate (PEM) */
        char cert[300], key[300];   /* the leaf: certificate and key (PEM) */
};

/* Makes a CA and a leaf for subject alternative name san ("IP:127.0.0.1", "DNS:relay") under
 * dir (prefix names the files). Fails the test if openssl fails. */
void tlstest_make(struct tlstest *t, const char *dir, const char *prefix, const char *san);
