/* iofiber compat: the POSIX fd, network, poll, sleep and resolver calls,
 * fiber-aware. Each iof_compat_<name> has the exact signature and errno
 * behaviour of <name>.
 *
 * Inside a launched fiber a call that would block suspends only the fiber
 * (the fd is tried non-blocking; on EAGAIN the fiber waits on its
 * io_context); outside a fiber each call is exactly the plain libc call.
 * fds made elsewhere are taken over on first blocking use in a fiber. Every
 * call keeps errno across suspension. EINTR comes only where the kernel
 * would report it to the program's main thread: a handler installed with
 * iof_compat_sigaction/signal interrupts the blocking call of the fiber
 * running main (iof_main), unless the handler has SA_RESTART and the call
 * is one that flag restarts. A blocking call whose fiber's chain is stopped
 * (stop token, context shutdown) fails with ECANCELED. See docs/porting.md,
 * "What the compat layer covers". */
#ifndef IOFIBER_COMPAT_IO_H
#define IOFIBER_COMPAT_IO_H

#include <mqueue.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/msg.h>
#include <sys/select.h>
#include <sys/sem.h>
#include <sys/socket.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <iofiber/frame_allocator.h> /* IOF_API */

#ifdef __cplusplus
extern "C" {
#endif

/* Strict ISO C builds get these headers without the POSIX names below. */
struct addrinfo;
struct hostent;
struct sigaction;
#ifdef __GLIBC__
typedef __useconds_t iof_compat_useconds_t;
#else
typedef useconds_t iof_compat_useconds_t;
#endif

/* ---- making fds --------------------------------------------------------
 * As socket(2), socketpair(2), pipe(2), pipe2(2). The new fds start with a
 * clean record: SOCK_NONBLOCK / O_NONBLOCK mark them user-non-blocking
 * (calls return EAGAIN as usual), otherwise calls on them from fibers
 * suspend the fiber. -1 and errno as the plain call. */
IOF_API int iof_compat_socket(int domain, int type, int protocol);
IOF_API int iof_compat_socketpair(int domain, int type, int protocol,
                                  int sv[2]);
IOF_API int iof_compat_pipe(int fds[2]);
IOF_API int iof_compat_pipe2(int fds[2], int flags);

/* ---- accept / connect --------------------------------------------------
 * accept(2), accept4(2): in a fiber, waits for a connection (SO_RCVTIMEO
 * gives EAGAIN); the new fd is user-non-blocking only with SOCK_NONBLOCK.
 * connect(2): in a fiber on a blocking-view socket, waits for the
 * handshake and reports SO_ERROR as errno (ECONNREFUSED...); SO_SNDTIMEO
 * expiring gives EINPROGRESS, as Linux does. Non-blocking users keep
 * EINPROGRESS + SO_ERROR. */
IOF_API int iof_compat_accept(int fd, struct sockaddr *addr, socklen_t *len);
IOF_API int iof_compat_accept4(int fd, struct sockaddr *addr, socklen_t *len,
                               int flags);
IOF_API int iof_compat_connect(int fd, const struct sockaddr *addr,
                               socklen_t len);

/* ---- byte calls --------------------------------------------------------
 * As read(2), write(2), readv(2), writev(2), recv(2), send(2), recvfrom(2),
 * sendto(2), recvmsg(2), sendmsg(2). In a fiber, a would-block suspends
 * the fiber until the fd is ready (or SO_RCVTIMEO / SO_SNDTIMEO passes:
 * EAGAIN; or the fd is closed by another fiber: EBADF). User-non-blocking
 * fds, MSG_DONTWAIT, regular files and terminals behave exactly as the
 * plain call (files and terminals block the thread). Pipes on 0-2 keep
 * their blocking mode; where the kernel takes RWF_NOWAIT on pipes, their
 * reads and writes wait as a fiber too (else a read waits for data
 * first, then blocks the thread for what is missing). */
IOF_API ssize_t iof_compat_read(int fd, void *buf, size_t n);
IOF_API ssize_t iof_compat_write(int fd, const void *buf, size_t n);
IOF_API ssize_t iof_compat_readv(int fd, const struct iovec *iov, int cnt);
IOF_API ssize_t iof_compat_writev(int fd, const struct iovec *iov, int cnt);
IOF_API ssize_t iof_compat_recv(int fd, void *buf, size_t n, int flags);
IOF_API ssize_t iof_compat_send(int fd, const void *buf, size_t n, int flags);
IOF_API ssize_t iof_compat_recvfrom(int fd, void *buf, size_t n, int flags,
                                    struct sockaddr *addr, socklen_t *len);
IOF_API ssize_t iof_compat_sendto(int fd, const void *buf, size_t n, int flags,
                                  const struct sockaddr *addr, socklen_t len);
IOF_API ssize_t iof_compat_recvmsg(int fd, struct msghdr *msg, int flags);
IOF_API ssize_t iof_compat_sendmsg(int fd, const struct msghdr *msg, int flags);

#ifdef _GNU_SOURCE
/* recvmmsg(2), sendmmsg(2), sendfile(2), under the same rules. As their
 * blocking forms: recvmmsg waits for the first message (its timeout is
 * the kernel's, checked only when messages arrive); sendmmsg sends every
 * message and sendfile every byte (or up to the end of in_fd) unless an
 * error or a timeout stops them, reporting what was done (a stream
 * socket's partly sent message ends sendmmsg: its msg_len says how much
 * went). sendfile waits on out_fd. Errors: -1 and errno as the plain
 * calls; EAGAIN when SO_RCVTIMEO / SO_SNDTIMEO passes, EBADF when another
 * fiber closes the fd. */
IOF_API int iof_compat_recvmmsg(int fd, struct mmsghdr *vec, unsigned int n,
                                int flags, struct timespec *timeout);
IOF_API int iof_compat_sendmmsg(int fd, struct mmsghdr *vec, unsigned int n,
                                int flags);

/* splice(2), tee(2), vmsplice(2), under the same rules: as their blocking
 * forms they wait until some bytes can move and return how many did.
 * splice and tee wait on whichever side stops them (the input until it has
 * data, then the output until it has room); SPLICE_F_NONBLOCK, or a
 * user-non-blocking fd on the side that stops them, gives EAGAIN as the
 * plain calls do. Errors: -1 and errno as the plain calls. */
IOF_API ssize_t iof_compat_splice(int in_fd, loff_t *in_off, int out_fd,
                                  loff_t *out_off, size_t len,
                                  unsigned int flags);
IOF_API ssize_t iof_compat_tee(int in_fd, int out_fd, size_t len,
                               unsigned int flags);
IOF_API ssize_t iof_compat_vmsplice(int fd, const struct iovec *iov, size_t cnt,
                                    unsigned int flags);
#endif
IOF_API ssize_t iof_compat_sendfile(int out_fd, int in_fd, off_t *offset,
                                    size_t count);

/* ---- multiplexing ------------------------------------------------------
 * As poll(2), ppoll(2), select(2), pselect(2), epoll_wait(2),
 * epoll_pwait(2), epoll_pwait2(2), with the kernel's own results (revents,
 * sets, events): in a fiber they check once without waiting, then suspend until
 * one of the fds may be ready or the timeout passes, and check again. The
 * signal mask of ppoll/pselect/epoll_pwait(2) applies to the checks; a signal
 * it lets in that the thread blocks ends the suspension when it becomes pending
 * (a signalfd joins the wait), and the next check delivers it: -1 EINTR,
 * as make -j expects for SIGCHLD. select is limited to FD_SETSIZE like the
 * plain call. */
IOF_API int iof_compat_poll(struct pollfd *fds, nfds_t n, int timeout_ms);
IOF_API int iof_compat_ppoll(struct pollfd *fds, nfds_t n,
                             const struct timespec *timeout,
                             const sigset_t *sigmask);
IOF_API int iof_compat_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex,
                              struct timeval *timeout);
