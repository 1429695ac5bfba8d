/*
 * metrics.c: counters and the run latency histogram, rendered as
 * Prometheus text for GET /metrics.  Session counts and policy denials
 * come from the Lua layer (its stats() function).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "front.h"
#include "sbx.h"

sbx_srv_metrics sbx_srv_m;

static const double buckets[12] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
				   0.1,	  0.25,	  0.5,	 1,    5,     30};

void sbx_srv_metrics_run(const char *outcome, double seconds)
{
	if (!strcmp(outcome, "exit"))
		sbx_srv_m.runs_exit++;
	else if (!strcmp(outcome, "signal"))
		sbx_srv_m.runs_signal++;
	else if (!strcmp(outcome, "timeout"))
		sbx_srv_m.runs_timeout++;
	else if (!strcmp(outcome, "killed"))
		sbx_srv_m.runs_killed++;
	else if (!strcmp(outcome, "disconnected"))
		sbx_srv_m.runs_disconnected++;
	else if (!strcmp(outcome, "oom"))
		sbx_srv_m.runs_oom++;
	else if (!strcmp(outcome, "session_expired"))
		sbx_srv_m.runs_expired++;
	else
		sbx_srv_m.runs_error++;
	for (int i = 0; i < 12; i++)
		if (seconds <= buckets[i])
			sbx_srv_m.latency_buckets[i]++;
	sbx_srv_m.latency_sum += seconds;
	sbx_srv_m.latency_count++;
}

/* The allowlist proxy's figures, as sbx.server's stats() names them. */
static const struct {
	const char *field, *metric, *type, *help;
} proxy_metrics[] = {
	{"proxy_accepted", "sbxd_proxy_connections_total", "counter",
	 "Connections to sessions' allowlist proxies."},
	{"proxy_allowed", "sbxd_proxy_allowed_total", "counter", "Proxy requests let through."},
	{"proxy_refused", "sbxd_proxy_refused_total", "counter",
	 "Proxy requests refused by the policy (deny-list, allow-list, private address, hook)."},
	{"proxy_failed", "sbxd_proxy_failed_total", "counter",
	 "Proxy requests that failed: bad request, unreachable target, timeout."},
	{"proxy_active", "sbxd_proxy_connections_active", "gauge", "Proxy connections open now."},
	{"proxy_bytes_up", "sbxd_proxy_bytes_up_total", "counter", "Bytes from sandboxes out."},
	{"proxy_bytes_down", "sbxd_proxy_bytes_down_total", "counter", "Bytes to sandboxes."},
	{"proxy_intercepted", "sbxd_proxy_intercepted_total", "counter",
	 "Proxy connections to a secret's host, TLS terminated to substitute it."},
	{"proxy_lua_calls", "sbxd_proxy_lua_calls_total", "counter",
	 "Calls from the proxy into Lua (policy verdicts and log lines, in batches)."},
};
#define N_PROXY_METRICS (sizeof(proxy_metrics) / sizeof(proxy_metrics[0]))

/* Lua stats(): { sessions_open =, policy_denials =, proxy_* = }; 0s when it fails. */
static void lua_stats(sbx_srv *S, double *open, double *denials, double *proxy)
{
	lua_State *L = S->L;

	*open = *denials = 0;
	for (size_t i = 0; i < N_PROXY_METRICS; i++)
		proxy[i] = 0;
	lua_rawgeti(L, LUA_REGISTRYINDEX, S->stats_ref);
	if (sbx_srv_pcall(L, 0, 1, "stats") != 0)
		return;
	if (lua_istable(L, -1)) {
		lua_getfield(L, -1, "sessions_open");
		*open = lua_tonumber(L, -1);
		lua_getfield(L, -2, "policy_denials");
		*denials = lua_tonumber(L, -1);
		lua_pop(L, 2);
		for (size_t i = 0; i < N_PROXY_METRICS; i++) {
			lua_getfield(L, -1, proxy_metrics[i].field);
			proxy[i] = lua_tonumber(L, -1);
			lua_pop(L, 1);
		}
	}
	lua_pop(L, 1);
}

/* The spare sessions (src/core/spare.c): kept opened ahead, in no
 * tenant's count; these say how many there are and what became of them. */
static void spare_metrics(FILE *f)
{
	sbx_spares_stats st;
	sbx_spares_get_stats(&st);
	fprintf(f, "# HELP sbxd_spare_sessions_ready Spare sessions opened ahead, ready now.\n"
		   "# TYPE sbxd_spare_sessions_ready gauge\n");
	fprintf(f, "sbxd_spare_sessions_ready %u\n", st.ready);
	fprintf(f, "# HELP sbxd_spare_sessions_total Spare sessions, by what became of them.\n"
		   "# TYPE sbxd_spare_sessions_total counter\n");
	fprintf(f, "sbxd_spare_sessions_total{event=\"made\"} %lu\n", (unsigned long)st.made);
	fprintf(f, "sbxd_spare_sessions_total{event=\"taken\"} %lu\n", (unsigned long)st.taken);
	fprintf(f, "sbxd_spare_sessions_total{event=\"missed\"} %lu\n", (unsigned long)st.missed);
	fprintf(f, "sbxd_spare_sessions_total{event=\"dead\"} %lu\n", (unsigned long)st.dead);
	fprintf(f, "sbxd_spare_sessions_total{event=\"failed\"} %lu\n", (unsigned long)st.failed);
	fprintf(f, "sbxd_spare_sessions_total{event=\"flushed\"} %lu\n", (unsigned long)st.flushed);
}

