/* pj_egress.c — egress policy helpers and allowlist entry validation.
 *
 * Strictness here is a security property: controld validates the entry and
 * nodeagent turns it into nft set elements or DNS lookups. Any form that some
 * resolver or inet_aton() would read differently ("010.0.0.1", "0x7f.1",
 * "2130706433", "127.1") is rejected rather than interpreted.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "pj_egress.h"

static const char *const mode_names[] = {
        [PJ_EGRESS_OPEN] = "open",
        [PJ_EGRESS_RESTRICTED] = "restricted",
        [PJ_EGRESS_DENY_ALL] = "deny_all",
};

const char *pj_egress_mode_to_string(enum pj_egress_mode m) {
        if ((unsigned) m >= ELEMENTSOF(mode_names))
                return "unknown";
        return mode_names[m];
}

int pj_egress_mode_from_string(const char *s, enum pj_egress_mode *ret) {
        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(mode_names); i++)
                if (strcmp(s, mode_names[i]) == 0) {
                        if (ret)
                                *ret = (enum pj_egress_mode) i;
                        return 0;
                }
        return -EINVAL;
}

static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

/* Decimal 0..max from exactly [s, s+n): 1..3 digits, no leading zero unless "0". */
static bool parse_small_uint(const char *s, size_t n, unsigned max, unsigned *ret) {
        if (n == 0 || n > 3)
                return false;
        if (n > 1 && s[0] == '0')
                return false;
        unsigned v = 0;
        for (size_t i = 0; i < n; i++) {
                if (!is_digit(s[i]))
                        return false;
                v = v * 10 + (unsigned) (s[i] - '0');
        }
        if (v > max)
                return false;
        *ret = v;
        return true;
}

/* Strict dotted quad over [s, s+n). */
static bool parse_ipv4(const char *s, size_t n, uint32_t *ret) {
        uint32_t addr = 0;
        size_t start = 0;
        int octets = 0;
        for (size_t i = 0; i <= n; i++) {
                if (i < n && s[i] != '.')
                        continue;
                unsigned v;
                if (octets == 4 || !parse_small_uint(s + start, i - start, 255, &v))
                        return false;
                addr = (addr << 8) | v;
                octets++;
                start = i + 1;
        }
        if (octets != 4)
                return false;
        *ret = addr;
        return true;
}

static void format_ipv4(uint32_t a, char *buf, size_t len) {
        snprintf(buf, len, "%u.%u.%u.%u", (a >> 24) & 0xff, (a >> 16) & 0xff, (a >> 8) & 0xff, a & 0xff);
}

static bool is_hostname_char(char c) {
        return (c >= 'a' && c <= 'z') || is_digit(c) || c == '-';
}

static int parse_hostname(const char *s, size_t n, char host[static 254], struct err *why) {
        if (n > 0 && s[n - 1] == '.')
                n--; /* one trailing dot = fully qualified; same name */
        if (n == 0)
                return err_set(why, -EINVAL, "is not a valid hostname");
        if (n > 253)
                return err_set(why, -EINVAL, "is too long; hostnames have at most 253 characters");

        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (c >= 'A' && c <= 'Z')
                        c = (char) (c - 'A' + 'a');
                if (c != '.' && !is_hostname_char(c)) {
                        if (c == '_')
                                return err_set(why, -EINVAL,
                                               "is not a valid hostname: '_' is not allowed in hostnames");
                        if ((unsigned char) c >= 0x21 && (unsigned char) c <= 0x7e)
                                return err_set(why, -EINVAL,
                                               "is not a valid hostname: character '%c' is not allowed; use an IPv4 address, a CIDR range or a hostname such as api.example.com",
                                               c);
                        return err_set(why, -EINVAL,
                                       "is not a valid hostname: only letters, digits, '-' and '.' are allowed");
                }
                host[i] = c;
        }
        host[n] = '\0';

        size_t labels = 0, start = 0;
        bool last_all_digits = false;
        for (size_t i = 0; i <= n; i++) {
                if (i < n && host[i] != '.')
                        continue;
                size_t l = i - start;
                if (l == 0)
                        return err_set(why, -EINVAL, "is not a valid hostname: it has an empty label");
                if (l > 63)
                        return err_set(why, -EINVAL,
                                       "is not a valid hostname: a label is longer than 63 characters");
                if (host[start] == '-' || host[i - 1] == '-')
                        return err_set(why, -EINVAL,
                                       "is not a valid hostname: a label starts or ends with '-'");
                last_all_digits = true;
                for (size_t j = start; j < i; j++)
                        if (!is_digit(host[j]))
                                last_all_digits = false;
                labels++;
                start = i + 1;
        }
        if (labels < 2)
                return err_set(why, -EINVAL,
                               "is not a valid hostname: use a fully qualified name such as api.example.com");
        if (last_all_digits)
                return err_set(why, -EINVAL,
                               "is neither a valid IPv4 address nor a valid hostname (the last label is numeric)");
        return 0;
}

