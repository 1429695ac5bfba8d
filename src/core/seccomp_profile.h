/*
 * seccomp_profile.h: what the filter lets a workload call, by name.
 *
 * Data only, included by seccomp.c; the numbers come from the per-arch
 * tables (seccomp_<arch>.h).  A syscall is in exactly one of these lists or
 * in none: a syscall in none (obsolete, unimplemented, or new and not yet
 * reviewed) fails with ENOSYS, the filter's default, as on an older
 * kernel.  References for what real programs need: Docker's default
 * profile (moby profiles/seccomp) and Chromium's baseline policy.
 * A policy may narrow this (seccomp.deny) and may widen it only by the
 * names in sbx_sc_widen (seccomp.allow).
 */
/* clang-format off */

/* Allowed whatever the arguments: the general-purpose floor. */
static const char *const sbx_sc_allow[] = {
	/* files and descriptors */
	"read", "write", "open", "close", "stat", "fstat", "lstat", "poll", "lseek",
	"pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2",
	"pwritev2", "access", "faccessat", "faccessat2", "pipe", "pipe2", "select",
	"pselect6", "ppoll", "dup", "dup2", "dup3", "fcntl", "flock", "fsync",
	"fdatasync", "sync", "syncfs", "sync_file_range", "truncate", "ftruncate",
	"fallocate", "fadvise64", "readahead", "getdents", "getdents64", "getcwd",
	"chdir", "fchdir", "rename", "renameat", "renameat2", "mkdir", "mkdirat",
	"rmdir", "creat", "link", "linkat", "unlink", "unlinkat", "symlink",
	"symlinkat", "readlink", "readlinkat", "chmod", "fchmod", "fchmodat",
	"fchmodat2", "chown", "fchown", "lchown", "fchownat", "umask", "utime",
	"utimes", "futimesat", "utimensat", "statfs", "fstatfs", "openat",
	"openat2", "newfstatat", "statx", "close_range", "sendfile", "splice",
	"tee", "vmsplice", "copy_file_range", "cachestat",
	"setxattr", "lsetxattr", "fsetxattr", "getxattr", "lgetxattr", "fgetxattr",
	"listxattr", "llistxattr", "flistxattr", "removexattr", "lremovexattr",
	"fremovexattr", "setxattrat", "getxattrat", "listxattrat", "removexattrat",
	"file_getattr", "file_setattr",
	"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait",
	"epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4",
	"timerfd_create", "timerfd_settime", "timerfd_gettime", "memfd_create",
	/* POSIX AIO (io_uring is in sbx_sc_widen) */
	"io_setup", "io_destroy", "io_getevents", "io_submit", "io_cancel",
	"io_pgetevents",
	/* memory */
	"mmap", "mprotect", "munmap", "brk", "mremap", "msync", "mincore",
	"madvise", "remap_file_pages", "mlock", "mlock2", "munlock", "mlockall",
	"munlockall", "pkey_mprotect", "pkey_alloc", "pkey_free", "membarrier",
	"map_shadow_stack",
	/* System V and POSIX IPC: the run's own IPC namespace */
	"shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl",
	"semtimedop", "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open",
	"mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
	"mq_getsetattr",
	/* sockets (socket and socketpair are in sbx_sc_args) */
	"connect", "accept", "accept4", "sendto", "recvfrom", "sendmsg",
	"recvmsg", "sendmmsg", "recvmmsg", "shutdown", "bind", "listen",
	"getsockname", "getpeername", "setsockopt", "getsockopt",
	/* processes, threads, signals */
	"fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4",
	"waitid", "kill", "tkill", "tgkill", "rt_sigaction", "rt_sigprocmask",
	"rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo",
	"rt_tgsigqueueinfo", "rt_sigsuspend", "sigaltstack", "pause",
	"restart_syscall", "pidfd_open", "pidfd_send_signal", "set_tid_address",
	"set_robust_list", "get_robust_list", "futex", "futex_waitv",
	"futex_wake", "futex_wait", "futex_requeue", "rseq", "arch_prctl",
	"prctl", "seccomp", "landlock_create_ruleset", "landlock_add_rule",
	"landlock_restrict_self", "sched_yield", "sched_setparam",
	"sched_getparam", "sched_setscheduler", "sched_getscheduler",
	"sched_get_priority_max", "sched_get_priority_min",
	"sched_rr_get_interval", "sched_setaffinity", "sched_getaffinity",
	"sched_setattr", "sched_getattr", "getpriority", "setpriority",
	"ioprio_set", "ioprio_get", "getrlimit", "setrlimit", "getrusage",
	/* ids and credentials (the user namespace bounds them) */
	"getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid",
	"setuid", "setgid", "setreuid", "setregid", "setresuid", "getresuid",
	"setresgid", "getresgid", "setfsuid", "setfsgid", "getgroups",
	"setgroups", "setpgid", "getpgid", "getpgrp", "setsid", "getsid",
	"capget", "capset",
	/* time and system information */
	"nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres",
	"gettimeofday", "time", "times", "getitimer", "setitimer", "alarm",
	"timer_create", "timer_settime", "timer_gettime", "timer_getoverrun",
	"timer_delete", "uname", "sysinfo", "getcpu", "getrandom",
	NULL,
};

