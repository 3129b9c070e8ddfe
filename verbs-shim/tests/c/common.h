/* What the C tests over the shim share: one line per check ("NAME: ok" / "NAME: FAIL", which
 * the Rust runners count), a monotonic clock, and one completion with a 10 s bound. Static
 * inline so that a test using only some of them still builds with -Wall -Werror. */
#ifndef FERROCE_TESTS_COMMON_H
#define FERROCE_TESTS_COMMON_H
#include <infiniband/verbs.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int failed;

static inline void check(int ok, const char *what)
{
	printf("%s: %s\n", what, ok ? "ok" : "FAIL");
	fflush(stdout);
	if (!ok)
		failed = 1;
}

static inline double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* One completion of `cq` within `secs`; 1 if one arrived. */
static inline int poll_one_for(struct ibv_cq *cq, struct ibv_wc *wc, double secs)
{
	double t0 = now_s();
	while (now_s() - t0 < secs) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			return 0;
		if (n == 1)
			return 1;
		usleep(100);
	}
	return 0;
}

/* One completion of `cq` within 10 s; 1 if one arrived. */
static inline int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	return poll_one_for(cq, wc, 10);
}
#endif
