/*
 * probe_report.h: how the probes of tests/security/helpers print what an
 * attempt returned, one line each, parsed by sec_helpers.lua's results():
 *
 *   RESULT <name> OK        the call succeeded (did not return -1)
 *   RESULT <name> <ENAME>   it failed with that errno ("E<number>" when
 *                           the C library has no name for it)
 *
 * Each line is flushed at once, so a later crash (or a kill by seccomp)
 * cannot swallow what was already tried.  Include it once per probe.
 */
#ifndef SBX_PROBE_REPORT_H
#define SBX_PROBE_REPORT_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

static inline const char *errno_name(int e)
{
	static char buf[16];
	const char *n = strerrorname_np(e);

	if (n)
		return n;
	snprintf(buf, sizeof(buf), "E%d", e);
	return buf;
}

static inline void report(const char *name, long rc, int e)
{
	printf("RESULT %s %s\n", name, rc == -1 ? errno_name(e) : "OK");
	fflush(stdout);
}

/* Make one call with errno cleared and report it. */
#define TRY(name, call)                   \
	do {                              \
		long rc_;                 \
		errno = 0;                \
		rc_ = (long)(call);       \
		report(name, rc_, errno); \
	} while (0)

#endif