IOF_API int iof_compat_pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex,
                               const struct timespec *timeout,
                               const sigset_t *sigmask);
IOF_API int iof_compat_epoll_wait(int epfd, struct epoll_event *events,
                                  int maxevents, int timeout_ms);
IOF_API int iof_compat_epoll_pwait(int epfd, struct epoll_event *events,
                                   int maxevents, int timeout_ms,
                                   const sigset_t *sigmask);
IOF_API int iof_compat_epoll_pwait2(int epfd, struct epoll_event *events,
                                    int maxevents,
                                    const struct timespec *timeout,
                                    const sigset_t *sigmask);

/* ---- sleeping and yielding ---------------------------------------------
 * As sleep(3), usleep(3), nanosleep(2), clock_nanosleep(2): in a fiber, the
 * fiber sleeps on its io_context's timers. Cut short by EINTR (main, as
 * above) or ECANCELED (a stopped chain): sleep then returns the seconds
 * left, nanosleep writes rem. clock_nanosleep handles CLOCK_REALTIME,
 * CLOCK_MONOTONIC (and BOOTTIME/TAI) with or without TIMER_ABSTIME and
 * returns the error number itself, as POSIX says; other clocks pass
 * through. sched_yield(2) in a fiber lets the other ready fibers run. */
IOF_API unsigned iof_compat_sleep(unsigned seconds);
IOF_API int iof_compat_usleep(iof_compat_useconds_t usec);
IOF_API int iof_compat_nanosleep(const struct timespec *req,
                                 struct timespec *rem);
