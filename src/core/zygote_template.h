/*
 * zygote_template.h: the host <-> zygote template protocol (host side:
 * zygote_template.c; the template's: zygote_setup.c).  The host sends one
 * request per zygote on a SOCK_SEQPACKET pair, with the packed settings
 * (zygote_exec.c) as its first fd and the fds they name after it; the
 * template answers with the new zygote's pid or why there is none.
 */
#ifndef SBX_ZYGOTE_TEMPLATE_H
#define SBX_ZYGOTE_TEMPLATE_H

#include <stdint.h>
#include <sys/types.h>

#define SBX_TPL_MAGIC 0x7a747073u /* "sptz" */
/* The kernel's SCM_MAX_FD bounds the fds of one message. */
#define SBX_TPL_MAX_FDS SBX_PROTO_MAX_FDS

struct sbx_tpl_req {
	uint32_t magic;
	uint32_t nfds;	/* the fds sent along: fewer arrive at the template's fd limit */
	uint64_t flags; /* the zygote's namespaces (CLONE_NEW*) */
};

struct sbx_tpl_reply {
	uint32_t magic;
	int32_t err_no; /* the clone's errno when pid is 0 */
	int32_t pid;
	int32_t fds_short; /* not all of the request's fds arrived: no clone (err_no) */
};

#endif
