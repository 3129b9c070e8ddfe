/* The stub vendor provider libraries of the ferroce verbs shim (libmlx5.so.1, libefa.so.1,
 * libmlx4.so.1). Programs such as perftest, libfabric, UCX and DPDK's mlx PMDs link against
 * them and call their entry points only for a device of that vendor, which ferroce never
 * reports; some call them for every device (libfabric's EFA provider queries every device with
 * efadv_query_device). So every entry point answers "not supported" in the form its header and
 * man page define for a failure, never a success:
 *
 *   STUB_PTR       object-returning call: NULL, errno = EOPNOTSUPP
 *   STUB_ERRNO     "0 on success or the value of errno on failure": EOPNOTSUPP (errno too)
 *   STUB_NEG1      "-1 and errno set" (ssize_t reads, file descriptors): -1, errno = EOPNOTSUPP
 *   STUB_NEGERRNO  "-errno on error": -EOPNOTSUPP (errno too)
 *   STUB_FALSE     *_is_supported predicate: false
 *   STUB_VOID      destroy/free without a result: nothing
 *   STUB_ERRNO_AT  STUB_ERRNO bound to a version with .symver (a name exported under two
 *                  versions, as rdma-core does for mlx5dv_init_obj)
 *
 * Each line reads STUB_KIND(VERSION, RETURN TYPE, NAME, (PARAMETERS)): build.rs reads the
 * version and the name from these lines to write the version script, so keep one per line.
 * The prototypes are the installed header's: when it is there the stub includes it and the
 * compiler checks every definition against its declaration; without it the stub declares the
 * types it names itself (pointers to incomplete structs, enums as int-sized placeholders). */
#ifndef FERROCE_STUB_H
#define FERROCE_STUB_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define STUB_PTR(VER, RET, NAME, ARGS) \
	RET NAME ARGS { errno = EOPNOTSUPP; return NULL; }
#define STUB_ERRNO(VER, RET, NAME, ARGS) \
	RET NAME ARGS { errno = EOPNOTSUPP; return EOPNOTSUPP; }
#define STUB_NEG1(VER, RET, NAME, ARGS) \
	RET NAME ARGS { errno = EOPNOTSUPP; return -1; }
#define STUB_NEGERRNO(VER, RET, NAME, ARGS) \
	RET NAME ARGS { errno = EOPNOTSUPP; return -EOPNOTSUPP; }
#define STUB_FALSE(VER, RET, NAME, ARGS) \
	RET NAME ARGS { return false; }
#define STUB_VOID(VER, RET, NAME, ARGS) \
	RET NAME ARGS { }
/* NAME@VER (AT "@") or NAME@@VER (AT "@@", the default), defined as NAME_TAG. */
#define STUB_ERRNO_AT(VER, RET, NAME, TAG, AT, ARGS) \
	__asm__(".symver " #NAME "_" #TAG ", " #NAME AT #VER); \
	RET NAME##_##TAG ARGS { errno = EOPNOTSUPP; return EOPNOTSUPP; }

#endif
