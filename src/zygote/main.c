/*
 * main.c: sbx-zygote, the program a session's zygote execs (zygote_exec.c).
 *
 * It starts inside the session's namespaces and root, with the settings the
 * caller's fork packed into the memfd named by argv[1]: it reads them, tells
 * the host the session is ready, and becomes the zygote (zygote.c).  Its
 * argv, environment and memory are its own: nothing of the caller's process
 * reaches the session's runs.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

int main(int argc, char **argv)
{
	struct sbx_zygote_cfg cfg;
	struct sbx_proto_ready ready;
	int listener = -1;

	memset(&cfg, 0, sizeof(cfg));
	if (argc != 2 || sbx_zygote_unpack(argv[1], &cfg, &listener) < 0)
		return 1;
	memset(&ready, 0, sizeof(ready));
	ready.magic = SBX_PROTO_MAGIC;
	ready.kind = SBX_E_NONE;
	if (sbx_zygote_send_ready(cfg.ctl_fd, &ready, listener, cfg.netns_fd[SBX_NET_OPEN]) < 0)
		_exit(1);
	/* The host serves the listener; ours would only keep it open. */
	if (listener >= 0)
		close(listener);
	sbx_zygote_main(&cfg);
}
