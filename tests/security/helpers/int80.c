/*
 * int80.c: make a 32-bit (i386 ABI) syscall from a 64-bit process with
 * `int $0x80`.  The sandbox's filter only knows the native ABI and kills
 * any process using another, so this program must die of SIGSYS before it
 * can print anything.  If it survives it prints
 * "RESULT int80 survived <return value>" and exits 0.
 * On other architectures it prints "RESULT int80 unsupported".
 */
#include <stdio.h>

int main(void)
{
#if defined(__x86_64__)
	long ret;

	/* i386 getpid is 20; the 64-bit int $0x80 entry clobbers r8-r11. */
	__asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
	printf("RESULT int80 survived %ld\n", ret);
#else
	printf("RESULT int80 unsupported\n");
#endif
	return 0;
}
