/* iofiber compat: the header swap. Force-include it in a blocking-style
 * POSIX + pthreads program (`cc -include iofiber/compat.h ...`, or include
 * it first in every file) and link iofiber-compat: the POSIX names of the
 * blocking calls become the iof_compat_* shims, which suspend the calling
 * fiber instead of its thread, and `main` becomes iof_compat_user_main,
 * which the library's own main runs as a fiber thread through iof_main.
 *
 * The system headers come first, so that their declarations (and glibc's
 * _FORTIFY_SOURCE inline wrappers, defined under the real names) are seen
 * before the names are redirected; later includes of them are no-ops.
 * Define IOF_COMPAT_NO_MAIN to keep your own main (then call iof_main). */
#ifndef IOFIBER_COMPAT_H
#define IOFIBER_COMPAT_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<iofiber/compat_io.h>)
#include <iofiber/compat_io.h>
#define IOF_COMPAT_HAVE_IO 1
#endif
#endif
#include <iofiber/compat_thread.h>

#ifdef IOF_COMPAT_HAVE_IO
/* fds, sockets, polling, sleeping, resolving */
#define socket iof_compat_socket
#define socketpair iof_compat_socketpair
#define pipe iof_compat_pipe
#define pipe2 iof_compat_pipe2
#define accept iof_compat_accept
#define accept4 iof_compat_accept4
#define connect iof_compat_connect
#define read iof_compat_read
#define write iof_compat_write
#define readv iof_compat_readv
#define writev iof_compat_writev
#define recv iof_compat_recv
#define send iof_compat_send
#define recvfrom iof_compat_recvfrom
#define sendto iof_compat_sendto
#define recvmsg iof_compat_recvmsg
#define sendmsg iof_compat_sendmsg
#ifdef _GNU_SOURCE
#define recvmmsg iof_compat_recvmmsg
#define sendmmsg iof_compat_sendmmsg
#define splice iof_compat_splice
#define tee iof_compat_tee
#define vmsplice iof_compat_vmsplice
#endif
#define sendfile iof_compat_sendfile
#ifdef __LP64__
#define sendfile64 iof_compat_sendfile /* _FILE_OFFSET_BITS=64 */
#endif
#define poll iof_compat_poll
#define ppoll iof_compat_ppoll
#define select iof_compat_select
#define pselect iof_compat_pselect
#define epoll_wait iof_compat_epoll_wait
#define epoll_pwait iof_compat_epoll_pwait
#define epoll_pwait2 iof_compat_epoll_pwait2
#define sleep iof_compat_sleep
#define usleep iof_compat_usleep
#define nanosleep iof_compat_nanosleep
#define clock_nanosleep iof_compat_clock_nanosleep
#define close iof_compat_close
#define dup iof_compat_dup
#define dup2 iof_compat_dup2
#define dup3 iof_compat_dup3
#define fcntl iof_compat_fcntl
#define ioctl iof_compat_ioctl
#define flock(fd, op) iof_compat_flock(fd, op) /* not `struct flock` */
#define lockf iof_compat_lockf
#ifdef __LP64__
#define lockf64 iof_compat_lockf /* _FILE_OFFSET_BITS=64 */
#endif
#define fdopen iof_compat_fdopen
/* reads from glibc's own streams (stdin, a terminal, a pipe) */
#define fgets iof_compat_fgets
#define getline iof_compat_getline
#define getdelim iof_compat_getdelim
#define fgetc iof_compat_fgetc
#define getc iof_compat_getc
#define getchar iof_compat_getchar
#define fread iof_compat_fread
#define setsockopt iof_compat_setsockopt
#define getsockopt iof_compat_getsockopt
#define shutdown iof_compat_shutdown
#define listen iof_compat_listen
#define getaddrinfo iof_compat_getaddrinfo
#define freeaddrinfo iof_compat_freeaddrinfo
#define gethostbyname iof_compat_gethostbyname
#define gethostbyname_r iof_compat_gethostbyname_r
#define gethostbyaddr iof_compat_gethostbyaddr
#define gethostbyaddr_r iof_compat_gethostbyaddr_r
#define getnameinfo iof_compat_getnameinfo
#define mq_receive iof_compat_mq_receive
#define mq_timedreceive iof_compat_mq_timedreceive
#define mq_send iof_compat_mq_send
#define mq_timedsend iof_compat_mq_timedsend
#define mq_close iof_compat_mq_close
#define semop iof_compat_semop
#define semtimedop iof_compat_semtimedop
#define msgsnd iof_compat_msgsnd
#define msgrcv iof_compat_msgrcv
#define sched_yield iof_compat_sched_yield
#define syscall iof_compat_syscall /* SYS_futex, SYS_clone */
/* Function-like, so that `struct sigaction` keeps its name. */
#define sigaction(sig, act, old) iof_compat_sigaction(sig, act, old)
#define signal(sig, h) iof_compat_signal(sig, h)
#define sigwait iof_compat_sigwait
#define waitpid iof_compat_waitpid
#define system iof_compat_system
#define popen iof_compat_popen
#define pclose iof_compat_pclose
#define posix_spawn iof_compat_posix_spawn
#define posix_spawnp iof_compat_posix_spawnp
#define wait(status) iof_compat_wait(status) /* not `union wait` */
#define wait4 iof_compat_wait4
#define wait3 iof_compat_wait3
#define waitid iof_compat_waitid
#define sigwaitinfo iof_compat_sigwaitinfo
#define sigtimedwait iof_compat_sigtimedwait
#define pause iof_compat_pause
#define sigsuspend iof_compat_sigsuspend
#define sigprocmask iof_compat_sigprocmask
#define pthread_sigmask iof_compat_pthread_sigmask
#endif

