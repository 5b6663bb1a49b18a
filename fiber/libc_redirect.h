/* Forced-included (-include) into every runtime source of fiber/, sched/
 * and io/ (not compat/, which names iof__libc itself, nor fiber/libc.c).
 * Not installed.
 *
 * The runtime's own locks and syscalls must never reach libiofiber-hook's
 * interposers: a fiber-aware pthread_mutex_lock inside the scheduler would
 * suspend where suspending is illegal. Every call listed in IOF__LIBC_CALLS
 * is therefore rewritten to go through the iof__libc table, which holds the
 * ordinary symbols without the hook and libc.so.6's own with it.
 *
 * The system headers come first so their declarations (and glibc's
 * fortify wrappers) are seen under the real names; the macros are
 * function-like, so a member named like a call (s->vtbl->close) must be
 * written (s->vtbl->close)(s) to stay a member call. */
#ifndef IOF_FIBER_LIBC_REDIRECT_H
#define IOF_FIBER_LIBC_REDIRECT_H

#include <fcntl.h>
#include <sys/ioctl.h>

#include "fiber/libc.h"

/* One macro per row; spelled out because a macro cannot define macros. */
#define socket(...) iof__libc.socket(__VA_ARGS__)
#define socketpair(...) iof__libc.socketpair(__VA_ARGS__)
#define pipe(...) iof__libc.pipe(__VA_ARGS__)
#define pipe2(...) iof__libc.pipe2(__VA_ARGS__)
#define accept(...) iof__libc.accept(__VA_ARGS__)
#define accept4(...) iof__libc.accept4(__VA_ARGS__)
#define connect(...) iof__libc.connect(__VA_ARGS__)
#define read(...) iof__libc.read(__VA_ARGS__)
#define write(...) iof__libc.write(__VA_ARGS__)
#define readv(...) iof__libc.readv(__VA_ARGS__)
#define writev(...) iof__libc.writev(__VA_ARGS__)
#define recv(...) iof__libc.recv(__VA_ARGS__)
#define send(...) iof__libc.send(__VA_ARGS__)
#define recvfrom(...) iof__libc.recvfrom(__VA_ARGS__)
#define sendto(...) iof__libc.sendto(__VA_ARGS__)
#define recvmsg(...) iof__libc.recvmsg(__VA_ARGS__)
#define sendmsg(...) iof__libc.sendmsg(__VA_ARGS__)
#define recvmmsg(...) iof__libc.recvmmsg(__VA_ARGS__)
#define sendmmsg(...) iof__libc.sendmmsg(__VA_ARGS__)
#define sendfile(...) iof__libc.sendfile(__VA_ARGS__)
#define splice(...) iof__libc.splice(__VA_ARGS__)
#define tee(...) iof__libc.tee(__VA_ARGS__)
#define vmsplice(...) iof__libc.vmsplice(__VA_ARGS__)
#define poll(...) iof__libc.poll(__VA_ARGS__)
#define ppoll(...) iof__libc.ppoll(__VA_ARGS__)
#define select(...) iof__libc.select(__VA_ARGS__)
#define pselect(...) iof__libc.pselect(__VA_ARGS__)
#define epoll_wait(...) iof__libc.epoll_wait(__VA_ARGS__)
#define epoll_pwait(...) iof__libc.epoll_pwait(__VA_ARGS__)
#define epoll_pwait2(...) iof__libc.epoll_pwait2(__VA_ARGS__)
#define sleep(...) iof__libc.sleep(__VA_ARGS__)
#define usleep(...) iof__libc.usleep(__VA_ARGS__)
#define nanosleep(...) iof__libc.nanosleep(__VA_ARGS__)
#define clock_nanosleep(...) iof__libc.clock_nanosleep(__VA_ARGS__)
#define close(...) iof__libc.close(__VA_ARGS__)
#define fdopen(...) iof__libc.fdopen(__VA_ARGS__)
#define fgets(...) iof__libc.fgets(__VA_ARGS__)
#define getline(...) iof__libc.getline(__VA_ARGS__)
#define getdelim(...) iof__libc.getdelim(__VA_ARGS__)
#define fgetc(...) iof__libc.fgetc(__VA_ARGS__)
#define getc(...) iof__libc.getc(__VA_ARGS__)
#define fread(...) iof__libc.fread(__VA_ARGS__)
#define dup(...) iof__libc.dup(__VA_ARGS__)
#define dup2(...) iof__libc.dup2(__VA_ARGS__)
#define dup3(...) iof__libc.dup3(__VA_ARGS__)
#define fcntl(...) iof__libc.fcntl(__VA_ARGS__)
#define ioctl(...) iof__libc.ioctl(__VA_ARGS__)
#define flock(...) iof__libc.flock(__VA_ARGS__)
#define lockf(...) iof__libc.lockf(__VA_ARGS__)
#define setsockopt(...) iof__libc.setsockopt(__VA_ARGS__)
#define getsockopt(...) iof__libc.getsockopt(__VA_ARGS__)
#define shutdown(...) iof__libc.shutdown(__VA_ARGS__)
#define listen(...) iof__libc.listen(__VA_ARGS__)
#define getaddrinfo(...) iof__libc.getaddrinfo(__VA_ARGS__)
#define freeaddrinfo(...) iof__libc.freeaddrinfo(__VA_ARGS__)
#define gethostbyname(...) iof__libc.gethostbyname(__VA_ARGS__)
#define gethostbyname_r(...) iof__libc.gethostbyname_r(__VA_ARGS__)
#define gethostbyaddr(...) iof__libc.gethostbyaddr(__VA_ARGS__)
#define gethostbyaddr_r(...) iof__libc.gethostbyaddr_r(__VA_ARGS__)
#define getnameinfo(...) iof__libc.getnameinfo(__VA_ARGS__)
#define mq_receive(...) iof__libc.mq_receive(__VA_ARGS__)
#define mq_timedreceive(...) iof__libc.mq_timedreceive(__VA_ARGS__)
#define mq_send(...) iof__libc.mq_send(__VA_ARGS__)
#define mq_timedsend(...) iof__libc.mq_timedsend(__VA_ARGS__)
#define semtimedop(...) iof__libc.semtimedop(__VA_ARGS__)
#define semop(...) iof__libc.semop(__VA_ARGS__)
#define msgsnd(...) iof__libc.msgsnd(__VA_ARGS__)
#define msgrcv(...) iof__libc.msgrcv(__VA_ARGS__)
#define sched_yield(...) iof__libc.sched_yield(__VA_ARGS__)
#define syscall(...) iof__libc.syscall(__VA_ARGS__)
#define pause(...) iof__libc.pause(__VA_ARGS__)
#define system(...) iof__libc.system(__VA_ARGS__)
#define popen(...) iof__libc.popen(__VA_ARGS__)
#define pclose(...) iof__libc.pclose(__VA_ARGS__)
#define waitpid(...) iof__libc.waitpid(__VA_ARGS__)
#define wait(...) iof__libc.wait(__VA_ARGS__)
#define wait4(...) iof__libc.wait4(__VA_ARGS__)
#define wait3(...) iof__libc.wait3(__VA_ARGS__)
#define waitid(...) iof__libc.waitid(__VA_ARGS__)
#define sigaction(...) iof__libc.sigaction(__VA_ARGS__)
#define pthread_sigmask(...) iof__libc.pthread_sigmask(__VA_ARGS__)
#define sigprocmask(...) iof__libc.sigprocmask(__VA_ARGS__)
#define sigsuspend(...) iof__libc.sigsuspend(__VA_ARGS__)
#define sigwait(...) iof__libc.sigwait(__VA_ARGS__)
#define sigwaitinfo(...) iof__libc.sigwaitinfo(__VA_ARGS__)
#define sigtimedwait(...) iof__libc.sigtimedwait(__VA_ARGS__)
#define fork(...) iof__libc.fork(__VA_ARGS__)
#define posix_spawn(...) iof__libc.posix_spawn(__VA_ARGS__)
#define posix_spawnp(...) iof__libc.posix_spawnp(__VA_ARGS__)
#define pthread_create(...) iof__libc.pthread_create(__VA_ARGS__)
#define pthread_join(...) iof__libc.pthread_join(__VA_ARGS__)
#define pthread_detach(...) iof__libc.pthread_detach(__VA_ARGS__)
#define pthread_self(...) iof__libc.pthread_self(__VA_ARGS__)
#define pthread_equal(...) iof__libc.pthread_equal(__VA_ARGS__)
#define pthread_exit(...) iof__libc.pthread_exit(__VA_ARGS__)
#define pthread_setcancelstate(...)                                            \
  iof__libc.pthread_setcancelstate(__VA_ARGS__)
