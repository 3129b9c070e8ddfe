/* Stub libefa.so.1 for the ferroce verbs shim: perftest calls efadv_* only for EFA devices
 * (vendor id 0x1d0f), which ferroce never reports. Every entry fails cleanly. */
#include <errno.h>
#include <stddef.h>

void *efadv_create_qp_ex(void) { errno = EOPNOTSUPP; return NULL; }
void *efadv_create_driver_qp(void) { errno = EOPNOTSUPP; return NULL; }
int efadv_query_device(void) { return EOPNOTSUPP; }