int pj_allow_entry_parse(const char *s, struct pj_allow_entry *ret, char *norm_out, size_t norm_len,
                         struct err *why) {
        if (!s)
                return err_set(why, -EINVAL, "is missing");
        size_t n = strnlen(s, 1024);
        if (n == 0)
                return err_set(why, -EINVAL, "is empty");
        if (n > 254)
                return err_set(why, -EINVAL, "is too long; entries have at most 253 characters");

        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s[i];
                if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
                        return err_set(why, -EINVAL, "contains whitespace");
                if (c < 0x20 || c >= 0x7f)
                        return err_set(why, -EINVAL,
                                       "contains characters that are not allowed; use an IPv4 address, a CIDR range or an ASCII hostname");
        }
        if (strstr(s, "://"))
                return err_set(why, -EINVAL, "is a URL; give only the hostname, e.g. api.example.com");
        if (s[0] == '[' || strchr(s, ':') != strrchr(s, ':'))
                return err_set(why, -EINVAL,
                               "is an IPv6 address; IPv6 is not supported, use an IPv4 address, a CIDR range or a hostname");
        if (strchr(s, ':'))
                return err_set(why, -EINVAL, "contains ':'; ports are not supported (all ports of an allowed destination are open)");
        if (strchr(s, '*'))
                return err_set(why, -EINVAL,
                               "is a wildcard; wildcards are not supported, list each hostname instead");

        struct pj_allow_entry e = {};
        char norm[PJ_ALLOW_NORM_MAX];
        const char *slash = strchr(s, '/');
        if (slash) {
                size_t alen = (size_t) (slash - s);
                uint32_t addr;
                unsigned prefix;
                if (!parse_ipv4(s, alen, &addr))
                        return err_set(why, -EINVAL,
                                       "is not a valid CIDR range: the part before '/' must be an IPv4 address like 10.0.0.0");
                if (!parse_small_uint(slash + 1, n - alen - 1, 32, &prefix))
                        return err_set(why, -EINVAL,
                                       "is not a valid CIDR range: the prefix length after '/' must be 0..32");
                uint32_t mask = prefix == 0 ? 0 : (uint32_t) (0xffffffffu << (32 - prefix));
                if (addr & ~mask) {
                        char net[16];
                        format_ipv4(addr & mask, net, sizeof(net));
                        return err_set(why, -EINVAL, "has host bits set; did you mean %s/%u?", net, prefix);
                }
                e.kind = PJ_ALLOW_CIDR;
                e.addr = addr;
                e.prefix = (int) prefix;
                char a[16];
                format_ipv4(addr, a, sizeof(a));
                snprintf(norm, sizeof(norm), "%s/%u", a, prefix);
        } else if (strspn(s, "0123456789.") == n) {
                /* Only digits and dots: an address or nothing. Never a hostname
                 * (numeric TLD), so "127.1" cannot slip through as a name. */
                uint32_t addr;
                if (!parse_ipv4(s, n, &addr))
                        return err_set(why, -EINVAL,
                                       "is not a valid IPv4 address: use four decimal numbers 0..255 without leading zeros, e.g. 10.0.0.1");
                e.kind = PJ_ALLOW_IPV4;
                e.addr = addr;
                e.prefix = 32;
                format_ipv4(addr, norm, sizeof(norm));
        } else {
                int r = parse_hostname(s, n, e.host, why);
                if (r < 0)
                        return r;
                e.kind = PJ_ALLOW_HOSTNAME;
                snprintf(norm, sizeof(norm), "%s", e.host);
        }

        if (norm_out) {
                if (norm_len <= strlen(norm))
                        return -ENOBUFS;
                memcpy(norm_out, norm, strlen(norm) + 1);
        }
        if (ret)
                *ret = e;
        return 0;
}

int pj_egress_add_allow(struct pj_egress *e, const char *s, struct err *why) {
        char norm[PJ_ALLOW_NORM_MAX];
        int r = pj_allow_entry_parse(s, NULL, norm, sizeof(norm), why);
        if (r < 0)
                return r;
        for (size_t i = 0; i < e->n_allow; i++)
                if (strcmp(e->allow[i], norm) == 0)
                        return 0;
        if (e->n_allow >= PJ_EGRESS_MAX_ALLOW)
                return -E2BIG;
        e->allow = xrealloc(e->allow, (e->n_allow + 1) * sizeof(char *));
        e->allow[e->n_allow++] = xstrdup(norm);
        return 1;
}
