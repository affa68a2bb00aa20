/* privsep.h — shared by privsep.c (the agent's side), privsep-child.c (the child's side, the
 * message checks), privsep-msg.c (what both build on) and privsep-docker.c (the docker
 * child's work). Private to nodeagent/; the contract
 * of privilege separation itself is in nodeagent.h, under "privsep.c". */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleanup.h"
#include "nodeagent.h"

/* privsep-msg.c: fills ret with the refusal; returns -EBADMSG. */
int privsep_refuse(struct ps_result *ret, const char *fmt, ...) _printf_(2, 3);
/* n bytes at p are all zero. */
bool privsep_zero(const void *p, size_t n);
/* A sandbox id field: exactly 24 lowercase hex and a NUL, nothing else. */
bool privsep_id_field_valid(const char id[EGRESS_ID_LEN + 1]);

/* privsep-msg.c: "egress", "docker", "relay", "lookup". */
const char *privsep_child_name(enum ps_child kind);
/* An empty result of type for request seq (header filled). */
void privsep_result_init(struct ps_result *ret, uint16_t type, uint32_t seq);
/* One message on a SOCK_SEQPACKET socket, whole (EINTR retried): 0 or -errno (-EMSGSIZE: cut). */
int privsep_send_all(int fd, const void *buf, size_t len);

/* privsep-child.c: the child's life after fork() in privsep_spawn: drops privilege, answers
 * READY on fd, then each request, until EOF or SIGTERM. */
_noreturn_ void privsep_child_main(enum ps_child kind, int fd, const struct agent_config *cfg);

/* privsep-docker.c, in the docker and lookup children */
/* Opens cfg's Docker socket for the steps to come (the lookup child's PS_DOCKER_PID); 0, or
 * -errno with the reason in msg. */
int privsep_lookup_init(const struct agent_config *cfg, char *msg, size_t msglen);
/* The same for the docker child's snapshot steps; on success msg says "network=<mode>". */
int privsep_docker_init(const struct agent_config *cfg, char *msg, size_t msglen);
/* t is one of the PS_DOCKER_* snapshot steps (not PS_DOCKER_PID, the lookup child's). */
bool privsep_docker_type(uint16_t t);
/* Checks a ps_docker's fields for type (ids, container, padding); 0 or privsep_refuse's -EBADMSG. */
int privsep_docker_check(uint16_t type, const struct ps_docker *m, struct ps_result *ret);
/* Does the checked step; fills ret->r and ret->msg. Without privsep_docker_init
 * (unit tests) every step answers -ENOTCONN. */
void privsep_docker_do(uint16_t type, const struct ps_docker *m, struct ps_result *ret);