/* Allowed for some arguments only; seccomp.c holds each one's BPF. */
enum sbx_sc_args_id {
	SBX_SC_CLONE, SBX_SC_IOCTL, SBX_SC_MKNOD, SBX_SC_MKNODAT,
	SBX_SC_PERSONALITY, SBX_SC_SOCKET, SBX_SC_SOCKETPAIR, SBX_SC_PRLIMIT64,
	/* Only in sessions with an idmapped bind (sbx_seccomp_compile_setid). */
	SBX_SC_CHMOD, SBX_SC_FCHMODAT, SBX_SC_OPEN, SBX_SC_OPENAT,
	SBX_SC_MKNOD_NOSETID, SBX_SC_MKNODAT_NOSETID, SBX_SC_NOSYS,
};
/* With an idmapped bind, what the sandbox writes there is the dir owner's on
 * the host (root's, say): it must never make a setuid/setgid program of
 * theirs.  Writing a file clears those bits (the sandbox has no
 * CAP_FSETID), so the ways are a chmod and the mode a file is created with
 * (open/openat/creat with O_CREAT or O_TMPFILE, mknod of a regular file):
 * refused with these bits.  openat2's mode is behind a pointer the filter
 * cannot read: ENOSYS, as on a kernel before 5.6 (callers fall back to
 * openat). */
static const struct {
	const char *name;
	enum sbx_sc_args_id id;
} sbx_sc_setid[] = {
	{ "chmod", SBX_SC_CHMOD }, { "fchmod", SBX_SC_CHMOD },
	{ "fchmodat", SBX_SC_FCHMODAT }, { "fchmodat2", SBX_SC_FCHMODAT },
	{ "creat", SBX_SC_CHMOD }, { "open", SBX_SC_OPEN }, { "openat", SBX_SC_OPENAT },
	{ "mknod", SBX_SC_MKNOD_NOSETID }, { "mknodat", SBX_SC_MKNODAT_NOSETID },
	{ "openat2", SBX_SC_NOSYS },
};
static const struct {
	const char *name;
	enum sbx_sc_args_id id;
	const char *rule; /* what is refused, for --check-policy */
} sbx_sc_args[] = {
	{ "clone", SBX_SC_CLONE, "any CLONE_NEW* namespace flag -> EPERM" },
	{ "ioctl", SBX_SC_IOCTL, "TIOCSTI, TIOCLINUX (low 32 bits of the request) -> EPERM" },
	{ "mknod", SBX_SC_MKNOD, "character or block devices -> EPERM" },
	{ "mknodat", SBX_SC_MKNODAT, "character or block devices -> EPERM" },
	{ "personality", SBX_SC_PERSONALITY, "anything but PER_LINUX (0) and the query 0xffffffff -> EPERM" },
	{ "socket", SBX_SC_SOCKET, "families other than AF_UNIX, AF_INET, AF_INET6, AF_NETLINK -> EAFNOSUPPORT; AF_NETLINK protocols other than NETLINK_ROUTE -> EPROTONOSUPPORT" },
	{ "socketpair", SBX_SC_SOCKETPAIR, "families other than AF_UNIX -> EAFNOSUPPORT" },
	{ "prlimit64", SBX_SC_PRLIMIT64, "a pid other than 0 (the caller) -> EPERM" },
};

