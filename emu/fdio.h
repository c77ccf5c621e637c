/* fdio — a whole buffer down a file descriptor: the workers' pipes and
 * sockets (emu/range.c's range workers, emu/cli/pool.c's), where a write
 * may be cut short or interrupted by a signal and must be continued. */
#ifndef EMU_FDIO_H
#define EMU_FDIO_H

#include <stddef.h>

/* Writes all len bytes of buf to fd, again after EINTR and after a
 * short write; 0, or -1 when fd refuses them (errno says why). */
int fdio_write_all(int fd, const void *buf, size_t len);

#endif
