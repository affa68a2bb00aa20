/* Egress allowlist entries (proto-json/pj_egress.c pj_allow_entry_parse): untrusted text
 * that becomes firewall rules on every node. Properties: any string is accepted or refused
 * with a reason, never crashes; the normalised form of an accepted entry is accepted again
 * and normalises to itself with the same kind, address and prefix; CIDR host bits are zero;
 * an address/CIDR never comes back as a hostname and vice versa. */
#include <string.h>

#include "cleanup.h"
#include "fuzz.h"
#include "pj_egress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size > 1024 || memchr(data, 0, size))
                return 0;
        _cleanup_free_ char *s = strndup((const char *) data, size);
        struct pj_allow_entry a, b;
        char norm[PJ_ALLOW_NORM_MAX], norm2[PJ_ALLOW_NORM_MAX];
        struct err why = { 0 };

        if (pj_allow_entry_parse(s, &a, norm, sizeof(norm), &why) < 0) {
                FUZZ_ASSERT(why.message[0], "refused without a reason: %s", s);
                return 0;
        }
        FUZZ_ASSERT(pj_allow_entry_parse(norm, &b, norm2, sizeof(norm2), &why) == 0,
                    "normalised form refused (%s): %s -> %s", why.message, s, norm);
        FUZZ_ASSERT(!strcmp(norm, norm2), "normalisation not idempotent: %s -> %s -> %s", s, norm, norm2);
        FUZZ_ASSERT(a.kind == b.kind && a.addr == b.addr && a.prefix == b.prefix && !strcmp(a.host, b.host), "entry changed: %s -> %s", s, norm);
        switch (a.kind) {
        case PJ_ALLOW_IPV4:
                FUZZ_ASSERT(a.prefix == 32, "address with prefix %d", a.prefix);
                break;
        case PJ_ALLOW_CIDR: {
                FUZZ_ASSERT(a.prefix >= 0 && a.prefix <= 32, "prefix %d", a.prefix);
                /* Shifting a 32-bit value by 32 is undefined (UBSan stops on "0.1.0.0/32"):
                 * a /32 has no host bits. */
                uint32_t host = a.prefix == 32 ? 0 : 0xffffffffu >> a.prefix;
                FUZZ_ASSERT((a.addr & host) == 0, "host bits set: %s", norm);
                break;
        }
        case PJ_ALLOW_HOSTNAME:
                FUZZ_ASSERT(a.addr == 0 && a.prefix == 0 && !strcmp(a.host, norm), "hostname with an address: %s", norm);
                FUZZ_ASSERT(strspn(norm, "0123456789.") != strlen(norm), "all-digit hostname: %s", norm);
                break;
        }
        return 0;
}
