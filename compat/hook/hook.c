/* libiofiber-hook: interposes the blocking libc calls (and the pthread
 * calls) for the whole process and forwards those made by a launched fiber
 * to compat (iof_compat_<name>); every other caller gets libc itself.
 *
 * Why each routing rule (the table's kinds):
 * - IO: calls that wait (read, poll, connect, sleep, getaddrinfo...) go to
 *   compat only from a launched fiber (iof_env_current() != NULL, which
 *   never sets anything up and is safe before constructors and in foreign
 *   threads).
 * - FD: fd bookkeeping (socket, pipe, accept, close, dup*, fcntl, ioctl,
 *   setsockopt) goes to compat from every caller once the runtime is up, so
 *   a close anywhere wakes the fibers waiting on that fd.
 * - OBJ: pthread object calls (mutex, cond, rwlock, barrier, once, keys)
 *   and sem_* always go to compat: it implements those objects in place,
 *   so libc must never see one of them, whoever the caller is.
 * - TID and join/detach: a fiber "thread" id (odd pthread_t) goes to
 *   compat from anywhere; pthread_create/self/exit only from fibers.
 * - STDIO: reads from glibc's own streams (fgets, getc, fread, scanf...),
 *   which glibc makes with its internal read, out of any interposer's
 *   reach: from a fiber, when the stream's buffer is empty, compat waits
 *   for its fd first (iof_compat_fwait), then libc makes the call.
 * - CNT: calls with no fiber version, interposed only to be counted.
 * - The pass-through pointers are resolved lazily with dlsym(RTLD_NEXT), so
 *   they work before any constructor ran (glibc's dlsym may allocate but
 *   never calls an interposed function).
 * - A child forked from a fiber steps the hook aside: the child's copy of
 *   the event loop shares its epoll set with the parent, so fiber waits
 *   there are meaningless. Its calls are plain, except on fds the runtime
 *   made non-blocking (shared with the parent), where compat emulates the
 *   blocking call with poll; its fd bookkeeping goes on in its own copy of
 *   compat's table.
 *
 * compat's shims are weak references: a shim compat does not provide makes
 * its interposer a plain pass-through (counted as "blocked the thread" when
 * a fiber calls it). */
#undef _FORTIFY_SOURCE
/* No extern inline versions of the stdio calls interposed below
 * (<bits/stdio.h> defines getchar, getline... when optimizing): clang will
 * not give a definition that follows one the visibility attribute. */
#ifndef __NO_INLINE__
#define __NO_INLINE__ 1
#endif
#include "compat/hook/hook_internal.h"
#include <iofiber/hook.h>

#include <dirent.h>
#include <sched.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <mqueue.h>
#include <sys/epoll.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iofiber/compat_io.h>
#include <iofiber/compat_thread.h>
#include <iofiber/env.h>

/* glibc's optimized headers make it a macro; it is interposed as the
 * function it also is. */
#undef fread_unlocked

/* ---- the table -------------------------------------------------------- */

/* X(kind, ret, name, (typed params), (argument names)); kinds as above.
 * Variadic and void calls are written by hand. */
