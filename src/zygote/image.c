/*
 * image.c: the sbx-zygote program (src/zygote/main.c), embedded in libsbx,
 * and the sealed memfd each host process execs it from.
 *
 * Embedding means nothing to find or install: the build tree, `make
 * install` and the rockspec's module all carry the program inside libsbx,
 * and an fd opened before pivot_root execs anywhere.  The bytes are the
 * executable the same build linked (SBX_ZYGOTE_IMAGE, an absolute path).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif

__asm__(".section .rodata\n"
	".balign 64\n"
	".globl sbx_zygote_image_start\n"
	".hidden sbx_zygote_image_start\n"
	"sbx_zygote_image_start:\n"
	".incbin \"" SBX_ZYGOTE_IMAGE "\"\n"
	".globl sbx_zygote_image_end\n"
	".hidden sbx_zygote_image_end\n"
	"sbx_zygote_image_end:\n"
	".previous\n");
extern const unsigned char sbx_zygote_image_start[], sbx_zygote_image_end[];

static int image_fd = -1;

/* A sealed memfd holding the image: nobody can change what zygotes exec. */
static int make_image(sbx_err *err)
{
	size_t len = (size_t)(sbx_zygote_image_end - sbx_zygote_image_start);
	/* MFD_EXEC: a kernel with vm.memfd_noexec=1 makes memfds noexec
	 * unless asked; one older than 6.3 does not know the flag. */
	int fd = (int)syscall(SYS_memfd_create, "sbx-zygote",
			      MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
	if (fd < 0 && errno == EINVAL)
		fd = (int)syscall(SYS_memfd_create, "sbx-zygote", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "memfd for sbx-zygote: %s",
				   strerror(errno));
	size_t off = 0;
	while (off < len) {
		ssize_t n = write(fd, sbx_zygote_image_start + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;
			close(fd);
			return sbx_err_set(err, SBX_E_EXECUTION, e, "write sbx-zygote: %s",
					   strerror(e));
		}
		off += (size_t)n;
	}
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0) {
		int e = errno;
		close(fd);
		return sbx_err_set(err, SBX_E_EXECUTION, e, "seal sbx-zygote: %s", strerror(e));
	}
	return fd;
}

int sbx_zygote_image_fd(sbx_err *err)
{
	int fd = __atomic_load_n(&image_fd, __ATOMIC_ACQUIRE);
	/* Still ours? (A program may close every fd it did not open.) */
	if (fd >= 0 &&
	    fcntl(fd, F_GET_SEALS) == (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE))
		return fd;
	int mine = make_image(err);
	if (mine < 0)
		return -1;
	/* Two threads opening the first sessions at once: one image wins. */
	if (__atomic_compare_exchange_n(&image_fd, &fd, mine, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		return mine;
	close(mine);
	return fd;
}
