/*
 * error.c: filling sbx_err, the one error type of libsbx.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "sbx.h"

int sbx_err_set(sbx_err *err, sbx_err_kind kind, int sys_errno, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return -1;
	err->kind = kind;
	err->sys_errno = sys_errno;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return -1;
}

const char *sbx_err_kind_name(sbx_err_kind kind)
{
	switch (kind) {
	case SBX_E_NONE:
		return "None";
	case SBX_E_INVALID_ARGUMENT:
		return "InvalidArgument";
	case SBX_E_BACKEND_UNAVAILABLE:
		return "BackendUnavailable";
	case SBX_E_EXECUTION:
		return "SandboxExecutionError";
	case SBX_E_SESSION_CLOSED:
		return "SessionClosed";
	case SBX_E_POLICY_DENIED:
		return "PolicyDenied";
	}
	return "SandboxExecutionError";
}