IOF_API int iof_compat_clock_nanosleep(clockid_t clock, int flags,
                                       const struct timespec *req,
                                       struct timespec *rem);
IOF_API int iof_compat_sched_yield(void);

/* ---- child processes ---------------------------------------------------
 * As waitpid(2), wait(2), wait3(2), wait4(2), waitid(2): in a fiber the
 * fiber, not its thread, waits; the result is the kernel's (the call with
 * WNOHANG, made again whenever the child may have changed state). A wait
 * for one child's exit waits on a pidfd of it, and checks again after a
 * pause growing from 1 ms to 1 s (a traced child's stops do not show on
 * it); other waits (any child, a process group, stops and continues) check
 * again after a pause growing from 1 to 20 ms. WNOHANG calls and calls
 * outside fibers are the plain ones. */
struct rusage;
IOF_API pid_t iof_compat_waitpid(pid_t pid, int *status, int options);
IOF_API pid_t iof_compat_wait(int *status);
IOF_API pid_t iof_compat_wait3(int *status, int options, struct rusage *ru);
IOF_API pid_t iof_compat_wait4(pid_t pid, int *status, int options,
                               struct rusage *ru);
/* As system(3): in a fiber, /bin/sh -c cmd is started with posix_spawn and
 * the fiber waits for it; SIGINT and SIGQUIT are ignored while it runs
 * (the child gets their defaults), as glibc does. */
IOF_API int iof_compat_system(const char *cmd);
/* As popen(3) and pclose(3). From a fiber the command starts through
 * iof_compat_posix_spawn ("/bin/sh -c cmd") and the stream is a compat
 * stream on the pipe (see iof_compat_fdopen): reading the command's output
 * or writing its input suspends only the fiber, and so does pclose's (or
 * fclose's) wait for the child. Outside fibers libc's popen. pclose takes
 * either kind of stream. NULL/-1 and errno as the libc calls (EINVAL for
 * a bad or NULL mode, and for pclose(NULL), where glibc crashes). */
IOF_API FILE *iof_compat_popen(const char *cmd, const char *mode);
IOF_API int iof_compat_pclose(FILE *stream);
/* As posix_spawn(3) and posix_spawnp(3); from a fiber thread the child
 * starts with that thread's signal mask (iof_compat_pthread_sigmask),
 * unless attr sets one. Returns 0 or an errno value. */
IOF_API int iof_compat_posix_spawn(pid_t *pid, const char *path,
                                   const posix_spawn_file_actions_t *fa,
                                   const posix_spawnattr_t *attr,
                                   char *const argv[], char *const envp[]);
IOF_API int iof_compat_posix_spawnp(pid_t *pid, const char *file,
                                    const posix_spawn_file_actions_t *fa,
                                    const posix_spawnattr_t *attr,
                                    char *const argv[], char *const envp[]);
