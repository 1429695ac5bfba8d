/*
 * backend.c: the backends this core provides, named once.  Each entry says
 * what kind of backend it is, what it offers (a network namespace, GPUs)
 * and points at the functions that differ: its availability check, whose
 * ids its sessions have (backend_ids.c), how the session's processes start
 * and stop, how a run gets its warm init and whether the session still
 * lives (backend_zygote.c and session.c's pool, backend_none.c,
 * backend_bubblewrap.c).  The workload's privilege drop is privdrop.c's
 * step list of the kind.  A new backend is one file and one entry here.
 */
#include <string.h>

#include "session_impl.h"

static const struct sbx_backend backends[] = {
	{
		.name = "userns",
		.own_root = true,
		.netns = true,
		.ids = sbx_ids_mapped,
		.start = sbx_zygote_backend_start,
		.take = sbx_pool_take,
		.alive = sbx_zygote_alive,
		.stop = sbx_zygote_stop,
	},
	{
		.name = "privileged",
		.privileged = true,
		.own_root = true,
		.netns = true,
		.gpus = true,
		.check = sbx_privileged_check,
		.ids = sbx_ids_privileged,
		.ids_own = sbx_ids_privileged_own,
		.start = sbx_zygote_backend_start,
		.take = sbx_pool_take,
		.alive = sbx_zygote_alive,
		.stop = sbx_zygote_stop,
	},
	{
		.name = "none",
		.none = true,
		.ids = sbx_ids_self,
		.start = sbx_none_backend_start,
		.take = sbx_none_take,
		.alive = sbx_none_alive,
		.stop = sbx_none_stop,
	},
	{
		.name = "bubblewrap",
		.none = true,
		.own_root = true,
		.check = sbx_bwrap_check,
		.ids = sbx_ids_mapped,
		.start = sbx_bwrap_backend_start,
		.take = sbx_none_take,
		.alive = sbx_none_alive,
		.stop = sbx_bwrap_stop,
	},
};

const struct sbx_backend *sbx_backend_find(const char *name)
{
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		if (!strcmp(backends[i].name, name))
			return &backends[i];
	return NULL;
}
