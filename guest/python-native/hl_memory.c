/*
 * hyperlightd's native Python guest: an allocation that cannot fit in the guest's memory fails
 * at once, with ENOMEM (Python's MemoryError), instead of being granted and failing page by page.
 *
 * The guest's kernel (Unikraft, paging on demand) grants any anonymous mapping whatever its size,
 * and backs it as it is touched: `numpy.ones(400_000_000)` (3.2 GB) in a 1 GiB guest was granted,
 * then filled until the kernel ran out of pages and ended the program, seconds or minutes later
 * (minutes under emulation, past the request's time limit). Linux refuses such an allocation up
 * front (its heuristic overcommit refuses one larger than the memory there is); this does the
 * same here, against the memory free now: what the kernel has not handed out, and what the C
 * allocator holds free for reuse.
 *
 * Linked into the driver executable (with -rdynamic), so that its definitions take the place of
 * the C library's for every library in the process (ELF symbol interposition, which glibc
 * supports for replacing malloc): the malloc family forwards to glibc's own allocator
 * (__libc_malloc and its siblings), and mmap to the C library's mmap. Only allocations of
 * CHECKED_FROM bytes or more are checked, with one sysinfo() call (no VM exit: the kernel is in
 * the guest, and it counts the pages it has handed out), so that small allocations cost nothing
 * more.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <sys/types.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

/* Below this, an allocation is not checked: it fits unless the guest is already out of memory,
 * which the kernel reports by ending the program. From here on glibc's allocator maps fresh
 * pages for a request (its mmap threshold), which the check costs little beside. */
#define CHECKED_FROM ((size_t)128 << 10)

/* Whether `size` more bytes can be had now; sets errno to ENOMEM when not. What the allocator
 * holds free is counted only when the kernel's free memory is not enough, as mallinfo2() walks
 * the allocator's free lists. */
static int fits(size_t size)
{
	struct sysinfo si;
	uint64_t free_now;

	if (size < CHECKED_FROM || sysinfo(&si) != 0)
		return 1;
	free_now = (uint64_t)si.freeram * si.mem_unit;
	if ((uint64_t)size <= free_now || (uint64_t)size <= free_now + mallinfo2().fordblks)
		return 1;
	errno = ENOMEM;
	return 0;
}

void *malloc(size_t size)
{
	return fits(size) ? __libc_malloc(size) : NULL;
}

void *calloc(size_t count, size_t size)
{
	size_t total;

	if (__builtin_mul_overflow(count, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return fits(total) ? __libc_calloc(count, size) : NULL;
}

void *realloc(void *ptr, size_t size)
{
	size_t have = ptr == NULL ? 0 : malloc_usable_size(ptr);

	if (size > have && !fits(size - have))
		return NULL;
	return __libc_realloc(ptr, size);
}

void *memalign(size_t alignment, size_t size)
{
	return fits(size) ? __libc_memalign(alignment, size) : NULL;
}

void *aligned_alloc(size_t alignment, size_t size)
{
	return memalign(alignment, size);
}

int posix_memalign(void **out, size_t alignment, size_t size)
{
	void *p;

	if (alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0)
		return EINVAL;
	if (!fits(size))
		return ENOMEM;
	p = __libc_memalign(alignment, size);
	if (p == NULL)
		return ENOMEM;
	*out = p;
	return 0;
}

void *valloc(size_t size)
{
	return fits(size) ? __libc_valloc(size) : NULL;
}

void *pvalloc(size_t size)
{
	return fits(size) ? __libc_pvalloc(size) : NULL;
}

/* Anonymous mappings that will be written (Python's mmap.mmap(-1, n), allocators of their own)
 * are checked as allocations are; a reservation of address space (PROT_NONE, or MAP_NORESERVE,
 * which a runtime maps and commits piece by piece) is not, as Linux does not count it either. */
void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset)
{
	static void *(*next)(void *, size_t, int, int, int, off_t);

	if ((flags & MAP_ANONYMOUS) && prot != PROT_NONE && !(flags & MAP_NORESERVE) && !fits(length))
		return MAP_FAILED;
	if (next == NULL)
		next = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
	if (next == NULL) {
		errno = ENOSYS;
		return MAP_FAILED;
	}
	return next(addr, length, prot, flags, fd, offset);
}

void *mmap64(void *addr, size_t length, int prot, int flags, int fd, off_t offset)
{
	return mmap(addr, length, prot, flags, fd, offset);
}
