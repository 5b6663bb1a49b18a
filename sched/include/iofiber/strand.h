/* iofiber: strands. Fibers posted or dispatched through a strand never run
 * concurrently with each other and run in FIFO order of submission, on any
 * thread of the inner executor. */
#ifndef IOFIBER_STRAND_H
#define IOFIBER_STRAND_H

#include <iofiber/executor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iof_strand iof_strand;

/* A strand over `inner` (which must outlive it). NULL with errno EINVAL
 * (empty inner, or a vtable without post or dispatch) or ENOMEM. Over another
 * strand, its fibers go on to that one, which keeps them apart and in order,
 * and hold only that one while they run (a fiber holds one strand at a time):
 * running_in_this_thread is then true of the inner strand only. */
IOF_API iof_strand *iof_strand_create(iof_executor_ref inner);

/* Frees the strand. -EBUSY (nothing freed) while a fiber holds it or waits
 * in it, or while work is counted through it: a chain launched on it that
 * has not ended (even one suspended, holding nothing: its wake comes back
 * through the strand), or a work guard on its executor. */
IOF_API int iof_strand_destroy(iof_strand *s);

/* The strand's executor (a ref into the strand). */
IOF_API iof_executor_ref iof_strand_executor(iof_strand *s);

/* True when the calling fiber is running inside s. */
IOF_API bool iof_strand_running_in_this_thread(const iof_strand *s);

#ifdef __cplusplus
}
#endif
#endif