#define HOOK_CALLS(X)                                                          \
  X(FD, int, socket, (int d, int t, int p), (d, t, p))                         \
  X(FD, int, socketpair, (int d, int t, int p, int sv[2]), (d, t, p, sv))      \
  X(FD, int, pipe, (int fds[2]), (fds))                                        \
  X(FD, int, pipe2, (int fds[2], int fl), (fds, fl))                           \
  X(FD, int, accept, (int fd, struct sockaddr *a, socklen_t *l), (fd, a, l))   \
  X(FD, int, accept4, (int fd, struct sockaddr *a, socklen_t *l, int fl),      \
    (fd, a, l, fl))                                                            \
  X(IO, int, connect, (int fd, const struct sockaddr *a, socklen_t l),         \
    (fd, a, l))                                                                \
  X(IO, ssize_t, read, (int fd, void *b, size_t n), (fd, b, n))                \
  X(IO, ssize_t, write, (int fd, const void *b, size_t n), (fd, b, n))         \
  X(IO, ssize_t, readv, (int fd, const struct iovec *v, int n), (fd, v, n))    \
  X(IO, ssize_t, writev, (int fd, const struct iovec *v, int n), (fd, v, n))   \
  X(IO, ssize_t, recv, (int fd, void *b, size_t n, int fl), (fd, b, n, fl))    \
  X(IO, ssize_t, send, (int fd, const void *b, size_t n, int fl),              \
    (fd, b, n, fl))                                                            \
  X(IO, ssize_t, recvfrom,                                                     \
    (int fd, void *b, size_t n, int fl, struct sockaddr *a, socklen_t *l),     \
    (fd, b, n, fl, a, l))                                                      \
  X(IO, ssize_t, sendto,                                                       \
    (int fd, const void *b, size_t n, int fl, const struct sockaddr *a,        \
     socklen_t l),                                                             \
    (fd, b, n, fl, a, l))                                                      \
  X(IO, ssize_t, recvmsg, (int fd, struct msghdr *m, int fl), (fd, m, fl))     \
  X(IO, ssize_t, sendmsg, (int fd, const struct msghdr *m, int fl),            \
    (fd, m, fl))                                                               \
  X(IO, int, recvmmsg,                                                         \
    (int fd, struct mmsghdr *v, unsigned int n, int fl, struct timespec *t),   \
    (fd, v, n, fl, t))                                                         \
  X(IO, int, sendmmsg, (int fd, struct mmsghdr *v, unsigned int n, int fl),    \
    (fd, v, n, fl))                                                            \
  X(IO, ssize_t, sendfile, (int o, int i, off_t *off, size_t n),               \
    (o, i, off, n))                                                            \
  X(IO, ssize_t, splice,                                                       \
    (int i, loff_t *io, int o, loff_t *oo, size_t n, unsigned fl),             \
    (i, io, o, oo, n, fl))                                                     \
  X(IO, ssize_t, tee, (int i, int o, size_t n, unsigned fl), (i, o, n, fl))    \
  X(IO, ssize_t, vmsplice,                                                     \
    (int fd, const struct iovec *v, size_t n, unsigned fl), (fd, v, n, fl))    \
  X(IO, int, poll, (struct pollfd * p, nfds_t n, int t), (p, n, t))            \
  X(IO, int, ppoll,                                                            \
    (struct pollfd * p, nfds_t n, const struct timespec *t,                    \
     const sigset_t *s),                                                       \
    (p, n, t, s))                                                              \
  X(IO, int, select,                                                           \
    (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t),               \
    (n, r, w, e, t))                                                           \
  X(IO, int, pselect,                                                          \
    (int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t,         \
     const sigset_t *s),                                                       \
    (n, r, w, e, t, s))                                                        \
  X(IO, int, epoll_wait, (int fd, struct epoll_event *e, int n, int t),        \
    (fd, e, n, t))                                                             \
  X(IO, int, epoll_pwait,                                                      \
    (int fd, struct epoll_event *e, int n, int t, const sigset_t *s),          \
    (fd, e, n, t, s))                                                          \
  X(IO, int, epoll_pwait2,                                                     \
    (int fd, struct epoll_event *e, int n, const struct timespec *t,           \
     const sigset_t *s),                                                       \
    (fd, e, n, t, s))                                                          \
  X(IO, unsigned, sleep, (unsigned s), (s))                                    \
  X(IO, int, usleep, (useconds_t u), (u))                                      \
  X(IO, int, nanosleep, (const struct timespec *r, struct timespec *m),        \
    (r, m))                                                                    \
  X(IO, int, clock_nanosleep,                                                  \
    (clockid_t c, int fl, const struct timespec *r, struct timespec *m),       \
    (c, fl, r, m))                                                             \
  X(CLOSE, int, close, (int fd), (fd))                                         \
  X(FD, int, dup, (int fd), (fd))                                              \
  X(FD, FILE *, fdopen, (int fd, const char *m), (fd, m))                      \
  X(DUP, int, dup2, (int a, int b), (a, b))                                    \
  X(DUP, int, dup3, (int a, int b, int fl), (a, b, fl))                        \
  X(FD, int, setsockopt, (int fd, int lv, int nm, const void *v, socklen_t l), \
    (fd, lv, nm, v, l))                                                        \
  X(IO, int, getsockopt, (int fd, int lv, int nm, void *v, socklen_t *l),      \
    (fd, lv, nm, v, l))                                                        \
  X(IO, int, shutdown, (int fd, int how), (fd, how))                           \
  X(IO, int, listen, (int fd, int backlog), (fd, backlog))                     \
  X(IO, int, getaddrinfo,                                                      \
    (const char *n, const char *s, const struct addrinfo *h,                   \
     struct addrinfo **r),                                                     \
    (n, s, h, r))                                                              \
  X(IO, struct hostent *, gethostbyname, (const char *n), (n))                 \
  X(IO, int, gethostbyname_r,                                                  \
    (const char *n, struct hostent *h, char *b, size_t l, struct hostent **r,  \
     int *e),                                                                  \
    (n, h, b, l, r, e))                                                        \
  X(IO, struct hostent *, gethostbyaddr, (const void *a, socklen_t l, int t),  \
    (a, l, t))                                                                 \
  X(IO, int, gethostbyaddr_r,                                                  \
    (const void *a, socklen_t l, int t, struct hostent *h, char *b, size_t n,  \
     struct hostent **r, int *e),                                              \
    (a, l, t, h, b, n, r, e))                                                  \
  X(IO, int, getnameinfo,                                                      \
    (const struct sockaddr *a, socklen_t l, char *h, socklen_t hl, char *s,    \
     socklen_t sl, int f),                                                     \
    (a, l, h, hl, s, sl, f))                                                   \
  X(IO, ssize_t, mq_receive, (mqd_t q, char *m, size_t l, unsigned *p),        \
    (q, m, l, p))                                                              \
  X(IO, ssize_t, mq_timedreceive,                                              \
    (mqd_t q, char *m, size_t l, unsigned *p, const struct timespec *t),       \
    (q, m, l, p, t))                                                           \
  X(IO, int, mq_send, (mqd_t q, const char *m, size_t l, unsigned p),          \
    (q, m, l, p))                                                              \
  X(IO, int, mq_timedsend,                                                     \
    (mqd_t q, const char *m, size_t l, unsigned p, const struct timespec *t),  \
    (q, m, l, p, t))                                                           \
  X(IO, int, mq_close, (mqd_t q), (q))                                         \
  X(IO, int, semtimedop,                                                       \
    (int i, struct sembuf *o, size_t n, const struct timespec *t),             \
    (i, o, n, t))                                                              \
  X(IO, int, semop, (int i, struct sembuf *o, size_t n), (i, o, n))            \
  X(IO, int, msgsnd, (int i, const void *m, size_t s, int f), (i, m, s, f))    \
  X(IO, ssize_t, msgrcv, (int i, void *m, size_t s, long t, int f),            \
    (i, m, s, t, f))                                                           \
  X(IO, int, sched_yield, (void), ())                                          \
  X(TID, int, pthread_setname_np, (pthread_t t, const char *n), (t, n))        \
  X(TID, int, pthread_getname_np, (pthread_t t, char *b, size_t l), (t, b, l)) \
  X(TID, int, pthread_getattr_np, (pthread_t t, pthread_attr_t * a), (t, a))   \
  X(TID, int, pthread_kill, (pthread_t t, int sig), (t, sig))                  \
  X(TID, int, pthread_cancel, (pthread_t t), (t))                              \
  X(TID, int, pthread_tryjoin_np, (pthread_t t, void **r), (t, r))             \
  X(TID, int, pthread_timedjoin_np,                                            \
    (pthread_t t, void **r, const struct timespec *a), (t, r, a))              \
  X(TID, int, pthread_clockjoin_np,                                            \
    (pthread_t t, void **r, clockid_t c, const struct timespec *a),            \
    (t, r, c, a))                                                              \
  X(TID, int, pthread_getschedparam,                                           \
    (pthread_t t, int *p, struct sched_param *s), (t, p, s))                   \
  X(TID, int, pthread_setschedparam,                                           \
    (pthread_t t, int p, const struct sched_param *s), (t, p, s))              \
  X(TID, int, pthread_setschedprio, (pthread_t t, int p), (t, p))              \
  X(TID, int, pthread_getcpuclockid, (pthread_t t, clockid_t * c), (t, c))     \
  X(TID, int, pthread_getaffinity_np, (pthread_t t, size_t n, cpu_set_t * c),  \
    (t, n, c))                                                                 \
  X(TID, int, pthread_setaffinity_np,                                          \
    (pthread_t t, size_t n, const cpu_set_t *c), (t, n, c))                    \
  X(TID, int, pthread_sigqueue, (pthread_t t, int sig, const union sigval v),  \
    (t, sig, v))                                                               \
  X(FIB, int, pthread_setcancelstate, (int st, int *o), (st, o))               \
  X(FIB, int, pthread_setcanceltype, (int ty, int *o), (ty, o))                \
  X(OBJ, int, pthread_once, (pthread_once_t * o, void (*f)(void)), (o, f))     \
  X(OBJ, int, pthread_mutex_init,                                              \
    (pthread_mutex_t * m, const pthread_mutexattr_t *a), (m, a))               \
  X(OBJ, int, pthread_mutex_destroy, (pthread_mutex_t * m), (m))               \
  X(OBJ, int, pthread_mutex_lock, (pthread_mutex_t * m), (m))                  \
  X(OBJ, int, pthread_mutex_trylock, (pthread_mutex_t * m), (m))               \
  X(OBJ, int, pthread_mutex_timedlock,                                         \
    (pthread_mutex_t * m, const struct timespec *t), (m, t))                   \
  X(OBJ, int, pthread_mutex_clocklock,                                         \
    (pthread_mutex_t * m, clockid_t k, const struct timespec *t), (m, k, t))   \
  X(OBJ, int, pthread_mutex_unlock, (pthread_mutex_t * m), (m))                \
  X(OBJ, int, pthread_cond_init,                                               \
    (pthread_cond_t * c, const pthread_condattr_t *a), (c, a))                 \
  X(OBJ, int, pthread_cond_destroy, (pthread_cond_t * c), (c))                 \
  X(OBJ, int, pthread_cond_wait, (pthread_cond_t * c, pthread_mutex_t * m),    \
    (c, m))                                                                    \
  X(OBJ, int, pthread_cond_timedwait,                                          \
    (pthread_cond_t * c, pthread_mutex_t * m, const struct timespec *t),       \
    (c, m, t))                                                                 \
  X(OBJ, int, pthread_cond_clockwait,                                          \
    (pthread_cond_t * c, pthread_mutex_t * m, clockid_t k,                     \
     const struct timespec *t),                                                \
    (c, m, k, t))                                                              \
  X(IO, int, pthread_spin_lock, (pthread_spinlock_t * l), (l))                 \
  X(OBJ, int, pthread_barrier_init,                                            \
    (pthread_barrier_t * b, const pthread_barrierattr_t *a, unsigned n),       \
    (b, a, n))                                                                 \
  X(OBJ, int, pthread_barrier_destroy, (pthread_barrier_t * b), (b))           \
  X(OBJ, int, pthread_barrier_wait, (pthread_barrier_t * b), (b))              \
  X(OBJ, int, dlclose, (void *h), (h))                                         \
  X(OBJ, int, pthread_cond_signal, (pthread_cond_t * c), (c))                  \
  X(OBJ, int, pthread_cond_broadcast, (pthread_cond_t * c), (c))               \
  X(OBJ, int, pthread_rwlock_init,                                             \
    (pthread_rwlock_t * l, const pthread_rwlockattr_t *a), (l, a))             \
  X(OBJ, int, pthread_rwlock_destroy, (pthread_rwlock_t * l), (l))             \
  X(OBJ, int, pthread_rwlock_rdlock, (pthread_rwlock_t * l), (l))              \
  X(OBJ, int, pthread_rwlock_tryrdlock, (pthread_rwlock_t * l), (l))           \
  X(OBJ, int, pthread_rwlock_timedrdlock,                                      \
    (pthread_rwlock_t * l, const struct timespec *t), (l, t))                  \
  X(OBJ, int, pthread_rwlock_wrlock, (pthread_rwlock_t * l), (l))              \
  X(OBJ, int, pthread_rwlock_trywrlock, (pthread_rwlock_t * l), (l))           \
  X(OBJ, int, pthread_rwlock_timedwrlock,                                      \
    (pthread_rwlock_t * l, const struct timespec *t), (l, t))                  \
  X(OBJ, int, pthread_rwlock_clockrdlock,                                      \
    (pthread_rwlock_t * l, clockid_t k, const struct timespec *t), (l, k, t))  \
  X(OBJ, int, pthread_rwlock_clockwrlock,                                      \
    (pthread_rwlock_t * l, clockid_t k, const struct timespec *t), (l, k, t))  \
  X(OBJ, int, pthread_rwlock_unlock, (pthread_rwlock_t * l), (l))              \
  X(OBJ, int, pthread_key_create, (pthread_key_t * k, void (*d)(void *)),      \
    (k, d))                                                                    \
  X(OBJ, int, pthread_key_delete, (pthread_key_t k), (k))                      \
  X(OBJ, void *, pthread_getspecific, (pthread_key_t k), (k))                  \
  X(OBJ, int, pthread_setspecific, (pthread_key_t k, const void *v), (k, v))   \
  X(OBJ, int, sem_init, (sem_t * s, int p, unsigned v), (s, p, v))             \
  X(OBJ, int, sem_destroy, (sem_t * s), (s))                                   \
  X(OBJ, int, sem_wait, (sem_t * s), (s))                                      \
  X(OBJ, int, sem_trywait, (sem_t * s), (s))                                   \
  X(OBJ, int, sem_timedwait, (sem_t * s, const struct timespec *t), (s, t))    \
  X(OBJ, int, sem_clockwait,                                                   \
    (sem_t * s, clockid_t k, const struct timespec *t), (s, k, t))             \
  X(OBJ, int, sem_post, (sem_t * s), (s))                                      \
  X(OBJ, int, sem_getvalue, (sem_t * s, int *v), (s, v))                       \
  X(CNT, ssize_t, pread, (int fd, void *b, size_t n, off_t o), (fd, b, n, o))  \
  X(CNT, ssize_t, pwrite, (int fd, const void *b, size_t n, off_t o),          \
    (fd, b, n, o))                                                             \
  X(CNT, ssize_t, pread64, (int fd, void *b, size_t n, off64_t o),             \
    (fd, b, n, o))                                                             \
  X(CNT, ssize_t, pwrite64, (int fd, const void *b, size_t n, off64_t o),      \
    (fd, b, n, o))                                                             \
  X(IO, pid_t, waitpid, (pid_t p, int *s, int o), (p, s, o))                   \
  X(IO, pid_t, wait, (int *s), (s))                                            \
  X(IO, pid_t, wait4, (pid_t p, int *s, int o, struct rusage *r),              \
    (p, s, o, r))                                                              \
  X(IO, pid_t, wait3, (int *s, int o, struct rusage *r), (s, o, r))            \
  X(IO, int, waitid, (idtype_t t, id_t i, siginfo_t * s, int o), (t, i, s, o)) \
  X(IO, int, flock, (int fd, int op), (fd, op))                                \
  X(IO, int, lockf, (int fd, int c, off_t n), (fd, c, n))                      \
  X(CNT, int, fsync, (int fd), (fd))                                           \
  X(CNT, int, fdatasync, (int fd), (fd))                                       \
  X(IO, int, sigwait, (const sigset_t *s, int *n), (s, n))                     \
  X(IO, int, sigwaitinfo, (const sigset_t *s, siginfo_t *i), (s, i))           \
  X(IO, int, sigtimedwait,                                                     \
    (const sigset_t *s, siginfo_t *i, const struct timespec *t), (s, i, t))    \
  X(IO, int, sigsuspend, (const sigset_t *s), (s))                             \
  X(IO, int, pthread_sigmask, (int h, const sigset_t *s, sigset_t *o),         \
    (h, s, o))                                                                 \
  X(IO, int, sigprocmask, (int h, const sigset_t *s, sigset_t *o), (h, s, o))  \
  X(IO, int, pause, (void), ())                                                \
  X(STDIO, char *, fgets, (char *s, int n, FILE *fp), (s, n, fp))              \
  X(STDIO, char *, fgets_unlocked, (char *s, int n, FILE *fp), (s, n, fp))     \
  X(STDIO, char *, __fgets_chk, (char *s, size_t z, int n, FILE *fp),          \
    (s, z, n, fp))                                                             \
  X(STDIO, char *, __fgets_unlocked_chk, (char *s, size_t z, int n, FILE *fp), \
    (s, z, n, fp))                                                             \
  X(STDIO, ssize_t, getline, (char **l, size_t *n, FILE *fp), (l, n, fp))      \
  X(STDIO, ssize_t, getdelim, (char **l, size_t *n, int d, FILE *fp),          \
    (l, n, d, fp))                                                             \
  X(STDIO, ssize_t, __getdelim, (char **l, size_t *n, int d, FILE *fp),        \
    (l, n, d, fp))                                                             \
  X(STDIO, int, fgetc, (FILE * fp), (fp))                                      \
  X(STDIO, int, fgetc_unlocked, (FILE * fp), (fp))                             \
  X(STDIO, int, getc, (FILE * fp), (fp))                                       \
  X(STDIO, int, getc_unlocked, (FILE * fp), (fp))                              \
  X(STDIO, int, _IO_getc, (FILE * fp), (fp))                                   \
  X(STDIO, int, __uflow, (FILE * fp), (fp))                                    \
  X(STDIO, size_t, fread, (void *p, size_t s, size_t n, FILE *fp),             \
    (p, s, n, fp))                                                             \
  X(STDIO, size_t, fread_unlocked, (void *p, size_t s, size_t n, FILE *fp),    \
    (p, s, n, fp))                                                             \
  X(STDIO, size_t, __fread_chk,                                                \
    (void *p, size_t z, size_t s, size_t n, FILE *fp), (p, z, s, n, fp))       \
  X(STDIO, size_t, __fread_unlocked_chk,                                       \
    (void *p, size_t z, size_t s, size_t n, FILE *fp), (p, z, s, n, fp))       \
  X(STDIO, int, __isoc99_vfscanf, (FILE * fp, const char *f, va_list ap),      \
    (fp, f, ap))

