/*
 * backend.c: the backends this core provides, named once.  Each entry says
 * what kind of backend it is and points at the file that holds what
 * differs: its availability check and how the session's processes start
 * (backend_zygote.c, backend_none.c, backend_bubblewrap.c).  How a run
 * starts follows from the kind (the zygote's warm inits, or inits the host
 * forks: backend_none.c); the workload's privilege drop is privdrop.c's
 * step list of the kind.
 */
#include <string.h>

#include "session_impl.h"

static const struct sbx_backend backends[] = {
	{"userns", false, false, false, NULL, sbx_zygote_backend_start},
	{"privileged", true, false, false, sbx_privileged_check, sbx_zygote_backend_start},
	{"none", false, true, false, NULL, sbx_none_backend_start},
	{"bubblewrap", false, true, true, sbx_bwrap_check, sbx_bwrap_backend_start},
};

const struct sbx_backend *sbx_backend_find(const char *name)
{
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		if (!strcmp(backends[i].name, name))
			return &backends[i];
	return NULL;
}
