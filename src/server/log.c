/*
 * log.c: sbxd's structured log: one "key=value" line per event on stderr,
 * filtered by --log-level.  Callers never pass secrets (tokens) in.
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "server.h"

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void sbx_srv_log(int level, const char *fmt, ...)
{
	char line[2048], ts[32];
	struct timespec now;
	struct tm tm;
	va_list ap;
	int n;

	if (sbx_srv_g && level > sbx_srv_g->log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	n = snprintf(line, sizeof(line), "ts=%s.%03ldZ level=%s ", ts, now.tv_nsec / 1000000,
		     level_names[level < 0   ? 0
				 : level > 3 ? 3
					     : level]);
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}

uint64_t sbx_srv_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