/* Calls written by hand, for the index and the counters. */
#define HOOK_EXTRA(Y)                                                          \
  Y(fcntl)                                                                     \
  Y(ioctl)                                                                     \
  Y(freeaddrinfo)                                                              \
  Y(fork)                                                                      \
  Y(syscall)                                                                   \
  Y(pthread_create)                                                            \
  Y(pthread_join)                                                              \
  Y(pthread_detach)                                                            \
  Y(pthread_self)                                                              \
  Y(pthread_equal)                                                             \
  Y(pthread_exit)                                                              \
  Y(pthread_testcancel)                                                        \
  Y(__pthread_register_cancel)                                                 \
  Y(__pthread_unregister_cancel)                                               \
  Y(__pthread_unwind_next)                                                     \
  Y(__cxa_thread_atexit_impl)                                                  \
  Y(system)                                                                    \
  Y(popen)                                                                     \
  Y(pclose)                                                                    \
  Y(posix_spawn)                                                               \
  Y(posix_spawnp)                                                              \
  Y(sigaction)                                                                 \
  Y(signal)                                                                    \
  Y(epoll_create)                                                              \
  Y(epoll_create1)                                                             \
  Y(eventfd)                                                                   \
  Y(signalfd)                                                                  \
  Y(timerfd_create)                                                            \
  Y(closefrom)                                                                 \
  Y(close_range)                                                               \
  Y(execve)                                                                    \
  Y(execv)                                                                     \
  Y(execvp)                                                                    \
  Y(execvpe)                                                                   \
  Y(fexecve)                                                                   \
  Y(execl)                                                                     \
  Y(execlp)                                                                    \
  Y(execle)                                                                    \
  Y(getchar)                                                                   \
  Y(getchar_unlocked)                                                          \
  Y(vfscanf)                                                                   \
  Y(fscanf)                                                                    \
  Y(__isoc99_fscanf)                                                           \
  Y(scanf)                                                                     \
  Y(__isoc99_scanf)                                                            \
  Y(vscanf)                                                                    \
  Y(__isoc99_vscanf)

enum {
#define IDX(kind, ret, name, params, args) H_##name,
#define IDX_EXTRA(name) H_##name,
  HOOK_CALLS(IDX) HOOK_EXTRA(IDX_EXTRA)
#undef IDX
#undef IDX_EXTRA
      H_COUNT
};

static const char *const names[H_COUNT] = {
#define NAME(kind, ret, name, params, args) [H_##name] = #name,
#define NAME_EXTRA(name) [H_##name] = #name,
    HOOK_CALLS(NAME) HOOK_EXTRA(NAME_EXTRA)
#undef NAME
#undef NAME_EXTRA
};

