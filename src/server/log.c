/*
 * log.c: sbxd's structured log: one "key=value" line per event on stderr,
 * filtered by --log-level.  Callers never pass secrets (tokens) in.
 * Lua failures of sbxd's calls into Lua are logged here with their
 * traceback (src/lua/pcall.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../lua/lsbx.h"
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

void sbx_srv_log_lua_error(lua_State *L, const char *where)
{
	char err[1536];
	size_t n = 0;

	/* The traceback when there is one (it starts with the message). */
	int tb = lsbx_pcall_traceback(L);
	const char *s = tb ? lua_tostring(L, -1) : NULL;
	if (!s) {
		lua_pushvalue(L, tb ? -2 : -1);
		s = lsbx_pcall_message(L, -1);
		tb = 1;
	}
	/* One line: newlines as " | ", quotes as '. */
	for (; *s && n + 4 < sizeof(err); s++) {
		if (*s == '\n') {
			memcpy(err + n, " | ", 3);
			n += 3;
		} else {
			err[n++] = *s == '"' ? '\'' : *s == '\t' ? ' ' : *s;
		}
	}
	err[n] = '\0';
	lua_pop(L, tb);
	sbx_srv_log(SRV_LOG_ERROR, "event=lua_error where=%s err=\"%s\"", where, err);
}

int sbx_srv_pcall(lua_State *L, int narg, int nres, const char *where)
{
	int status = lsbx_pcall(L, narg, nres, 0);

	if (status != 0) {
		sbx_srv_log_lua_error(L, where);
		lua_pop(L, 1);
	}
	return status;
}

/* log(level, text): a line of the Lua layer, with the real ts= and the
 * --log-level filter (level "error" | "warn" | "info" | "debug"). */
int sbx_srv_l_log(lua_State *L)
{
	const char *level = luaL_checkstring(L, 1);
	const char *text = luaL_checkstring(L, 2);
	int n;

	for (n = 0; n < 4; n++)
		if (strcmp(level, level_names[n]) == 0)
			break;
	if (n == 4)
		return luaL_error(L, "log: unknown level '%s'", level);
	sbx_srv_log(n, "%s", text);
	return 0;
}

uint64_t sbx_srv_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
