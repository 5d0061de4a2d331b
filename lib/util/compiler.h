/*
 * Small compiler helpers shared by the library's files.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__COMPILER_H
#define MRMGR__COMPILER_H

#include <stddef.h>

/*
 * Single-copy-atomic loads and stores for data that lock-free readers
 * look at while a writer (holding the writer lock) changes it. They compile
 * to plain moves on x86 but keep the compiler from tearing or fusing the
 * access, and tell ThreadSanitizer the race is intended.
 */
#define MRMGR__READ_ONCE(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define MRMGR__WRITE_ONCE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

#define mrmgr__likely(x) __builtin_expect(!!(x), 1)
#define mrmgr__unlikely(x) __builtin_expect(!!(x), 0)

#define mrmgr__container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#define MRMGR__CACHELINE 64

#define MRMGR__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif /* MRMGR__COMPILER_H */