/* compat's shims, weak: absent ones read as NULL. */
#define WEAK_IO(ret, name, params) ret iof_compat_##name params IOF_HOOK_WEAK;
#define WEAK(kind, ret, name, params, args) WEAK_##kind(ret, name, params)
#define WEAK_OBJ WEAK_IO
#define WEAK_FD WEAK_IO
#define WEAK_DUP WEAK_IO
#define WEAK_CLOSE WEAK_IO
#define WEAK_TID WEAK_IO
#define WEAK_FIB WEAK_IO
#define WEAK_CNT(ret, name, params)
#define WEAK_STDIO(ret, name, params)
HOOK_CALLS(WEAK)
#undef WEAK
int iof_compat_fwait(FILE *fp) IOF_HOOK_WEAK;
int iof_compat_fcntl(int fd, int cmd, ...) IOF_HOOK_WEAK;
int iof_compat_ioctl(int fd, unsigned long req, ...) IOF_HOOK_WEAK;
void iof_compat_freeaddrinfo(struct addrinfo *ai) IOF_HOOK_WEAK;
pid_t iof_compat_fork(void) IOF_HOOK_WEAK;
long iof_compat_syscall(long n, ...) IOF_HOOK_WEAK;
int iof_compat_pthread_create(pthread_t *t, const pthread_attr_t *a,
                              void *(*fn)(void *), void *arg) IOF_HOOK_WEAK;
int iof_compat_pthread_join(pthread_t t, void **r) IOF_HOOK_WEAK;
int iof_compat_pthread_detach(pthread_t t) IOF_HOOK_WEAK;
pthread_t iof_compat_pthread_self(void) IOF_HOOK_WEAK;
int iof_compat_pthread_equal(pthread_t a, pthread_t b) IOF_HOOK_WEAK;
void iof_compat_pthread_exit(void *r) IOF_HOOK_WEAK;
void iof_compat_pthread_testcancel(void) IOF_HOOK_WEAK;
void iof_compat_pthread_register_cancel(__pthread_unwind_buf_t *b)
    IOF_HOOK_WEAK;
void iof_compat_pthread_unregister_cancel(__pthread_unwind_buf_t *b)
    IOF_HOOK_WEAK;
void iof_compat_pthread_unwind_next(__pthread_unwind_buf_t *b) IOF_HOOK_WEAK;
int iof_compat_cxa_thread_atexit_impl(void (*fn)(void *), void *obj,
                                      void *dso) IOF_HOOK_WEAK;
void *iof_compat_tls_get_addr(void *ti, void *(*real)(void *)) IOF_HOOK_WEAK;

/* ---- state ------------------------------------------------------------ */

/* Set in a child forked from a fiber: everything passes through. */
static volatile sig_atomic_t stepped_aside;
/* IOF_HOOK_VERBOSE: count calls and report at exit. Read-mostly. */
static bool verbose;

enum { C_FIBER, C_BLOCKED, C_PLAIN, C_KINDS };
static atomic_ulong counts[H_COUNT][C_KINDS];

/* A macro so that the column expression (often a fiber check) is only
 * evaluated when counting is on. */
#define count(call, kind)                                                      \
  do {                                                                         \
    if (__builtin_expect(verbose, 0))                                          \
      atomic_fetch_add_explicit(&counts[call][kind], 1, memory_order_relaxed); \
  } while (0)

/* Depth of wrapped signal handlers running on this thread: a call made
 * from a handler must stay a plain (async-signal-safe) syscall even when the
 * handler interrupted a fiber. */
static __thread int in_handler __attribute__((tls_model("initial-exec")));

bool iof__hook_in_fiber(void) {
  return !stepped_aside && !in_handler && iof_env_current() != NULL;
}

/* Set by our constructor, which runs after libiofiber's (we depend on it):
 * from then on compat's tables are usable from any thread. */
static bool runtime_ready;

