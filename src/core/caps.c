/*
 * caps.c: giving up every capability for good, in the workload child.
 *
 * Emptying the effective/permitted/inheritable sets is not enough on its
 * own: exec of a file with capabilities, exec as uid 0, or an ambient set
 * could hand them back.  So the bounding set is emptied (nothing can be
 * gained by exec any more), the ambient set cleared, and the securebits
 * locked so that uid 0 means nothing special and the lock cannot be lifted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/securebits.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/prctl.h>

#include "sbx.h"

/* Highest capability number the kernel ABI can ever have (64-bit sets). */
#define SBX_CAP_ABI_LAST 63

#define SBX_SECUREBITS                                                                           \
	(SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |                         \
	 SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | \
	 SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

/* Check that nothing is left; the drop is only trusted once it is seen. */
static int sbx_caps_verify(sbx_err *err)
{
	cap_t now = cap_get_proc(), none = cap_init();
	bool held = !now || !none || cap_compare(now, none) != 0;
	int c, sb;

	cap_free(now);
	cap_free(none);
	if (held)
		return sbx_err_set(
			err, SBX_E_EXECUTION, 0,
			"caps: the effective, permitted or inheritable set is not empty");
	/* The ambient set needs no look: the kernel keeps it a subset of
	 * permitted and inheritable, which are empty now. */
	for (c = 0; c <= SBX_CAP_ABI_LAST; c++) {
		int in_bound = (int)prctl(PR_CAPBSET_READ, c, 0, 0, 0);

		if (in_bound < 0)
			break; /* past the kernel's last capability */
		if (in_bound == 1)
			return sbx_err_set(err, SBX_E_EXECUTION, 0,
					   "caps: capability %d is still in the bounding set", c);
	}
	sb = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
	if (sb < 0 || (sb & SBX_SECUREBITS) != SBX_SECUREBITS)
		return sbx_err_set(err, SBX_E_EXECUTION, errno,
				   "caps: securebits are 0x%x, not locked as set", sb);
	return 0;
}

/*
 * Drop every capability and lock them out; see sbx.h.
 *
 * Called in the workload child after setresgid/setgroups/setresuid to the
 * sandbox user (1000): the process is then uid 1000 but still holds a full
 * set in its user namespace (it was never namespace-root, so the uid change
 * cleared nothing), and it needs CAP_SETPCAP to shrink the bounding set and
 * set the securebits, which is why this comes after the uid change rather
 * than before it (setresuid itself needs CAP_SETUID).  It works the same as
 * uid 0, in or out of a user namespace.  Returns 0, or -1 with err filled
 * (the caller must not exec then).  Allocates through libcap (cap_init),
 * so it is not async-signal-safe: call it from a single-threaded child.
 */
/* Lock the securebits (needs CAP_SETPCAP); a no-op when already locked. */
static int lock_securebits(sbx_err *err)
{
	int sb = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0), e;

	if (sb >= 0 && (sb & SBX_SECUREBITS) == SBX_SECUREBITS)
		return 0;
	if (sb >= 0 && prctl(PR_SET_SECUREBITS, (unsigned long)(sb | SBX_SECUREBITS), 0, 0, 0) == 0)
		return 0;
	e = errno;
	return sbx_err_set(err, SBX_E_EXECUTION, e, "caps: cannot lock the securebits: %s%s",
			   strerror(e),
			   e == EPERM ? " (CAP_SETPCAP is needed: drop capabilities before "
					"giving up CAP_SETPCAP, e.g. before an uid change "
					"that clears them)"
				      : "");
}

/* Empty the bounding set: every number the kernel knows (libcap's
 * CAP_LAST_CAP is what libcap was built with; ask the kernel, up to its
 * first EINVAL).  Each drop is a credential change, so skip what is gone. */
static int drop_bounding(sbx_err *err)
{
	for (int c = 0; c <= SBX_CAP_ABI_LAST; c++) {
		int in_bound = (int)prctl(PR_CAPBSET_READ, c, 0, 0, 0);

		if (in_bound < 0)
			break; /* numbers are dense: the first unknown ends them */
		if (in_bound == 0 || cap_drop_bound((cap_value_t)c) == 0)
			continue;
		return sbx_err_set(err, SBX_E_EXECUTION, errno,
				   "caps: cannot drop capability %d from the bounding set: %s", c,
				   strerror(errno));
	}
	return 0;
}

int sbx_caps_drop_bounding(sbx_err *err)
{
	if (lock_securebits(err) < 0 || drop_bounding(err) < 0)
		return -1;
	return 0;
}

int sbx_caps_drop_all(sbx_err *err)
{
	cap_t empty;
	int e;

	/* Securebits and bounding set first: they need CAP_SETPCAP, which the
	 * last step takes away.  A second call finds nothing left to drop. */
	if (sbx_caps_verify(NULL) == 0)
		return 0;
	if (sbx_caps_drop_bounding(err) < 0)
		return -1;
	/* Ambient: EINVAL only on kernels older than 4.3, which have none. */
	if (cap_reset_ambient() != 0 && errno != EINVAL) {
		e = errno;

		return sbx_err_set(err, SBX_E_EXECUTION, e,
				   "caps: cannot clear the ambient set: %s", strerror(e));
	}
	/* Effective, permitted, inheritable: all empty. */
	empty = cap_init();
	if (!empty)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "caps: cap_init: out of memory");
	if (cap_set_proc(empty) != 0) {
		e = errno;

		cap_free(empty);
		return sbx_err_set(err, SBX_E_EXECUTION, e,
				   "caps: cannot clear the capability sets: %s", strerror(e));
	}
	cap_free(empty);
	return sbx_caps_verify(err);
}