char *sbx_srv_metrics_render(sbx_srv *S, size_t *len)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&buf, &size);
	double open, denials, proxy[N_PROXY_METRICS];

	if (!f)
		return NULL;
	lua_stats(S, &open, &denials, proxy);
	fprintf(f,
		"# HELP sbxd_sessions_open Sessions open now.\n# TYPE sbxd_sessions_open gauge\n");
	fprintf(f, "sbxd_sessions_open %.0f\n", open);
	spare_metrics(f);
	fprintf(f, "# HELP sbxd_runs_active Runs streaming now.\n# TYPE sbxd_runs_active gauge\n");
	fprintf(f, "sbxd_runs_active %zu\n", S->active_runs);
	fprintf(f,
		"# HELP sbxd_runs_started_total Runs started.\n# TYPE sbxd_runs_started_total counter\n");
	fprintf(f, "sbxd_runs_started_total %lu\n", (unsigned long)sbx_srv_m.runs_started);
	fprintf(f, "# HELP sbxd_runs_finished_total Runs finished, by outcome.\n"
		   "# TYPE sbxd_runs_finished_total counter\n");
	fprintf(f, "sbxd_runs_finished_total{outcome=\"exit\"} %lu\n",
		(unsigned long)sbx_srv_m.runs_exit);
	fprintf(f, "sbxd_runs_finished_total{outcome=\"signal\"} %lu\n",
		(unsigned long)sbx_srv_m.runs_signal);
	fprintf(f, "sbxd_runs_finished_total{outcome=\"timeout\"} %lu\n",
		(unsigned long)sbx_srv_m.runs_timeout);
	fprintf(f, "sbxd_runs_finished_total{outcome=\"killed\"} %lu\n",
		(unsigned long)sbx_srv_m.runs_killed);
	fprintf(f, "sbxd_runs_finished_total{outcome=\"oom\"} %lu\n",
		(unsigned long)sbx_srv_m.runs_oom);
	fprintf(f, "sbxd_runs_finished_total{outcome=\"error\"} %lu\n",
		(unsigned long)sbx_srv_m.runs_error);
	fprintf(f, "sbxd_runs_finished_total{outcome=\"disconnected\"} %lu\n",
		(unsigned long)sbx_srv_m.runs_disconnected);
	fprintf(f, "sbxd_runs_finished_total{outcome=\"session_expired\"} %lu\n",
		(unsigned long)sbx_srv_m.runs_expired);
	fprintf(f, "# HELP sbxd_streamed_bytes_total Bytes of stdout/stderr streamed.\n"
		   "# TYPE sbxd_streamed_bytes_total counter\n");
	fprintf(f, "sbxd_streamed_bytes_total %lu\n", (unsigned long)sbx_srv_m.bytes_streamed);
	fprintf(f, "# HELP sbxd_run_duration_seconds Run latency, request to exit.\n"
		   "# TYPE sbxd_run_duration_seconds histogram\n");
	for (int i = 0; i < 12; i++)
		fprintf(f, "sbxd_run_duration_seconds_bucket{le=\"%g\"} %lu\n", buckets[i],
			(unsigned long)sbx_srv_m.latency_buckets[i]);
	fprintf(f, "sbxd_run_duration_seconds_bucket{le=\"+Inf\"} %lu\n",
		(unsigned long)sbx_srv_m.latency_count);
	fprintf(f, "sbxd_run_duration_seconds_sum %.6f\n", sbx_srv_m.latency_sum);
	fprintf(f, "sbxd_run_duration_seconds_count %lu\n", (unsigned long)sbx_srv_m.latency_count);
	fprintf(f, "# HELP sbxd_policy_denials_total Requests the policy refused.\n"
		   "# TYPE sbxd_policy_denials_total counter\n");
	fprintf(f, "sbxd_policy_denials_total %.0f\n", denials);
	fprintf(f, "# HELP sbxd_auth_failures_total Requests with a missing or wrong token.\n"
		   "# TYPE sbxd_auth_failures_total counter\n");
	uint64_t front_answered, front_401;
	sbx_front_counts(&front_answered, &front_401);
	fprintf(f, "sbxd_auth_failures_total %lu\n",
		(unsigned long)(sbx_srv_m.auth_failures + front_401));
	fprintf(f, "# HELP sbxd_requests_total Requests.\n# TYPE sbxd_requests_total counter\n");
	fprintf(f, "sbxd_requests_total %lu\n",
		(unsigned long)(sbx_srv_m.requests + front_answered));
	fprintf(f,
		"# HELP sbxd_streams_reset_before_start_total Run streams reset before their run started.\n"
		"# TYPE sbxd_streams_reset_before_start_total counter\n");
	fprintf(f, "sbxd_streams_reset_before_start_total %lu\n",
		(unsigned long)sbx_srv_m.resets_before_start);
	for (size_t i = 0; i < N_PROXY_METRICS; i++)
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %.0f\n", proxy_metrics[i].metric,
			proxy_metrics[i].help, proxy_metrics[i].metric, proxy_metrics[i].type,
			proxy_metrics[i].metric, proxy[i]);
	sbx_front_metrics(f);
	fclose(f);
	*len = size;
	return buf;
}