/* Refused, with the errno the workload sees. */
static const struct {
	const char *name;
	int err;
} sbx_sc_refuse[] = {
	/* keyrings: not namespaced */
	{ "add_key", EPERM }, { "request_key", EPERM }, { "keyctl", EPERM },
	/* kernel programmability and introspection */
	{ "bpf", EPERM }, { "perf_event_open", EPERM }, { "userfaultfd", EPERM },
	{ "fanotify_init", EPERM }, { "lookup_dcookie", EPERM },
	/* kernel modules and kexec */
	{ "init_module", EPERM }, { "finit_module", EPERM }, { "delete_module", EPERM },
	{ "create_module", EPERM }, { "get_kernel_syms", EPERM }, { "query_module", EPERM },
	{ "kexec_load", EPERM }, { "kexec_file_load", EPERM },
	/* mounts: the sandbox's tree is fixed by the time it runs.  The
	 * mount-listing calls new in 6.8+ answer ENOSYS, so that libmount and
	 * friends fall back to /proc/self/mountinfo as on an older kernel. */
	{ "mount", EPERM }, { "umount2", EPERM }, { "pivot_root", EPERM }, { "chroot", EPERM },
	{ "fsopen", EPERM }, { "fsconfig", EPERM }, { "fsmount", EPERM }, { "fspick", EPERM },
	{ "move_mount", EPERM }, { "open_tree", EPERM }, { "mount_setattr", EPERM },
	{ "statmount", ENOSYS }, { "listmount", ENOSYS }, { "open_tree_attr", ENOSYS },
	/* machine-wide state */
	{ "swapon", EPERM }, { "swapoff", EPERM }, { "acct", EPERM }, { "syslog", EPERM },
	{ "reboot", EPERM }, { "settimeofday", EPERM }, { "clock_settime", EPERM },
	{ "clock_adjtime", EPERM }, { "adjtimex", EPERM }, { "sethostname", EPERM },
	{ "setdomainname", EPERM }, { "iopl", EPERM }, { "ioperm", EPERM },
	{ "modify_ldt", EPERM }, { "quotactl", EPERM }, { "quotactl_fd", EPERM },
	{ "nfsservctl", EPERM }, { "vhangup", EPERM }, { "uselib", EPERM }, { "ustat", EPERM },
	{ "sysfs", EPERM }, { "_sysctl", EPERM },
	/* other processes, and file handles that bypass paths */
	{ "ptrace", EPERM }, { "process_vm_readv", EPERM }, { "process_vm_writev", EPERM },
	{ "kcmp", EPERM }, { "pidfd_getfd", EPERM }, { "open_by_handle_at", EPERM },
	{ "name_to_handle_at", EPERM },
	/* namespaces: no new ones, no joining others */
	{ "setns", EPERM }, { "unshare", EPERM },
	/* clone3 passes its flags in a struct BPF cannot read; ENOSYS makes
	 * glibc (2.34+) fall back to clone, whose flags are checked. */
	{ "clone3", ENOSYS },
	/* NUMA placement: Docker refuses it; a sandbox has no use for it */
	{ "get_mempolicy", EPERM }, { "set_mempolicy", EPERM },
	{ "set_mempolicy_home_node", EPERM }, { "mbind", EPERM }, { "migrate_pages", EPERM },
	{ "move_pages", EPERM },
};

/* What sbx-init calls between the runs it serves although workloads may
 * not: the mount calls of its scratch reset (rootfs.c).  Its init stage
 * allows them; each workload's run stage refuses them (sbx.h). */
static const char *const sbx_sc_init_needs[] = {
	"mount", "umount2", "open_tree", "move_mount",
};

/* Refused by default, but a policy's seccomp.allow may allow them. */
static const struct {
	const char *name;
	int err;
} sbx_sc_widen[] = {
	/* io_uring runs its operations in the kernel where this filter never
	 * sees them (Docker refuses it too). */
	{ "io_uring_setup", EPERM }, { "io_uring_enter", EPERM }, { "io_uring_register", EPERM },
};
/* clang-format on */