#define pthread_setcanceltype(...) iof__libc.pthread_setcanceltype(__VA_ARGS__)
#define pthread_testcancel(...) iof__libc.pthread_testcancel(__VA_ARGS__)
#define __pthread_register_cancel(...)                                         \
  iof__libc.__pthread_register_cancel(__VA_ARGS__)
#define __pthread_unregister_cancel(...)                                       \
  iof__libc.__pthread_unregister_cancel(__VA_ARGS__)
#define __pthread_unwind_next(...) iof__libc.__pthread_unwind_next(__VA_ARGS__)
#define pthread_once(...) iof__libc.pthread_once(__VA_ARGS__)
#define pthread_mutex_init(...) iof__libc.pthread_mutex_init(__VA_ARGS__)
#define pthread_mutex_destroy(...) iof__libc.pthread_mutex_destroy(__VA_ARGS__)
#define pthread_mutex_lock(...) iof__libc.pthread_mutex_lock(__VA_ARGS__)
#define pthread_mutex_trylock(...) iof__libc.pthread_mutex_trylock(__VA_ARGS__)
#define pthread_mutex_timedlock(...)                                           \
  iof__libc.pthread_mutex_timedlock(__VA_ARGS__)
#define pthread_mutex_unlock(...) iof__libc.pthread_mutex_unlock(__VA_ARGS__)
#define pthread_cond_init(...) iof__libc.pthread_cond_init(__VA_ARGS__)
#define pthread_cond_destroy(...) iof__libc.pthread_cond_destroy(__VA_ARGS__)
#define pthread_cond_wait(...) iof__libc.pthread_cond_wait(__VA_ARGS__)
#define pthread_cond_timedwait(...)                                            \
  iof__libc.pthread_cond_timedwait(__VA_ARGS__)