/* For a child made without fork(3) from a fiber (a raw clone system call
 * without CLONE_VM, which runs no fork handlers): call it first thing in
 * the child. The runtime then steps aside there as after fork: the
 * child's calls are the plain ones, and its standard streams go back to
 * blocking mode. Cannot fail; in a process that is no fiber's child it does
 * nothing. libiofiber-hook calls it for syscall(SYS_clone, ...). */
IOF_API void iof_compat_fork_child(void);
/* As syscall(2): SYS_futex is iof_compat_futex; SYS_clone without
 * CLONE_VM from a fiber calls iof_compat_fork_child in the child; every
 * other number is the plain system call (blocking the thread if it
 * blocks). Six arguments are read, as glibc's syscall passes. */
IOF_API long iof_compat_syscall(long number, ...);
#if !defined(__GLIBC__) || defined(__USE_XOPEN_EXTENDED) ||                    \
    defined(__USE_XOPEN2K8) /* idtype_t, siginfo_t */
IOF_API int iof_compat_waitid(idtype_t type, id_t id, siginfo_t *info,
                              int options);
#endif

/* ---- signal handlers ---------------------------------------------------
 * As sigaction(2) and glibc's signal(3) (BSD semantics: SA_RESTART, the
 * signal blocked in its handler). The handler runs inside a trampoline:
 * the calls it makes are the plain ones (never a fiber's suspension), and
 * once it returned, the blocking call of the fiber running main (iof_main)
 * returns -1 EINTR as a main thread's would, unless the handler has
 * SA_RESTART and the call is one that flag restarts (see docs/porting.md).
 * A query returns the handler as given, not the trampoline. */
typedef void (*iof_compat_sighandler_t)(int);
IOF_API int iof_compat_sigaction(int sig, const struct sigaction *act,
                                 struct sigaction *old);
IOF_API iof_compat_sighandler_t iof_compat_signal(int sig,
                                                  iof_compat_sighandler_t h);

/* ---- waiting for signals -----------------------------------------------
 * As sigwait(3), sigwaitinfo(2), sigtimedwait(2): in any fiber, the fiber
 * waits on a signalfd of the set (which the thread must block, as for the
 * plain calls) and the signal is taken with a zero-timeout sigtimedwait.
 * As pause(2) and sigsuspend(2): in the fiber running main, the fiber
 * waits until a handler installed through compat ran (-1, EINTR); a
 * signal sigsuspend's mask lets in is delivered as by the plain call.
 * Elsewhere these two are the plain calls and block the thread. */
IOF_API int iof_compat_sigwait(const sigset_t *set, int *sig);
#if !defined(__GLIBC__) || defined(__USE_POSIX199309) /* siginfo_t */
IOF_API int iof_compat_sigwaitinfo(const sigset_t *set, siginfo_t *info);
IOF_API int iof_compat_sigtimedwait(const sigset_t *set, siginfo_t *info,
                                    const struct timespec *timeout);
#endif
IOF_API int iof_compat_pause(void);
IOF_API int iof_compat_sigsuspend(const sigset_t *mask);

/* ---- signal masks ------------------------------------------------------
 * As pthread_sigmask(3) (0 or an errno value) and sigprocmask(2) (-1 and
 * errno): in a fiber thread (one iof_compat_pthread_create or iof_main
 * started), they change that thread's own mask, which its new threads,
 * fork children and exec'd programs inherit, and pthread_kill respects.
 * The OS thread running fiber threads blocks a signal only while all of
 * them block it. Elsewhere the plain calls. EINVAL for a bad how; in a
 * fiber thread EFAULT, with the mask unchanged, for a set or old the
 * kernel could not read or write (glibc's own reads set, and faults). */
IOF_API int iof_compat_pthread_sigmask(int how, const sigset_t *set,
                                       sigset_t *old);
IOF_API int iof_compat_sigprocmask(int how, const sigset_t *set, sigset_t *old);

/* ---- fd bookkeeping ----------------------------------------------------
 * close(2), dup(2), dup2(2), dup3(2): closing (or dup2-ing over) an fd
 * wakes the fibers waiting on it with EBADF; a reused number never reaches
 * them. dup copies the user's blocking view. fcntl(2): F_GETFL shows the
 * user's O_NONBLOCK (not the runtime's); F_SETFL records it; F_DUPFD*
 * behave as dup; F_SETLKW and F_OFD_SETLKW wait as iof_compat_flock
 * below; other commands pass through. ioctl(2): FIONBIO is
 * recorded like F_SETFL; other requests pass through. -1 and errno as the
 * plain call. */
