/*
 * main.c: sbx-zygote, the program of the zygote template (zygote_setup.c).
 *
 * The host starts it once per process as "sbx-zygote template FD": it
 * serves the host's requests on the socket FD, cloning each session's
 * zygote, which sets itself up and becomes the zygote (zygote.c).  Its
 * argv, environment and memory are its own: nothing of the caller's
 * process reaches the session's runs.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

int main(int argc, char **argv)
{
	char *end;
	long sock = argc == 3 && !strcmp(argv[1], "template") ? strtol(argv[2], &end, 10) : -1;

	if (sock < 3 || *end)
		return 1;
	sbx_zygote_template_main((int)sock);
}