#define pthread_cond_signal(...) iof__libc.pthread_cond_signal(__VA_ARGS__)
#define pthread_cond_broadcast(...)                                            \
  iof__libc.pthread_cond_broadcast(__VA_ARGS__)
#define pthread_rwlock_init(...) iof__libc.pthread_rwlock_init(__VA_ARGS__)
#define pthread_rwlock_destroy(...)                                            \
  iof__libc.pthread_rwlock_destroy(__VA_ARGS__)
#define pthread_rwlock_rdlock(...) iof__libc.pthread_rwlock_rdlock(__VA_ARGS__)
#define pthread_rwlock_tryrdlock(...)                                          \
  iof__libc.pthread_rwlock_tryrdlock(__VA_ARGS__)
#define pthread_rwlock_timedrdlock(...)                                        \
  iof__libc.pthread_rwlock_timedrdlock(__VA_ARGS__)
#define pthread_rwlock_wrlock(...) iof__libc.pthread_rwlock_wrlock(__VA_ARGS__)
#define pthread_rwlock_trywrlock(...)                                          \
  iof__libc.pthread_rwlock_trywrlock(__VA_ARGS__)
#define pthread_rwlock_timedwrlock(...)                                        \
  iof__libc.pthread_rwlock_timedwrlock(__VA_ARGS__)
#define pthread_rwlock_unlock(...) iof__libc.pthread_rwlock_unlock(__VA_ARGS__)
#define pthread_barrier_init(...) iof__libc.pthread_barrier_init(__VA_ARGS__)
#define pthread_barrier_destroy(...)                                           \
  iof__libc.pthread_barrier_destroy(__VA_ARGS__)
#define pthread_barrier_wait(...) iof__libc.pthread_barrier_wait(__VA_ARGS__)
#define dlclose(...) iof__libc.dlclose(__VA_ARGS__)
#define pthread_key_create(...) iof__libc.pthread_key_create(__VA_ARGS__)
#define pthread_key_delete(...) iof__libc.pthread_key_delete(__VA_ARGS__)
#define pthread_getspecific(...) iof__libc.pthread_getspecific(__VA_ARGS__)
#define pthread_setspecific(...) iof__libc.pthread_setspecific(__VA_ARGS__)
#define sem_init(...) iof__libc.sem_init(__VA_ARGS__)
#define sem_destroy(...) iof__libc.sem_destroy(__VA_ARGS__)
#define sem_wait(...) iof__libc.sem_wait(__VA_ARGS__)
#define sem_trywait(...) iof__libc.sem_trywait(__VA_ARGS__)
#define sem_timedwait(...) iof__libc.sem_timedwait(__VA_ARGS__)
#define sem_post(...) iof__libc.sem_post(__VA_ARGS__)
#define sem_getvalue(...) iof__libc.sem_getvalue(__VA_ARGS__)

#endif