IOF_API int iof_compat_close(int fd);
IOF_API int iof_compat_dup(int fd);
IOF_API int iof_compat_dup2(int fd, int fd2);
IOF_API int iof_compat_dup3(int fd, int fd2, int flags);
IOF_API int iof_compat_fcntl(int fd, int cmd, ...);
IOF_API int iof_compat_ioctl(int fd, unsigned long req, ...);

/* ---- file locks --------------------------------------------------------
 * flock(2), lockf(3): a fiber waiting for a lock retries the non-blocking
 * form between pauses of 50 us to 5 ms, so the other fibers of its thread
 * run (one of them may hold the lock through its own open of the file).
 * A handler without SA_RESTART ends the wait with EINTR, as in the
 * kernel; each retry is a cancellation point. -1 and errno as the plain
 * call (no EDEADLK: a fiber's wait is never queued in the kernel). */
IOF_API int iof_compat_flock(int fd, int op);
IOF_API int iof_compat_lockf(int fd, int cmd, off_t len);

/* fdopen(3): on an fd fibers wait on (a socket, a pipe) a stream whose
 * reads and writes are iof_compat_read/write, so fgets, fread, fflush...
 * suspend only the calling fiber; fileno() gives fd back, fclose closes it
 * through iof_compat_close. On other fds (files, terminals, an fd with the
 * program's own O_NONBLOCK) glibc's stream. NULL and errno as fdopen
 * (EINVAL for a NULL mode, where glibc crashes). */
IOF_API FILE *iof_compat_fdopen(int fd, const char *mode);

/* Reads from glibc's own streams: stdin, and any FILE on a terminal or a
 * pipe (glibc reads them with an internal read no shim reaches). In a
 * fiber, when fp's buffer is empty and its fd has nothing to read yet,
 * they first wait for it as a fiber (the plain call would hold the
 * thread), then make the plain call; elsewhere the plain calls. A line or
 * record longer than what arrived at once still blocks for the rest. A
 * stop of the fiber's chain fails the call (NULL, EOF, -1 or 0, with errno
 * ECANCELED); so does a signal handler without SA_RESTART (EINTR). A
 * NULL stream or buffer is EINVAL (glibc's calls crash on one).
 * iof_compat_fwait is that wait alone: 0, or -1 and errno. */
IOF_API int iof_compat_fwait(FILE *fp);
IOF_API char *iof_compat_fgets(char *s, int n, FILE *fp);
IOF_API ssize_t iof_compat_getline(char **line, size_t *cap, FILE *fp);
IOF_API ssize_t iof_compat_getdelim(char **line, size_t *cap, int delim,
                                    FILE *fp);
IOF_API int iof_compat_fgetc(FILE *fp);
IOF_API int iof_compat_getc(FILE *fp);
IOF_API int iof_compat_getchar(void);
IOF_API size_t iof_compat_fread(void *p, size_t size, size_t n, FILE *fp);

/* setsockopt(2), getsockopt(2), shutdown(2): passed to the kernel;
 * setsockopt also records SO_RCVTIMEO / SO_SNDTIMEO for fiber waits (a
 * zero timeval clears). Errors as the plain calls. */
IOF_API int iof_compat_setsockopt(int fd, int level, int name, const void *val,
                                  socklen_t len);
IOF_API int iof_compat_getsockopt(int fd, int level, int name, void *val,
                                  socklen_t *len);
IOF_API int iof_compat_shutdown(int fd, int how);

/* listen(2). In a fiber a backlog below IOF_COMPAT_LISTEN_MIN is raised
 * to it: the accepting "thread" shares its OS thread with the connections
 * it starts, so the kernel's queue must hold the connections that arrive
 * while they run (with a backlog of 5, a burst of clients meets dropped
 * SYNs and one-second retransmits). Errors as listen(2). */
#define IOF_COMPAT_LISTEN_MIN 128
IOF_API int iof_compat_listen(int fd, int backlog);