/* threads */
#define pthread_create iof_compat_pthread_create
#define pthread_join iof_compat_pthread_join
#define pthread_detach iof_compat_pthread_detach
#define pthread_self iof_compat_pthread_self
#define pthread_equal iof_compat_pthread_equal
#define pthread_exit iof_compat_pthread_exit
#define pthread_once iof_compat_pthread_once
#define pthread_setname_np iof_compat_pthread_setname_np
#define pthread_getname_np iof_compat_pthread_getname_np
#define pthread_getattr_np iof_compat_pthread_getattr_np
#define pthread_kill iof_compat_pthread_kill
#define pthread_cancel iof_compat_pthread_cancel
#define pthread_getschedparam iof_compat_pthread_getschedparam
#define pthread_setschedparam iof_compat_pthread_setschedparam
#define pthread_setschedprio iof_compat_pthread_setschedprio
#define pthread_getcpuclockid iof_compat_pthread_getcpuclockid
#ifdef _GNU_SOURCE
#define pthread_tryjoin_np iof_compat_pthread_tryjoin_np
#define pthread_timedjoin_np iof_compat_pthread_timedjoin_np
#define pthread_clockjoin_np iof_compat_pthread_clockjoin_np
#define pthread_getaffinity_np iof_compat_pthread_getaffinity_np
#define pthread_setaffinity_np iof_compat_pthread_setaffinity_np
#define pthread_sigqueue iof_compat_pthread_sigqueue
#endif
#define pthread_setcancelstate iof_compat_pthread_setcancelstate
#define pthread_setcanceltype iof_compat_pthread_setcanceltype
#define pthread_testcancel iof_compat_pthread_testcancel
#ifdef __GLIBC__
/* What pthread_cleanup_push/pop expand to (C, without exceptions). */
#define __pthread_register_cancel iof_compat_pthread_register_cancel
#define __pthread_unregister_cancel iof_compat_pthread_unregister_cancel
#define __pthread_unwind_next iof_compat_pthread_unwind_next
#endif
#define pthread_mutex_init iof_compat_pthread_mutex_init
#define pthread_mutex_destroy iof_compat_pthread_mutex_destroy
#define pthread_mutex_lock iof_compat_pthread_mutex_lock
#define pthread_mutex_trylock iof_compat_pthread_mutex_trylock
#define pthread_mutex_timedlock iof_compat_pthread_mutex_timedlock
#define pthread_mutex_clocklock iof_compat_pthread_mutex_clocklock
#define pthread_mutex_unlock iof_compat_pthread_mutex_unlock
#define pthread_cond_init iof_compat_pthread_cond_init
#define pthread_cond_destroy iof_compat_pthread_cond_destroy
#define pthread_cond_wait iof_compat_pthread_cond_wait
#define pthread_cond_timedwait iof_compat_pthread_cond_timedwait
#define pthread_cond_clockwait iof_compat_pthread_cond_clockwait
#define pthread_cond_signal iof_compat_pthread_cond_signal
#define pthread_cond_broadcast iof_compat_pthread_cond_broadcast
#define pthread_rwlock_init iof_compat_pthread_rwlock_init
#define pthread_rwlock_destroy iof_compat_pthread_rwlock_destroy
#define pthread_rwlock_rdlock iof_compat_pthread_rwlock_rdlock
#define pthread_rwlock_tryrdlock iof_compat_pthread_rwlock_tryrdlock
#define pthread_rwlock_timedrdlock iof_compat_pthread_rwlock_timedrdlock
#define pthread_rwlock_wrlock iof_compat_pthread_rwlock_wrlock
#define pthread_rwlock_trywrlock iof_compat_pthread_rwlock_trywrlock
#define pthread_rwlock_timedwrlock iof_compat_pthread_rwlock_timedwrlock
#define pthread_rwlock_clockrdlock iof_compat_pthread_rwlock_clockrdlock
#define pthread_rwlock_clockwrlock iof_compat_pthread_rwlock_clockwrlock
#define pthread_rwlock_unlock iof_compat_pthread_rwlock_unlock
#define pthread_spin_lock iof_compat_pthread_spin_lock
#define pthread_barrier_init iof_compat_pthread_barrier_init
#define pthread_barrier_destroy iof_compat_pthread_barrier_destroy
#define pthread_barrier_wait iof_compat_pthread_barrier_wait
#define pthread_key_create iof_compat_pthread_key_create
#define pthread_key_delete iof_compat_pthread_key_delete
#define pthread_getspecific iof_compat_pthread_getspecific
#define pthread_setspecific iof_compat_pthread_setspecific
#define sem_init iof_compat_sem_init
#define sem_destroy iof_compat_sem_destroy
#define sem_wait iof_compat_sem_wait
#define sem_trywait iof_compat_sem_trywait
#define sem_timedwait iof_compat_sem_timedwait
#define sem_clockwait iof_compat_sem_clockwait
#define sem_post iof_compat_sem_post
#define sem_getvalue iof_compat_sem_getvalue

#ifndef IOF_COMPAT_NO_MAIN
/* The program's main, run by libiofiber-compat's main in a fiber thread
 * (as SDL_main is by SDL's). */
#define main iof_compat_user_main
#endif

#endif