#define fd_bookkeeping_of(name)                                                \
  (iof_compat_##name && runtime_ready && !in_handler)

/* ---- libc's own entry points ------------------------------------------ */

static void *_Atomic real_ptrs[H_COUNT];

static void *real_sym(int call) {
  void *p = atomic_load_explicit(&real_ptrs[call], memory_order_relaxed);
  if (__builtin_expect(!p, 0)) {
    p = dlsym(RTLD_NEXT, names[call]);
    atomic_store_explicit(&real_ptrs[call], p, memory_order_relaxed);
  }
  return p;
}

#define REAL(name) ((__typeof__(&name))real_sym(H_##name))

/* ---- generated interposers -------------------------------------------- */

/* IO: compat from a fiber, libc otherwise. In a child forked from a fiber
 * compat too (it knows it is no fiber there): an fd the runtime made
 * non-blocking, shared with the parent, must still block for the child,
 * which compat does with a plain poll. */
#define DEF_IO(ret, name, params, args)                                        \
  IOF_HOOK_API ret name params {                                               \
    if (iof__hook_in_fiber()) {                                                \
      if (iof_compat_##name) {                                                 \
        count(H_##name, C_FIBER);                                              \
        return iof_compat_##name args;                                         \
      }                                                                        \
      count(H_##name, C_BLOCKED);                                              \
    } else {                                                                   \
      count(H_##name, C_PLAIN);                                                \
      /* A plain thread on an fd the runtime made non-blocking must still      \
       * block: compat emulates that (and is the plain call otherwise). */     \
      if (fd_bookkeeping_of(name)) return iof_compat_##name args;              \
    }                                                                          \
    return REAL(name) args;                                                    \
  }

/* OBJ: compat always (it owns the object's layout); libc only while compat
 * lacks the whole family. */
#define DEF_OBJ(ret, name, params, args)                                       \
  IOF_HOOK_API ret name params {                                               \
    bool hook_f_ = verbose && iof__hook_in_fiber();                            \
    if (iof_compat_##name) {                                                   \
      count(H_##name, hook_f_ ? C_FIBER : C_PLAIN);                            \
      return iof_compat_##name args;                                           \
    }                                                                          \
    count(H_##name, hook_f_ ? C_BLOCKED : C_PLAIN);                            \
    return REAL(name) args;                                                    \
  }

/* FD: fd bookkeeping (a new fd's record, close/dup waking waiters, the
 * user's O_NONBLOCK and timeouts) must see every caller, fiber or not, or a
 * reused fd number would meet a stale record. Plain only before the
 * runtime's constructor ran and in handlers. In a child forked from a
 * fiber the records are the child's copy: compat keeps them there without
 * touching the parent's waiters, so that an fd the child makes non-blocking
 * (a PostgreSQL backend's client socket) or closes and reuses is seen as
 * the child made it. */
#define TO_COMPAT_IF_KEPT(name, args)                                          \
  if (fd_bookkeeping_of(name)) {                                               \
    count(H_##name, iof__hook_in_fiber() ? C_FIBER : C_PLAIN);                 \
    return iof_compat_##name args;                                             \
  }                                                                            \
  count(H_##name, C_PLAIN)

#define DEF_FD(ret, name, params, args)                                        \
  IOF_HOOK_API ret name params {                                               \
    TO_COMPAT_IF_KEPT(name, args);                                             \
    return REAL(name) args;                                                    \
  }

/* The runtime's own descriptors (libev's, listed by libiofiber) are not
 * the program's to close or replace: as if not open. */
bool iof__rt_fd_scope(void);
int iof__rt_fd_adopt(int fd);
bool iof__rt_fd_owned(int fd);
void iof__rt_fd_forget(int fd);
int iof__rt_fd_next(int from);
bool iof__rt_fd_release(int fd);

/* CLOSE: close as FD; libev's close of its own fd (in the runtime's
 * bracket) unlists it. */
#define DEF_CLOSE(ret, name, params, args)                                     \
  IOF_HOOK_API ret name params {                                               \
    if (iof__rt_fd_owned(fd)) {                                                \
      if (in_handler || !iof__rt_fd_scope()) {                                 \
        errno = EBADF;                                                         \
        return -1;                                                             \
      }                                                                        \
      iof__rt_fd_forget(fd);                                                   \
    }                                                                          \
    TO_COMPAT_IF_KEPT(name, args);                                             \
    return REAL(name) args;                                                    \
  }

/* DUP: dup2/dup3 (parameters a, b) as FD. */
#define DEF_DUP(ret, name, params, args)                                       \
  IOF_HOOK_API ret name params {                                               \
    if (iof__rt_fd_owned(b) && !iof__rt_fd_release(b)) {                       \
      errno = EBADF;                                                           \
      return -1;                                                               \
    }                                                                          \
    TO_COMPAT_IF_KEPT(name, args);                                             \
    return REAL(name) args;                                                    \
  }

/* TID: calls on a thread id; a fiber thread's id (odd) means nothing to
 * libc, which would dereference it. The first parameter is named t. */
#define DEF_TID(ret, name, params, args)                                       \
  IOF_HOOK_API ret name params {                                               \
    if (((uintptr_t)t & 1) && iof_compat_##name) {                             \
      count(H_##name, iof__hook_in_fiber() ? C_FIBER : C_PLAIN);               \
      return iof_compat_##name args;                                           \
    }                                                                          \
    count(H_##name, C_PLAIN);                                                  \
    return REAL(name) args;                                                    \
  }

/* FIB: state glibc keeps per OS thread, which the fiber threads sharing
 * it must each have: compat from a fiber (it passes other fibers on),
 * libc otherwise. */
#define DEF_FIB(ret, name, params, args)                                       \
  IOF_HOOK_API ret name params {                                               \
    if (iof__hook_in_fiber() && iof_compat_##name) {                           \
      count(H_##name, C_FIBER);                                                \
      return iof_compat_##name args;                                           \
    }                                                                          \
    count(H_##name, C_PLAIN);                                                  \
    return REAL(name) args;                                                    \
  }

/* STDIO: the wait for an empty buffer's fd from compat, then libc's call
 * (the stream and its buffer are glibc's). The parameter named fp is the
 * stream. A failed wait (a stop, EINTR) fails the call: NULL, EOF, -1 or
 * 0 by its return type. */
static inline int stdio_wait(FILE *fp, int call) {
  if (fp && fp->_IO_read_ptr >= fp->_IO_read_end && iof__hook_in_fiber()) {
    if (iof_compat_fwait) {
      count(call, C_FIBER);
      return iof_compat_fwait(fp);
    }
    count(call, C_BLOCKED);
    return 0;
  }
  count(call, C_PLAIN);
  return 0;
}

#define STDIO_FAIL(ret)                                                        \
  ((ret) _Generic((ret)0, int : EOF, long : -1L, default : 0))
#define DEF_STDIO(ret, name, params, args)                                     \
  IOF_HOOK_API ret name params {                                               \
    if (stdio_wait(fp, H_##name) < 0) return STDIO_FAIL(ret);                  \
    return REAL(name) args;                                                    \
  }

/* CNT: no fiber version; a fiber calling it blocks its thread. */
#define DEF_CNT(ret, name, params, args)                                       \
  IOF_HOOK_API ret name params {                                               \
    count(H_##name, iof__hook_in_fiber() ? C_BLOCKED : C_PLAIN);               \
    return REAL(name) args;                                                    \
  }

#define DEF(kind, ret, name, params, args) DEF_##kind(ret, name, params, args)
HOOK_CALLS(DEF)
#undef DEF

/* ---- variadic and void calls ------------------------------------------ */

/* fcntl's third argument is an int or a pointer; both travel in one
 * integer register on every ABI glibc supports, as glibc itself assumes. */
IOF_HOOK_API int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  uintptr_t arg = va_arg(ap, uintptr_t);
  va_end(ap);
  if (fd_bookkeeping_of(fcntl)) {
    count(H_fcntl, iof__hook_in_fiber() ? C_FIBER : C_PLAIN);
    return iof_compat_fcntl(fd, cmd, arg);
  }
  count(H_fcntl, C_PLAIN);
  return REAL(fcntl)(fd, cmd, arg);
}

#ifdef __LP64__
/* With _FILE_OFFSET_BITS=64, glibc's headers call sendfile64: the same
 * call where off_t is 64 bits. */
IOF_HOOK_API ssize_t sendfile64(int o, int i, off64_t *off, size_t n) {
  return sendfile(o, i, (off_t *)off, n);
}
#endif

#ifdef __LP64__
/* With _FILE_OFFSET_BITS=64, glibc's headers call lockf64. */
IOF_HOOK_API int lockf64(int fd, int cmd, off64_t len) {
  return lockf(fd, cmd, (off_t)len);
}
#endif

/* With _FILE_OFFSET_BITS=64, glibc's headers call fcntl64. */
IOF_HOOK_API int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  uintptr_t arg = va_arg(ap, uintptr_t);
  va_end(ap);
  return fcntl(fd, cmd, arg);
}

IOF_HOOK_API int ioctl(int fd, unsigned long req, ...) {
  va_list ap;
  va_start(ap, req);
  uintptr_t arg = va_arg(ap, uintptr_t);
  va_end(ap);
  if (fd_bookkeeping_of(ioctl)) {
    count(H_ioctl, iof__hook_in_fiber() ? C_FIBER : C_PLAIN);
    return iof_compat_ioctl(fd, req, arg);
  }
  count(H_ioctl, C_PLAIN);
  return REAL(ioctl)(fd, req, arg);
}

/* A result from compat's getaddrinfo is freed by compat, wherever it is
 * freed: routed always. */
IOF_HOOK_API void freeaddrinfo(struct addrinfo *ai) {
  if (iof_compat_freeaddrinfo && iof_compat_getaddrinfo) {
    iof_compat_freeaddrinfo(ai);
    return;
  }
  REAL(freeaddrinfo)(ai);
}

/* ---- threads ---------------------------------------------------------- */

/* A fiber "thread" id is odd (compat's record | 1); a real one is even. */
static inline bool fiber_tid(pthread_t t) {
  return ((uintptr_t)t & 1) != 0;
}

IOF_HOOK_API int pthread_create(pthread_t *t, const pthread_attr_t *a,
                                void *(*fn)(void *), void *arg) {
  if (iof__hook_in_fiber() && iof_compat_pthread_create) {
    count(H_pthread_create, C_FIBER);
    return iof_compat_pthread_create(t, a, fn, arg);
  }
  count(H_pthread_create, C_PLAIN);
  return REAL(pthread_create)(t, a, fn, arg);
}

IOF_HOOK_API int pthread_join(pthread_t t, void **r) {
  bool f = iof__hook_in_fiber();
  if ((f || fiber_tid(t)) && iof_compat_pthread_join) {
    count(H_pthread_join, f ? C_FIBER : C_PLAIN);
    return iof_compat_pthread_join(t, r);
  }
  count(H_pthread_join, f ? C_BLOCKED : C_PLAIN);
  return REAL(pthread_join)(t, r);
}

IOF_HOOK_API int pthread_detach(pthread_t t) {
  if ((fiber_tid(t) || iof__hook_in_fiber()) && iof_compat_pthread_detach)
    return iof_compat_pthread_detach(t);
  return REAL(pthread_detach)(t);
}

IOF_HOOK_API pthread_t pthread_self(void) {
  if (iof_compat_pthread_self && iof__hook_in_fiber())
    return iof_compat_pthread_self();
  return REAL(pthread_self)();
}

/* glibc's <pthread.h> may define pthread_equal as an extern inline, which
 * clang will not let a file define again: the symbol gets another C name. */
IOF_HOOK_API int hook_pthread_equal(pthread_t a,
                                    pthread_t b) __asm__("pthread_equal");
IOF_HOOK_API int hook_pthread_equal(pthread_t a, pthread_t b) {
  return a == b;
}

IOF_HOOK_API void pthread_exit(void *r) {
  if (iof_compat_pthread_exit && iof__hook_in_fiber())
    iof_compat_pthread_exit(r);
  REAL(pthread_exit)(r);
  __builtin_unreachable();
}

/* C++ thread_local destructors: a fiber thread's own thread-locals end
 * with it (libc would queue them on the OS thread, to run on whichever
 * fiber's values are in place when it exits). */
int __cxa_thread_atexit_impl(void (*fn)(void *), void *obj, void *dso);
IOF_HOOK_API int __cxa_thread_atexit_impl(void (*fn)(void *), void *obj,
                                          void *dso) {
  if (iof_compat_cxa_thread_atexit_impl && iof__hook_in_fiber()) {
    int r = iof_compat_cxa_thread_atexit_impl(fn, obj, dso);
    if (r != -ESRCH) {
      count(H___cxa_thread_atexit_impl, C_FIBER);
      return r < 0 ? -1 : 0;
    }
  }
  count(H___cxa_thread_atexit_impl, C_PLAIN);
  return REAL(__cxa_thread_atexit_impl)(fn, obj, dso);
}

/* Thread-locals of modules loaded with dlopen (dynamic TLS): the loader
 * keeps one block per OS thread, which the fiber threads of one OS thread
 * would share; compat gives each its own. Reached only from code built
 * for the traditional TLS dialect (TLS descriptors go to the loader
 * directly), on every access of a library's thread-local: the usual call
 * is two tail calls to the loader's. Some compilers call it with the
 * stack misaligned: the calls that need alignment realign it (glibc's
 * too), so the first lookup, which calls dlsym, runs apart. */
typedef void *(*tls_get_addr_fn)(void *);
static _Atomic(tls_get_addr_fn) real_tls_get_addr;

__attribute__((noinline, force_align_arg_pointer)) static tls_get_addr_fn
find_tls_get_addr(void) {
  tls_get_addr_fn real = (tls_get_addr_fn)dlsym(RTLD_NEXT, "__tls_get_addr");
  atomic_store_explicit(&real_tls_get_addr, real, memory_order_relaxed);
  return real;
}

void *__tls_get_addr(void *ti);
IOF_HOOK_API void *__tls_get_addr(void *ti) {
  tls_get_addr_fn real =
      atomic_load_explicit(&real_tls_get_addr, memory_order_relaxed);
  if (__builtin_expect(!real, 0)) real = find_tls_get_addr();
  if (iof_compat_tls_get_addr) return iof_compat_tls_get_addr(ti, real);
  return real(ti);
}

/* A void call that compat takes from fibers (cancel state, cleanup
 * buffers); everyone else gets libc's. */
#define DEF_VOID_FROM_FIBER(name, compat, params, args)                        \
  IOF_HOOK_API void name params {                                              \
    if (compat && iof__hook_in_fiber()) {                                      \
      count(H_##name, C_FIBER);                                                \
      compat args;                                                             \
      return;                                                                  \
    }                                                                          \
    count(H_##name, C_PLAIN);                                                  \
    REAL(name) args;                                                           \
  }

DEF_VOID_FROM_FIBER(pthread_testcancel, iof_compat_pthread_testcancel, (void),
                    ())

/* What glibc's C pthread_cleanup_push/pop expand to: a fiber thread's
 * buffers are chained in its own record, not in the descriptor of the OS
 * thread its fibers share. A buffer is always unregistered (or unwound)
 * by the fiber that registered it, so both sides route alike. */
DEF_VOID_FROM_FIBER(__pthread_register_cancel,
                    iof_compat_pthread_register_cancel,
                    (__pthread_unwind_buf_t * b), (b))
DEF_VOID_FROM_FIBER(__pthread_unregister_cancel,
                    iof_compat_pthread_unregister_cancel,
                    (__pthread_unwind_buf_t * b), (b))

IOF_HOOK_API void __pthread_unwind_next(__pthread_unwind_buf_t *b) {
  if (iof_compat_pthread_unwind_next && iof__hook_in_fiber())
    iof_compat_pthread_unwind_next(b);
  REAL(__pthread_unwind_next)(b);
  __builtin_unreachable();
}

/* ---- fork ------------------------------------------------------------- */

/* Calls fn(fd, arg) for each fd open in this process, as /proc/self/fd
 * lists them (nothing without /proc). */
static void each_open_fd(void (*fn)(int fd, void *arg), void *arg) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  int self = dirfd(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int fd = atoi(e->d_name);
    if (fd != self) fn(fd, arg);
  }
  closedir(d);
}

/* A program we start gets the fds it uses in blocking mode (compat's
 * spawn_fds.c; see iof__compat_child_fds). */
void iof__compat_child_fds(bool inheritable_only, bool pipes_only,
                           const posix_spawn_file_actions_t *fa) IOF_HOOK_WEAK;

static void child_fds(bool inheritable_only, bool pipes_only,
                      const posix_spawn_file_actions_t *fa) {
  if (iof__compat_child_fds && runtime_ready)
    iof__compat_child_fds(inheritable_only, pipes_only, fa);
}

/* The runtime's bracket is open on this thread, and not for a signal
 * handler that interrupted it. */
static bool runtime_scope(void) {
  return !in_handler && iof__rt_fd_scope();
}

/* ---- descriptors libev makes --------------------------------------------
 * Inside the runtime's bracket (a loop being made, a signal watched) the
 * new fd goes high and is listed; elsewhere these are libc's. */

IOF_HOOK_API int epoll_create(int size) {
  count(H_epoll_create, C_PLAIN);
  int fd = REAL(epoll_create)(size);
  return runtime_scope() ? iof__rt_fd_adopt(fd) : fd;
}

IOF_HOOK_API int epoll_create1(int flags) {
  count(H_epoll_create1, C_PLAIN);
  int fd = REAL(epoll_create1)(flags);
  return runtime_scope() ? iof__rt_fd_adopt(fd) : fd;
}

IOF_HOOK_API int eventfd(unsigned int initval, int flags) {
  count(H_eventfd, C_PLAIN);
  int fd = REAL(eventfd)(initval, flags);
  return runtime_scope() ? iof__rt_fd_adopt(fd) : fd;
}

IOF_HOOK_API int signalfd(int fd, const sigset_t *mask, int flags) {
  count(H_signalfd, C_PLAIN);
  int r = REAL(signalfd)(fd, mask, flags);
  return fd == -1 && runtime_scope() ? iof__rt_fd_adopt(r) : r;
}

IOF_HOOK_API int timerfd_create(int clockid, int flags) {
  count(H_timerfd_create, C_PLAIN);
  int fd = REAL(timerfd_create)(clockid, flags);
  return runtime_scope() ? iof__rt_fd_adopt(fd) : fd;
}

void iof__fd_range_reset(unsigned first, unsigned last);

/* close_range over [first, last] minus the runtime's fds: one call per
 * stretch between them, compat's records of a stretch reset first (as
 * close does: their waiters end with EBADF, and a number reused later is
 * seen as another file). The kernel's error as is (a program that calls
 * close_range handles ENOSYS or EPERM itself). */
static int close_stretch(int (*real)(unsigned, unsigned, int), unsigned lo,
                         unsigned hi, int flags) {
  if (!(flags & CLOSE_RANGE_CLOEXEC) && runtime_ready && !in_handler)
    iof__fd_range_reset(lo, hi);
  return real(lo, hi, flags);
}

static int close_stretches(unsigned first, unsigned last, int flags) {
  int (*real)(unsigned, unsigned, int) = REAL(close_range);
  if (!real) { /* glibc before 2.34 */
    errno = ENOSYS;
    return -1;
  }
  unsigned lo = first;
  for (;;) {
    int rt = lo > (unsigned)INT32_MAX ? -1 : iof__rt_fd_next((int)lo);
    bool past = rt < 0 || (unsigned)rt > last;
    unsigned hi = past ? last : (unsigned)rt - 1;
    if ((past || (unsigned)rt != lo) && close_stretch(real, lo, hi, flags) != 0)
      return -1;
    if (past || (unsigned)rt == last) return 0;
    lo = (unsigned)rt + 1;
  }
}

IOF_HOOK_API int close_range(unsigned first, unsigned last, int flags) {
  count(H_close_range, C_PLAIN);
  if (first > last) {
    errno = EINVAL;
    return -1;
  }
  return close_stretches(first, last, flags);
}

static void close_unlisted_from(int fd, void *low) {
  if (fd < *(int *)low || iof__rt_fd_owned(fd)) return;
  if (runtime_ready && !in_handler) iof__fd_range_reset(fd, fd);
  REAL(close)(fd);
}

/* closefrom cannot fail: without close_range (an old kernel, a seccomp
 * filter) it closes what /proc/self/fd lists, as glibc's does. */
IOF_HOOK_API void closefrom(int lowfd) {
  count(H_closefrom, C_PLAIN);
  int e = errno;
  if (lowfd < 0) lowfd = 0;
  if (close_stretches((unsigned)lowfd, ~0U, 0) != 0)
    for (int pass = 0; pass < 2; pass++) /* the listing moves as we close */
      each_open_fd(close_unlisted_from, &lowfd);
  errno = e;
}

/* The child side of a fork from a fiber: everything passes through. */
static void child_steps_aside(void) {
  /* compat's fork handler has put the standard streams back in blocking
   * mode for what the child execs, and does so again when the child dup2s
   * an fd onto one (a CGI's pipes). Every other fd stays as it is: the
   * open file is shared, and a blocking mode would make the parent's
   * fibers block their thread on it (a forking server's listening socket,
   * Python multiprocessing's pipes); the child's own reads and writes on
   * them still block, through compat (see DEF_IO). */
  stepped_aside = 1;
}

/* syscall() is compat's (futex waits of fibers, and wakes that must
 * reach them; a fork-like clone). A process made by a raw clone system
 * call without CLONE_VM (vsftpd's sessions) runs no fork handlers: compat
 * tells its child, and the hook steps aside there as after fork. Six
 * arguments are read whatever the call takes, as glibc's own syscall()
 * passes six registers (the sixth from the caller's stack: unchecked by
 * ASan, which could see a redzone there). */
__attribute__((no_sanitize_address)) IOF_HOOK_API long syscall(long n, ...) {
  va_list ap;
  va_start(ap, n);
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
  va_end(ap);
  if (!iof_compat_syscall || !runtime_ready || stepped_aside) {
    count(H_syscall, C_PLAIN);
    return REAL(syscall)(n, a[0], a[1], a[2], a[3], a[4], a[5]);
  }
  /* clone3's flags sit behind a pointer: passed through (see compat). */
  bool forklike = n == SYS_clone &&
                  !((unsigned long)a[0] & (CLONE_VM | CLONE_THREAD)) &&
                  iof__hook_in_fiber();
  count(H_syscall, iof__hook_in_fiber() ? C_FIBER : C_PLAIN);
  long r = iof_compat_syscall(n, a[0], a[1], a[2], a[3], a[4], a[5]);
  if (forklike && r == 0) child_steps_aside();
  return r;
}

IOF_HOOK_API pid_t fork(void) {
  if (!iof__hook_in_fiber()) {
    count(H_fork, C_PLAIN);
    return REAL(fork)();
  }
  count(H_fork, C_FIBER);
  pid_t p = iof_compat_fork ? iof_compat_fork() : REAL(fork)();
  if (p == 0) child_steps_aside();
  return p;
}

/* A child forked from a fiber that execs: the new program inherits every
 * fd without close-on-exec, and with it the runtime's non-blocking mode
 * (fork gave back only 0-2). The pipes among them go back to blocking mode
 * first: a pipe passed to a program (Python multiprocessing's spawn, a
 * jobserver) is that program's to read. Sockets keep the mode: a server's
 * listening socket inherited by a CGI is still the parent's fibers' to
 * accept on, and a blocking one would stop them all. */
static void before_exec(void) {
  if (stepped_aside) child_fds(true, true, NULL);
}

/* A program started from a fiber thread inherits that thread's signal
 * mask, not the OS thread's (see compat's sigmask.c): the OS thread wears
 * it for the call. */
void iof__compat_child_mask(int step) IOF_HOOK_WEAK;

static void child_mask(int step) {
  if (iof__compat_child_mask && runtime_ready && iof__hook_in_fiber())
    iof__compat_child_mask(step);
}

/* Runs call (an exec, or a spawn) with the child's mask; errno kept. */
#define WITH_CHILD_MASK(type, call)                                            \
  do {                                                                         \
    child_mask(1);                                                             \
    type r_ = call;                                                            \
    int e_ = errno;                                                            \
    child_mask(0);                                                             \
    errno = e_;                                                                \
    return r_;                                                                 \
  } while (0)

IOF_HOOK_API int execve(const char *path, char *const argv[],
                        char *const envp[]) {
  count(H_execve, C_PLAIN);
  before_exec();
  WITH_CHILD_MASK(int, REAL(execve)(path, argv, envp));
}

IOF_HOOK_API int execv(const char *path, char *const argv[]) {
  count(H_execv, C_PLAIN);
  before_exec();
  WITH_CHILD_MASK(int, REAL(execv)(path, argv));
}

IOF_HOOK_API int execvp(const char *file, char *const argv[]) {
  count(H_execvp, C_PLAIN);
  before_exec();
  WITH_CHILD_MASK(int, REAL(execvp)(file, argv));
}

IOF_HOOK_API int execvpe(const char *file, char *const argv[],
                         char *const envp[]) {
  count(H_execvpe, C_PLAIN);
  before_exec();
  WITH_CHILD_MASK(int, REAL(execvpe)(file, argv, envp));
}

IOF_HOOK_API int fexecve(int fd, char *const argv[], char *const envp[]) {
  count(H_fexecve, C_PLAIN);
  before_exec();
  WITH_CHILD_MASK(int, REAL(fexecve)(fd, argv, envp));
}

/* The list forms: the arguments up to the NULL, counted first (the call
 * may run on a fiber's small stack: the array takes what it needs). */
static size_t count_args(const char *arg0, va_list ap) {
  size_t n = 1;
  for (const char *a = arg0; a; a = va_arg(ap, const char *)) n++;
  return n; /* with the NULL */
}

enum { EXEC_PATH, EXEC_SEARCH, EXEC_PATH_ENV };

/* execl, execlp, execle: the list (then execle's envp) as an array. */
static int exec_list(int how, const char *target, const char *arg, va_list ap) {
  va_list counting;
  va_copy(counting, ap);
  size_t n = count_args(arg, counting);
  va_end(counting);
  const char *argv[n];
  size_t i = 0;
  for (const char *a = arg; a; a = va_arg(ap, const char *)) argv[i++] = a;
  argv[i] = NULL;
  char *const *envp =
      how == EXEC_PATH_ENV ? va_arg(ap, char *const *) : environ;
  before_exec();
  if (how == EXEC_SEARCH)
    WITH_CHILD_MASK(int, REAL(execvp)(target, (char *const *)argv));
  WITH_CHILD_MASK(int, REAL(execve)(target, (char *const *)argv, envp));
}

#define DEF_EXEC_LIST(name, how, first)                                        \
  IOF_HOOK_API int name(const char *first, const char *arg, ...) {             \
    count(H_##name, C_PLAIN);                                                  \
    va_list ap;                                                                \
    va_start(ap, arg);                                                         \
    int r = exec_list(how, first, arg, ap);                                    \
    va_end(ap);                                                                \
    return r;                                                                  \
  }

DEF_EXEC_LIST(execl, EXEC_PATH, path)
DEF_EXEC_LIST(execlp, EXEC_SEARCH, file)
DEF_EXEC_LIST(execle, EXEC_PATH_ENV, path)

/* glibc starts these children with clone + exec and runs none of our code
 * in between: the fds are put back in blocking mode beforehand. system and
 * popen's children inherit only fds without close-on-exec; posix_spawn's
 * file actions may dup any fd into the child, so all are. */
int iof_compat_system(const char *cmd) IOF_HOOK_WEAK;
FILE *iof_compat_popen(const char *cmd, const char *mode) IOF_HOOK_WEAK;
int iof_compat_pclose(FILE *fp) IOF_HOOK_WEAK;
int iof_compat_posix_spawn(pid_t *pid, const char *path,
                           const posix_spawn_file_actions_t *fa,
                           const posix_spawnattr_t *at, char *const argv[],
                           char *const envp[]) IOF_HOOK_WEAK;
int iof_compat_posix_spawnp(pid_t *pid, const char *file,
                            const posix_spawn_file_actions_t *fa,
                            const posix_spawnattr_t *at, char *const argv[],
                            char *const envp[]) IOF_HOOK_WEAK;

IOF_HOOK_API int system(const char *cmd) {
  bool in_fiber = iof__hook_in_fiber();
  count(H_system,
        in_fiber ? (iof_compat_system ? C_FIBER : C_BLOCKED) : C_PLAIN);
  if (in_fiber && iof_compat_system) return iof_compat_system(cmd);
  if (cmd) child_fds(true, false, NULL);
  return REAL(system)(cmd);
}

IOF_HOOK_API FILE *popen(const char *cmd, const char *mode) {
  bool in_fiber = iof__hook_in_fiber();
  count(H_popen, in_fiber ? (iof_compat_popen ? C_FIBER : C_BLOCKED) : C_PLAIN);
  if (in_fiber && iof_compat_popen) return iof_compat_popen(cmd, mode);
  child_fds(true, false, NULL);
  WITH_CHILD_MASK(FILE *, REAL(popen)(cmd, mode));
}

/* compat knows its own popen streams and gives it the others. */
IOF_HOOK_API int pclose(FILE *fp) {
  bool in_fiber = iof__hook_in_fiber();
  count(H_pclose, in_fiber ? C_FIBER : C_PLAIN);
  if (iof_compat_pclose && runtime_ready) return iof_compat_pclose(fp);
  return REAL(pclose)(fp);
}

IOF_HOOK_API int posix_spawn(pid_t *pid, const char *path,
                             const posix_spawn_file_actions_t *fa,
                             const posix_spawnattr_t *at, char *const argv[],
                             char *const envp[]) {
  count(H_posix_spawn, iof__hook_in_fiber() ? C_FIBER : C_PLAIN);
  if (iof_compat_posix_spawn && iof__hook_in_fiber())
    return iof_compat_posix_spawn(pid, path, fa, at, argv, envp);
  child_fds(true, false, fa);
  return REAL(posix_spawn)(pid, path, fa, at, argv, envp);
}

IOF_HOOK_API int posix_spawnp(pid_t *pid, const char *file,
                              const posix_spawn_file_actions_t *fa,
                              const posix_spawnattr_t *at, char *const argv[],
                              char *const envp[]) {
  count(H_posix_spawnp, iof__hook_in_fiber() ? C_FIBER : C_PLAIN);
  if (iof_compat_posix_spawnp && iof__hook_in_fiber())
    return iof_compat_posix_spawnp(pid, file, fa, at, argv, envp);
  child_fds(true, false, fa);
  return REAL(posix_spawnp)(pid, file, fa, at, argv, envp);
}

/* vfork's child borrows the parent's memory and stack: anything it calls
 * through us (close, dup2 before exec) would edit the parent's fd records
 * and wake the parent's fibers. A fork is a valid vfork, and goes through
 * the stepping aside above. */
IOF_HOOK_API pid_t vfork(void) {
  return fork();
}

/* ---- stdio reads on stdin, and the variadic scanf family --------------- */

/* Each goes through the STDIO interposer it amounts to. */
IOF_HOOK_API int getchar(void) {
  count(H_getchar, C_PLAIN);
  return getc(stdin);
}

IOF_HOOK_API int getchar_unlocked(void) {
  count(H_getchar_unlocked, C_PLAIN);
  return getc_unlocked(stdin);
}

/* <stdio.h> names C99 programs' scanf family __isoc99_* (and redirects
 * ours there too); the plain names are C89 programs' (%a allocates), so
 * those are defined under their own symbol names. */
typedef int vfscanf_fn(FILE *, const char *, va_list);
IOF_HOOK_API int gnu_vfscanf(FILE *fp, const char *f,
                             va_list ap) __asm__("vfscanf");
IOF_HOOK_API int gnu_vfscanf(FILE *fp, const char *f, va_list ap) {
  if (stdio_wait(fp, H_vfscanf) < 0) return EOF;
  return ((vfscanf_fn *)real_sym(H_vfscanf))(fp, f, ap);
}

IOF_HOOK_API int gnu_vscanf(const char *f, va_list ap) __asm__("vscanf");
IOF_HOOK_API int gnu_vscanf(const char *f, va_list ap) {
  count(H_vscanf, C_PLAIN);
  return gnu_vfscanf(stdin, f, ap);
}

IOF_HOOK_API int __isoc99_vscanf(const char *f, va_list ap) {
  count(H___isoc99_vscanf, C_PLAIN);
  return __isoc99_vfscanf(stdin, f, ap);
}

#define SCANF_VIA(call, v, fp, f)                                              \
  do {                                                                         \
    count(H_##call, C_PLAIN);                                                  \
    va_list ap;                                                                \
    va_start(ap, f);                                                           \
    int r = v(fp, f, ap);                                                      \
    va_end(ap);                                                                \
    return r;                                                                  \
  } while (0)

IOF_HOOK_API int gnu_fscanf(FILE *fp, const char *f, ...) __asm__("fscanf");
IOF_HOOK_API int gnu_fscanf(FILE *fp, const char *f, ...) {
  SCANF_VIA(fscanf, gnu_vfscanf, fp, f);
}

IOF_HOOK_API int __isoc99_fscanf(FILE *fp, const char *f, ...) {
  SCANF_VIA(__isoc99_fscanf, __isoc99_vfscanf, fp, f);
}

IOF_HOOK_API int gnu_scanf(const char *f, ...) __asm__("scanf");
IOF_HOOK_API int gnu_scanf(const char *f, ...) {
  SCANF_VIA(scanf, gnu_vfscanf, stdin, f);
}

IOF_HOOK_API int __isoc99_scanf(const char *f, ...) {
  SCANF_VIA(__isoc99_scanf, __isoc99_vfscanf, stdin, f);
}

/* ---- glibc's fortified entry points ----------------------------------- */

/* -D_FORTIFY_SOURCE programs call these instead of read/recv/... */
extern void __chk_fail(void) __attribute__((noreturn));

IOF_HOOK_API ssize_t __read_chk(int fd, void *b, size_t n, size_t blen) {
  if (n > blen) __chk_fail();
  return read(fd, b, n);
}

IOF_HOOK_API ssize_t __recv_chk(int fd, void *b, size_t n, size_t blen,
                                int fl) {
  if (n > blen) __chk_fail();
  return recv(fd, b, n, fl);
}

IOF_HOOK_API ssize_t __recvfrom_chk(int fd, void *b, size_t n, size_t blen,
                                    int fl, struct sockaddr *a, socklen_t *l) {
  if (n > blen) __chk_fail();
  return recvfrom(fd, b, n, fl, a, l);
}

IOF_HOOK_API int __poll_chk(struct pollfd *p, nfds_t n, int t, size_t plen) {
  if (plen / sizeof *p < n) __chk_fail();
  return poll(p, n, t);
}

IOF_HOOK_API int __ppoll_chk(struct pollfd *p, nfds_t n,
                             const struct timespec *t, const sigset_t *s,
                             size_t plen) {
  if (plen / sizeof *p < n) __chk_fail();
  return ppoll(p, n, t, s);
}

/* ---- signal handlers --------------------------------------------------- */

/* compat installs every handler behind a trampoline (compat/signal.c) that
 * reports the run (main's blocking call gets EINTR) and marks the thread
 * as in a handler for compat; `mark` keeps the hook's own count for its
 * routing. Before compat (a weak reference left NULL) the plain call. */
int iof_compat_sigaction(int sig, const struct sigaction *act,
                         struct sigaction *old) IOF_HOOK_WEAK;
sighandler_t iof_compat_signal(int sig, sighandler_t h) IOF_HOOK_WEAK;
void iof__compat_handler_marker(void (*mark)(int)) IOF_HOOK_WEAK;

static void mark(int delta) {
  in_handler += delta;
}

IOF_HOOK_API int sigaction(int sig, const struct sigaction *act,
                           struct sigaction *old) {
  count(H_sigaction, C_PLAIN);
  if (iof_compat_sigaction) return iof_compat_sigaction(sig, act, old);
  return REAL(sigaction)(sig, act, old);
}

IOF_HOOK_API sighandler_t signal(int sig, sighandler_t h) {
  count(H_signal, C_PLAIN);
  if (iof_compat_signal) return iof_compat_signal(sig, h);
  return REAL(signal)(sig, h);
}

/* ---- identity, report ------------------------------------------------- */

IOF_HOOK_API const char *iof_hook_version(void) {
  return IOF_HOOK_VERSION_STRING;
}

static void report(void) {
  char line[160];
  int n =
      snprintf(line, sizeof line, "iofiber-hook[%d]: %-24s %12s %12s %12s\n",
               (int)getpid(), "call", "fiber", "blocked", "outside");
  REAL(write)(2, line, (size_t)n);
  for (int i = 0; i < H_COUNT; i++) {
    unsigned long c[C_KINDS];
    unsigned long any = 0;
    for (int k = 0; k < C_KINDS; k++) {
      c[k] = atomic_load_explicit(&counts[i][k], memory_order_relaxed);
      any |= c[k];
    }
    if (!any) continue;
    n = snprintf(line, sizeof line,
                 "iofiber-hook[%d]: %-24s %12lu %12lu %12lu\n", (int)getpid(),
                 names[i], c[C_FIBER], c[C_BLOCKED], c[C_PLAIN]);
    REAL(write)(2, line, (size_t)n);
  }
}

__attribute__((destructor)) static void hook_fini(void) {
  if (verbose && !stepped_aside) report();
}

int iof_hook_counts(const char *call, unsigned long out[3]) {
  if (!call || !out) return -EINVAL;
  for (int i = 0; i < H_COUNT; i++) {
    if (strcmp(names[i], call) != 0) continue;
    for (int k = 0; k < C_KINDS; k++)
      out[k] = atomic_load_explicit(&counts[i][k], memory_order_relaxed);
    return 0;
  }
  return -ENOENT;
}

__attribute__((constructor)) static void hook_init(void) {
  const char *v = getenv(IOF_HOOK_ENV_VERBOSE);
  verbose = v && *v && strcmp(v, "0") != 0;
  /* Resolve every pass-through now: a handler's first write must not be
   * the one that calls dlsym (not async-signal-safe). */
  for (int i = 0; i < H_COUNT; i++) (void)real_sym(i);
  if (iof__compat_handler_marker) iof__compat_handler_marker(mark);
  runtime_ready = true;
}
