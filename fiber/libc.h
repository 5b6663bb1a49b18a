/* libc's own entry points for every call the hook interposes. Not installed.
 *
 * compat/ implements "a POSIX call made from a fiber" on top of the real
 * call, and the runtime's own locks and syscalls must never reach the hook
 * (a fiber-aware pthread_mutex_lock inside the scheduler would suspend where
 * suspending is illegal). Both therefore call through this table.
 *
 * Without the hook the table holds the ordinary symbols (so sanitizer
 * interceptors still see every call); when libiofiber-hook is in the
 * process (it exports iof_hook_version) the table is filled from libc.so.6
 * itself, past any interposer. */
#ifndef IOF_FIBER_LIBC_H
#define IOF_FIBER_LIBC_H

#include <dlfcn.h>
#include <mqueue.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <spawn.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/msg.h>
#include <sys/select.h>
#include <sys/sem.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fiber/fiber_internal.h"

/* X(return type, name, (parameters)): one row per interposed call. */
#define IOF__LIBC_CALLS(X)                                                     \
  X(int, socket, (int, int, int))                                              \
  X(int, socketpair, (int, int, int, int[2]))                                  \
  X(int, pipe, (int[2]))                                                       \
  X(int, pipe2, (int[2], int))                                                 \
  X(int, accept, (int, struct sockaddr *, socklen_t *))                        \
  X(int, accept4, (int, struct sockaddr *, socklen_t *, int))                  \
  X(int, connect, (int, const struct sockaddr *, socklen_t))                   \
  X(ssize_t, read, (int, void *, size_t))                                      \
  X(ssize_t, write, (int, const void *, size_t))                               \
  X(ssize_t, readv, (int, const struct iovec *, int))                          \
  X(ssize_t, writev, (int, const struct iovec *, int))                         \
  X(ssize_t, recv, (int, void *, size_t, int))                                 \
  X(ssize_t, send, (int, const void *, size_t, int))                           \
  X(ssize_t, recvfrom,                                                         \
    (int, void *, size_t, int, struct sockaddr *, socklen_t *))                \
  X(ssize_t, sendto,                                                           \
    (int, const void *, size_t, int, const struct sockaddr *, socklen_t))      \
  X(ssize_t, recvmsg, (int, struct msghdr *, int))                             \
  X(ssize_t, sendmsg, (int, const struct msghdr *, int))                       \
  X(int, recvmmsg,                                                             \
    (int, struct mmsghdr *, unsigned int, int, struct timespec *))             \
  X(int, sendmmsg, (int, struct mmsghdr *, unsigned int, int))                 \
  X(ssize_t, sendfile, (int, int, off_t *, size_t))                            \
  X(ssize_t, splice, (int, loff_t *, int, loff_t *, size_t, unsigned int))     \
  X(ssize_t, tee, (int, int, size_t, unsigned int))                            \
  X(ssize_t, vmsplice, (int, const struct iovec *, size_t, unsigned int))      \
  X(int, poll, (struct pollfd *, nfds_t, int))                                 \
  X(int, ppoll,                                                                \
    (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *))      \
  X(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *))        \
  X(int, pselect,                                                              \
    (int, fd_set *, fd_set *, fd_set *, const struct timespec *,               \
     const sigset_t *))                                                        \
  X(int, epoll_wait, (int, struct epoll_event *, int, int))                    \
  X(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *)) \
  X(int, epoll_pwait2,                                                         \
    (int, struct epoll_event *, int, const struct timespec *,                  \
     const sigset_t *))                                                        \
  X(unsigned, sleep, (unsigned))                                               \
  X(int, usleep, (useconds_t))                                                 \
  X(int, nanosleep, (const struct timespec *, struct timespec *))              \
  X(int, clock_nanosleep,                                                      \
    (clockid_t, int, const struct timespec *, struct timespec *))              \
  X(int, close, (int))                                                         \
  X(FILE *, fdopen, (int, const char *))                                       \
  X(char *, fgets, (char *, int, FILE *))                                      \
  X(ssize_t, getline, (char **, size_t *, FILE *))                             \
  X(ssize_t, getdelim, (char **, size_t *, int, FILE *))                       \
  X(int, fgetc, (FILE *))                                                      \
  X(int, getc, (FILE *))                                                       \
  X(size_t, fread, (void *, size_t, size_t, FILE *))                           \
  X(int, dup, (int))                                                           \
  X(int, dup2, (int, int))                                                     \
  X(int, dup3, (int, int, int))                                                \
  X(int, fcntl, (int, int, ...))                                               \
  X(int, ioctl, (int, unsigned long, ...))                                     \
  X(int, flock, (int, int))                                                    \
  X(int, lockf, (int, int, off_t))                                             \
  X(int, setsockopt, (int, int, int, const void *, socklen_t))                 \
  X(int, getsockopt, (int, int, int, void *, socklen_t *))                     \
  X(int, shutdown, (int, int))                                                 \
  X(int, listen, (int, int))                                                   \
  X(int, getaddrinfo,                                                          \
    (const char *, const char *, const struct addrinfo *, struct addrinfo **)) \
  X(void, freeaddrinfo, (struct addrinfo *))                                   \
  X(struct hostent *, gethostbyname, (const char *))                           \
  X(int, gethostbyname_r,                                                      \
    (const char *, struct hostent *, char *, size_t, struct hostent **,        \
     int *))                                                                   \
  X(struct hostent *, gethostbyaddr, (const void *, socklen_t, int))           \
  X(int, gethostbyaddr_r,                                                      \
    (const void *, socklen_t, int, struct hostent *, char *, size_t,           \
     struct hostent **, int *))                                                \
  X(int, getnameinfo,                                                          \
    (const struct sockaddr *, socklen_t, char *, socklen_t, char *, socklen_t, \
     int))                                                                     \
  X(ssize_t, mq_receive, (mqd_t, char *, size_t, unsigned *))                  \
  X(ssize_t, mq_timedreceive,                                                  \
    (mqd_t, char *, size_t, unsigned *, const struct timespec *))              \
  X(int, mq_send, (mqd_t, const char *, size_t, unsigned))                     \
  X(int, mq_timedsend,                                                         \
    (mqd_t, const char *, size_t, unsigned, const struct timespec *))          \
  X(int, semtimedop, (int, struct sembuf *, size_t, const struct timespec *))  \
  X(int, semop, (int, struct sembuf *, size_t))                                \
  X(int, msgsnd, (int, const void *, size_t, int))                             \
  X(ssize_t, msgrcv, (int, void *, size_t, long, int))                         \
  X(int, sched_yield, (void))                                                  \
  X(long, syscall, (long, ...))                                                \
  X(int, pause, (void))                                                        \
  X(int, system, (const char *))                                               \
  X(FILE *, popen, (const char *, const char *))                               \
  X(int, pclose, (FILE *))                                                     \
  X(pid_t, waitpid, (pid_t, int *, int))                                       \
  X(pid_t, wait, (int *))                                                      \
  X(pid_t, wait4, (pid_t, int *, int, struct rusage *))                        \
  X(pid_t, wait3, (int *, int, struct rusage *))                               \
  X(int, waitid, (idtype_t, id_t, siginfo_t *, int))                           \
  X(int, sigaction, (int, const struct sigaction *, struct sigaction *))       \
  X(int, pthread_sigmask, (int, const sigset_t *, sigset_t *))                 \
  X(int, sigprocmask, (int, const sigset_t *, sigset_t *))                     \
  X(int, sigsuspend, (const sigset_t *))                                       \
  X(int, sigwait, (const sigset_t *, int *))                                   \
  X(int, sigwaitinfo, (const sigset_t *, siginfo_t *))                         \
  X(int, sigtimedwait,                                                         \
    (const sigset_t *, siginfo_t *, const struct timespec *))                  \
  X(pid_t, fork, (void))                                                       \
  X(int, posix_spawn,                                                          \
    (pid_t *, const char *, const posix_spawn_file_actions_t *,                \
     const posix_spawnattr_t *, char *const[], char *const[]))                 \
  X(int, posix_spawnp,                                                         \
    (pid_t *, const char *, const posix_spawn_file_actions_t *,                \
     const posix_spawnattr_t *, char *const[], char *const[]))                 \
  X(int, pthread_create,                                                       \
    (pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))          \
  X(int, pthread_join, (pthread_t, void **))                                   \
  X(int, pthread_detach, (pthread_t))                                          \
  X(pthread_t, pthread_self, (void))                                           \
  X(int, pthread_equal, (pthread_t, pthread_t))                                \
  X(void, pthread_exit, (void *))                                              \
  X(int, pthread_setcancelstate, (int, int *))                                 \
  X(int, pthread_setcanceltype, (int, int *))                                  \
  X(void, pthread_testcancel, (void))                                          \
  X(void, __pthread_register_cancel, (__pthread_unwind_buf_t *))               \
  X(void, __pthread_unregister_cancel, (__pthread_unwind_buf_t *))             \
  X(void, __pthread_unwind_next, (__pthread_unwind_buf_t *))                   \
  X(int, pthread_once, (pthread_once_t *, void (*)(void)))                     \
  X(int, pthread_mutex_init, (pthread_mutex_t *, const pthread_mutexattr_t *)) \
  X(int, pthread_mutex_destroy, (pthread_mutex_t *))                           \
  X(int, pthread_mutex_lock, (pthread_mutex_t *))                              \
  X(int, pthread_mutex_trylock, (pthread_mutex_t *))                           \
  X(int, pthread_mutex_timedlock,                                              \
    (pthread_mutex_t *, const struct timespec *))                              \
  X(int, pthread_mutex_unlock, (pthread_mutex_t *))                            \
  X(int, pthread_cond_init, (pthread_cond_t *, const pthread_condattr_t *))    \
  X(int, pthread_cond_destroy, (pthread_cond_t *))                             \
  X(int, pthread_cond_wait, (pthread_cond_t *, pthread_mutex_t *))             \
  X(int, pthread_cond_timedwait,                                               \
    (pthread_cond_t *, pthread_mutex_t *, const struct timespec *))            \
  X(int, pthread_cond_signal, (pthread_cond_t *))                              \
  X(int, pthread_cond_broadcast, (pthread_cond_t *))                           \
  X(int, pthread_rwlock_init,                                                  \
    (pthread_rwlock_t *, const pthread_rwlockattr_t *))                        \
  X(int, pthread_rwlock_destroy, (pthread_rwlock_t *))                         \
  X(int, pthread_rwlock_rdlock, (pthread_rwlock_t *))                          \
  X(int, pthread_rwlock_tryrdlock, (pthread_rwlock_t *))                       \
  X(int, pthread_rwlock_timedrdlock,                                           \
    (pthread_rwlock_t *, const struct timespec *))                             \
  X(int, pthread_rwlock_wrlock, (pthread_rwlock_t *))                          \
  X(int, pthread_rwlock_trywrlock, (pthread_rwlock_t *))                       \
  X(int, pthread_rwlock_timedwrlock,                                           \
    (pthread_rwlock_t *, const struct timespec *))                             \
  X(int, pthread_rwlock_unlock, (pthread_rwlock_t *))                          \
  X(int, pthread_barrier_init,                                                 \
    (pthread_barrier_t *, const pthread_barrierattr_t *, unsigned))            \
  X(int, pthread_barrier_destroy, (pthread_barrier_t *))                       \
  X(int, pthread_barrier_wait, (pthread_barrier_t *))                          \
  X(int, dlclose, (void *))                                                    \
  X(int, pthread_key_create, (pthread_key_t *, void (*)(void *)))              \
  X(int, pthread_key_delete, (pthread_key_t))                                  \
  X(void *, pthread_getspecific, (pthread_key_t))                              \
  X(int, pthread_setspecific, (pthread_key_t, const void *))                   \
  X(int, sem_init, (sem_t *, int, unsigned))                                   \
  X(int, sem_destroy, (sem_t *))                                               \
  X(int, sem_wait, (sem_t *))                                                  \
  X(int, sem_trywait, (sem_t *))                                               \
  X(int, sem_timedwait, (sem_t *, const struct timespec *))                    \
  X(int, sem_post, (sem_t *))                                                  \
  X(int, sem_getvalue, (sem_t *, int *))

#define IOF__LIBC_FIELD(ret, name, params) ret(*name) params;
typedef struct iof__libc_fns {
  IOF__LIBC_CALLS(IOF__LIBC_FIELD)
} iof__libc_fns;
#undef IOF__LIBC_FIELD

/* Filled before main by a constructor (iof__libc_init is idempotent and may
 * be called earlier). Call as iof__libc.read(fd, buf, n). */
IOF_HIDDEN extern iof__libc_fns iof__libc;

/* Fills the table; safe to call more than once and from any thread. */
IOF_HIDDEN void iof__libc_init(void);

/* True when libiofiber-hook is in the process (the table then bypasses it). */
IOF_HIDDEN bool iof__libc_hooked(void);

#endif