/* ---- name resolution ---------------------------------------------------
 * As getaddrinfo(3), freeaddrinfo(3), gethostbyname(3),
 * gethostbyname_r(3), gethostbyaddr(3), gethostbyaddr_r(3) and
 * getnameinfo(3). In a fiber the lookup runs on the resolver threads
 * of the fiber's io_context (never on the io thread), the fiber suspended;
 * many fibers resolve in parallel. gethostbyname's static result is per
 * thread, as glibc's: in a fiber, use it before the next suspension (or
 * use gethostbyname_r). EAI_* / h_errno as the plain calls; a stopped
 * chain gives EAI_SYSTEM with errno ECANCELED (gethostbyname: NULL and
 * h_errno TRY_AGAIN). Answers that need no lookup (numeric hosts and
 * services, NI_NUMERICHOST, an address of another family, bad arguments)
 * are made in place, without suspending. */
IOF_API int iof_compat_getaddrinfo(const char *host, const char *service,
                                   const struct addrinfo *hints,
                                   struct addrinfo **res);
IOF_API void iof_compat_freeaddrinfo(struct addrinfo *res);
IOF_API struct hostent *iof_compat_gethostbyname(const char *name);
IOF_API int iof_compat_gethostbyname_r(const char *name, struct hostent *ret,
                                       char *buf, size_t buflen,
                                       struct hostent **result, int *h_errnop);
IOF_API struct hostent *iof_compat_gethostbyaddr(const void *addr,
                                                 socklen_t len, int type);
IOF_API int iof_compat_gethostbyaddr_r(const void *addr, socklen_t len,
                                       int type, struct hostent *ret, char *buf,
                                       size_t buflen, struct hostent **result,
                                       int *h_errnop);
IOF_API int iof_compat_getnameinfo(const struct sockaddr *sa, socklen_t salen,
                                   char *host, socklen_t hostlen, char *serv,
                                   socklen_t servlen, int flags);

/* ---- message queues and System V semaphores ----------------------------
 * As mq_receive(3), mq_timedreceive(3), mq_send(3), mq_timedsend(3),
 * semop(2), semtimedop(2), msgsnd(2), msgrcv(2). In a fiber only the fiber
 * waits: on a POSIX queue's descriptor as on a socket; for System V
 * objects, which signal nothing, by retrying with IPC_NOWAIT between
 * pauses growing from 50 us to 5 ms (up to that much latency per wait).
 * Calls that do not block (IPC_NOWAIT, an O_NONBLOCK queue) and calls
 * outside fibers are the plain ones. Returns and errno as the plain calls
 * (semtimedop: EAGAIN at its timeout; mq_timed*: ETIMEDOUT); EINTR for
 * main under iof_main as signal(7) says (queue calls restart with
 * SA_RESTART, System V calls never); ECANCELED when the chain is stopped. */
IOF_API ssize_t iof_compat_mq_receive(mqd_t q, char *msg, size_t len,
                                      unsigned *prio);
IOF_API ssize_t iof_compat_mq_timedreceive(mqd_t q, char *msg, size_t len,
                                           unsigned *prio,
                                           const struct timespec *abs);
IOF_API int iof_compat_mq_send(mqd_t q, const char *msg, size_t len,
                               unsigned prio);
IOF_API int iof_compat_mq_timedsend(mqd_t q, const char *msg, size_t len,
                                    unsigned prio, const struct timespec *abs);
/* As mq_close(3): closes the queue's descriptor as iof_compat_close does,
 * so a fiber waiting on the queue (mq_receive, mq_send) returns -1 with
 * EBADF. 0, or -1 with errno (EBADF). */
IOF_API int iof_compat_mq_close(mqd_t q);
IOF_API int iof_compat_semop(int id, struct sembuf *sops, size_t n);
IOF_API int iof_compat_semtimedop(int id, struct sembuf *sops, size_t n,
                                  const struct timespec *timeout);
IOF_API int iof_compat_msgsnd(int id, const void *msg, size_t size, int flags);
IOF_API ssize_t iof_compat_msgrcv(int id, void *msg, size_t size, long type,
                                  int flags);

#ifdef __cplusplus
}
#endif
#endif
