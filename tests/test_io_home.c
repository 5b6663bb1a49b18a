/* The home path of socket waits: a fiber of an io_context waiting on one of
 * its sockets, with no deadline and no stop token, is published and armed
 * before it switches away, stays out of the shutdown registry and hands
 * its thread straight to the next fiber of the run loop's batch. What must
 * still hold: a shutdown from another thread fails the wait, a close
 * wakes it, the wake order is the readiness order, run_one runs one fiber
 * and poll counts every fiber it ran, the debugger sees the wait, and a
 * fiber with a stop token (the general path) still gets cancelled.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

IOF_TEST_WATCHDOG(arm, disarm, 30)

/* A socket of io over one end of a fresh socketpair; *peer gets the other
 * end (a plain fd). */
static iof_socket *pair(iof_io_context *io, int *peer) {
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  iof_socket *s = NULL;
  assert_int_equal(iof_socket_adopt(io, sv[0], &s), 0);
  *peer = sv[1];
  return s;
}

typedef struct reader {
  iof_socket *s;
  atomic_int started;
  atomic_long result;
  int id;
  int *order; /* shared log of ids, in wake order */
  atomic_int *olen;
} reader;

static int read_once(void *arg) {
  reader *r = arg;
  char c;
  atomic_store(&r->started, 1);
  ssize_t n = iof_read_some(r->s, &c, 1);
  if (r->order) r->order[atomic_fetch_add(r->olen, 1)] = r->id;
  atomic_store(&r->result, (long)n);
  return 0;
}

static void *run_io(void *arg) {
  iof_io_context_run(arg);
  return NULL;
}

/* Waits until a fiber is suspended in an io wait on a socket, as the
 * debugger reports it. */
typedef struct seen {
  int waiting;
} seen;

static int count_waiting(const iof_fiber_info *info, void *arg) {
  if (info->state == IOF_FIBER_SUSPENDED &&
      strcmp(info->waiting, "io: socket readable") == 0)
    ((seen *)arg)->waiting++;
  return 0;
}

static bool wait_parked(int want) {
  for (int i = 0; i < 5000; i++) {
    seen sn = {0};
    iof_fiber_walk(count_waiting, &sn);
    if (sn.waiting >= want) return true;
    sleep_ms(1);
  }
  return false;
}

static int signal_parked(void *arg) {
  atomic_store((atomic_int *)arg, 1);
  return 0;
}

/* A shutdown requested from another thread while the io thread runs fails
 * the parked read with -ECANCELED, and the run then ends (no work left). */
static void test_shutdown_from_other_thread(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int peer;
  reader r = {.s = pair(io, &peer)};
  iof_executor_ref ex = iof_io_context_executor(io);
  assert_int_equal(iof_run_async(ex, NULL, read_once, &r), 0);
  /* Runs after the reader, once it has parked (same thread, FIFO). */
  atomic_int parked = 0;
  assert_int_equal(iof_run_async(ex, NULL, signal_parked, &parked), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, run_io, io), 0);
  for (int i = 0; i < 5000 && !atomic_load(&parked); i++) sleep_ms(1);
  assert_int_equal(atomic_load(&parked), 1);
  sleep_ms(20); /* let the loop block in libev */
  iof_execution_context_shutdown(iof_io_context_context(io));
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&r.result), -ECANCELED);
  assert_int_equal(iof_io_context_destroy(io), 0);
  close(peer);
}

/* Destroying the context (not running) fails the parked wait too. */
static void test_destroy_fails_parked_read(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int peer;
  reader r = {.s = pair(io, &peer)};
  atomic_store(&r.result, 1);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), NULL, read_once, &r), 0);
  assert_int_equal(iof_io_context_poll(io), 1);
  assert_int_equal(atomic_load(&r.started), 1);
  assert_int_equal(atomic_load(&r.result), 1); /* still waiting */
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(atomic_load(&r.result), -ECANCELED);
  close(peer);
}

static int closer(void *arg) {
  iof_socket_close(arg);
  return 0;
}

/* A close by another fiber wakes the parked reader with an error. */
static void test_close_wakes_reader(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  int peer;
  reader r = {.s = pair(io, &peer)};
  iof_executor_ref ex = iof_io_context_executor(io);
  assert_int_equal(iof_run_async(ex, NULL, read_once, &r), 0);
  assert_int_equal(iof_io_context_poll(io), 1);
  assert_int_equal(iof_run_async(ex, NULL, closer, r.s), 0);
  assert_int_equal(iof_io_context_run(io), 2); /* closer, then the reader */
  long res = atomic_load(&r.result);
  assert_true(res == -ECANCELED || res == -EBADF);
  assert_int_equal(iof_io_context_destroy(io), 0);
  close(peer);
}

#define NREADERS 8

/* Readers parked on their own sockets all wake, each exactly once,
 * hand-offs included; run_one runs one of them and the runs count each. */
static void test_wake_order_and_counts(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_executor_ref ex = iof_io_context_executor(io);
  reader rs[NREADERS];
  int peers[NREADERS];
  int order[NREADERS];
  atomic_int olen = 0;
  for (int i = 0; i < NREADERS; i++) {
    memset(&rs[i], 0, sizeof rs[i]);
    rs[i].s = pair(io, &peers[i]);
    rs[i].id = i;
    rs[i].order = order;
    rs[i].olen = &olen;
    assert_int_equal(iof_run_async(ex, NULL, read_once, &rs[i]), 0);
  }
  /* Each reader runs once and parks, the batch handing off from one to
   * the next: every one of them is counted. */
  assert_int_equal(iof_io_context_poll(io), NREADERS);
  assert_true(wait_parked(NREADERS));
  /* All readable before the loop looks again. */
  for (int i = 0; i < NREADERS; i++)
    assert_int_equal(write(peers[i], "x", 1), 1);
  /* run_one runs exactly one fiber, with no hand-off to the others. */
  assert_int_equal(iof_io_context_run_one(io), 1);
  assert_int_equal(atomic_load(&olen), 1);
  assert_int_equal(iof_io_context_run(io), NREADERS - 1);
  assert_int_equal(atomic_load(&olen), NREADERS);
  int seen_ids = 0;
  for (int i = 0; i < NREADERS; i++) {
    seen_ids |= 1 << order[i];
    assert_int_equal(atomic_load(&rs[i].result), 1);
  }
  assert_int_equal(seen_ids, (1 << NREADERS) - 1); /* each exactly once */
  assert_int_equal(iof_io_context_destroy(io), 0);
  for (int i = 0; i < NREADERS; i++) close(peers[i]);
}

static void *request_later(void *arg) {
  sleep_ms(50);
  iof_stop_source_request(arg);
  return NULL;
}

/* With a stop token the wait takes the general path: a request from
 * another thread cancels it. */
static void test_stop_token_cancels(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  int peer;
  reader r = {.s = pair(io, &peer)};
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, read_once, &r), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, request_later, &src), 0);
  assert_true(iof_io_context_run(io) >= 1);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&r.result), -ECANCELED);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_io_context_destroy(io), 0);
  close(peer);
}

typedef struct spinner {
  atomic_int flag;
  long yields;
  iof_socket *s;
} spinner;

static int yield_until_flag(void *arg) {
  spinner *sp = arg;
  while (!atomic_load(&sp->flag) && sp->yields < 50000000) {
    assert_int_equal(iof_yield(), 0);
    sp->yields++;
  }
  return 0;
}

static int sleep_then_flag(void *arg) {
  spinner *sp = arg;
  iof_sleep_for(2 * 1000 * 1000);
  atomic_store(&sp->flag, 1);
  return 0;
}

static int read_then_flag(void *arg) {
  spinner *sp = arg;
  char c;
  if (iof_read_some(sp->s, &c, 1) == 1) atomic_store(&sp->flag, 2);
  return 0;
}

static void *write_later(void *arg) {
  sleep_ms(5);
  assert_int_equal(write(*(int *)arg, "y", 1), 1);
  return NULL;
}

/* A fiber yielding in a loop with nothing else ready continues at once,
 * yet timers and sockets still get their turn. */
static void test_yield_loop_lets_io_in(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_executor_ref ex = iof_io_context_executor(io);
  spinner sp = {0};
  assert_int_equal(iof_run_async(ex, NULL, yield_until_flag, &sp), 0);
  assert_int_equal(iof_run_async(ex, NULL, sleep_then_flag, &sp), 0);
  assert_true(iof_io_context_run(io) > 2);
  assert_int_equal(atomic_load(&sp.flag), 1); /* the timer ended the loop */
  assert_true(sp.yields > 0 && sp.yields < 50000000);

  int peer;
  spinner sq = {0};
  sq.s = pair(io, &peer);
  assert_int_equal(iof_run_async(ex, NULL, read_then_flag, &sq), 0);
  assert_int_equal(iof_run_async(ex, NULL, yield_until_flag, &sq), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, write_later, &peer), 0);
  iof_io_context_restart(io);
  assert_true(iof_io_context_run(io) > 2);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&sq.flag), 2); /* the read ended the loop */
  assert_true(sq.yields > 0 && sq.yields < 50000000);
  assert_int_equal(iof_io_context_destroy(io), 0);
  close(peer);
}

/* Polls of libev become rarer while fibers only yield and the polls find
 * nothing; when the fibers turn slow, I/O must still get its turn within
 * about a tick of the coarse clock, not after a whole stretched interval
 * (1,024 steps of 200 us here: 200 ms). */
typedef struct turn_slow {
  atomic_int phase; /* 1: steps are slow; 2: the timer fired */
  int64_t slow_at, fired_at;
} turn_slow;

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int fast_then_slow(void *arg) {
  turn_slow *t = arg;
  for (int i = 0; i < 200000; i++) assert_int_equal(iof_yield(), 0);
  t->slow_at = mono_ns();
  atomic_store(&t->phase, 1);
  while (atomic_load(&t->phase) != 2 && mono_ns() - t->slow_at < 2000000000) {
    int64_t until = mono_ns() + 200000;
    while (mono_ns() < until) {
    }
    assert_int_equal(iof_yield(), 0);
  }
  return 0;
}

static int sleep_when_slow(void *arg) {
  turn_slow *t = arg;
  while (!atomic_load(&t->phase)) assert_int_equal(iof_yield(), 0);
  assert_int_equal(iof_sleep_for(1000000), 0);
  t->fired_at = mono_ns();
  atomic_store(&t->phase, 2);
  return 0;
}

static void test_slow_yields_still_poll(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_executor_ref ex = iof_io_context_executor(io);
  turn_slow t = {0};
  assert_int_equal(iof_run_async(ex, NULL, fast_then_slow, &t), 0);
  assert_int_equal(iof_run_async(ex, NULL, sleep_when_slow, &t), 0);
  assert_true(iof_io_context_run(io) > 2);
  assert_int_equal(atomic_load(&t.phase), 2);
  int64_t late = t.fired_at - t.slow_at;
  print_message("1 ms timer fired after %.1f ms of 200 us steps\n",
                (double)late / 1e6);
  assert_true(late < 100000000);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- strands over the io_context -------------------------------------- */

#define SFIBERS 4
#define SROUNDS 100

typedef struct strand_run {
  iof_strand *strand;
  int log[2 * SFIBERS * SROUNDS + 8];
  int nlog;
  int not_in_strand;
  int plain_rounds;
  atomic_int late_done;
} strand_run;

typedef struct sfiber {
  strand_run *run;
  int id;
} sfiber;

static int strand_fn(void *arg) {
  sfiber *f = arg;
  strand_run *r = f->run;
  for (int i = 0; i < SROUNDS; i++) {
    if (!iof_strand_running_in_this_thread(r->strand)) r->not_in_strand++;
    r->log[r->nlog++] = f->id;
    if (iof_yield() != 0) r->not_in_strand += 1000;
  }
  if (f->id >= SFIBERS) atomic_fetch_add(&r->late_done, 1);
  return 0;
}

static int plain_fn(void *arg) {
  strand_run *r = arg;
  for (int i = 0; i < SROUNDS; i++) {
    r->plain_rounds++;
    iof_yield();
  }
  return 0;
}

typedef struct late_post {
  iof_executor_ref sx;
  sfiber *fs;
} late_post;

static void *post_late(void *arg) {
  late_post *lp = arg;
  for (int i = 0; i < SFIBERS; i++)
    assert_int_equal(iof_run_async(lp->sx, NULL, strand_fn, &lp->fs[i]), 0);
  return NULL;
}

/* Fibers holding a strand over their own io_context yield at home: each
 * yield passes the strand to the first waiter, so they take turns in
 * launch order, always inside the strand, while a plain fiber of the same
 * io_context keeps running too; fibers posted to the strand from another
 * thread meanwhile join the rotation. */
static void test_strand_yields_round_robin(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  strand_run *r = calloc(1, sizeof *r);
  assert_non_null(r);
  r->strand = iof_strand_create(iof_io_context_executor(io));
  assert_non_null(r->strand);
  iof_executor_ref sx = iof_strand_executor(r->strand);
  sfiber fs[2 * SFIBERS];
  for (int i = 0; i < 2 * SFIBERS; i++) fs[i] = (sfiber){r, i};
  for (int i = 0; i < SFIBERS; i++)
    assert_int_equal(iof_run_async(sx, NULL, strand_fn, &fs[i]), 0);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), NULL, plain_fn, r), 0);
  /* The first rounds, on this thread alone: a strict rotation. */
  for (int i = 0; i < 50 && r->nlog < 3 * SFIBERS; i++)
    iof_io_context_run_one(io);
  assert_true(r->nlog >= 3 * SFIBERS);
  for (int i = 0; i < r->nlog; i++) assert_int_equal(r->log[i], i % SFIBERS);
  /* Then more fibers posted to the strand from another thread. */
  late_post lp = {sx, &fs[SFIBERS]};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, post_late, &lp), 0);
  pthread_join(t, NULL);
  assert_true(iof_io_context_run(io) > 0);
  assert_int_equal(r->nlog, 2 * SFIBERS * SROUNDS);
  assert_int_equal(atomic_load(&r->late_done), SFIBERS);
  assert_int_equal(r->plain_rounds, SROUNDS);
  assert_int_equal(r->not_in_strand, 0);
  int per[2 * SFIBERS] = {0};
  for (int i = 0; i < r->nlog; i++) per[r->log[i]]++;
  for (int i = 0; i < 2 * SFIBERS; i++) assert_int_equal(per[i], SROUNDS);
  assert_int_equal(iof_strand_destroy(r->strand), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_shutdown_from_other_thread, arm,
                                      disarm),
      cmocka_unit_test_setup_teardown(test_destroy_fails_parked_read, arm,
                                      disarm),
      cmocka_unit_test_setup_teardown(test_close_wakes_reader, arm, disarm),
      cmocka_unit_test_setup_teardown(test_wake_order_and_counts, arm, disarm),
      cmocka_unit_test_setup_teardown(test_stop_token_cancels, arm, disarm),
      cmocka_unit_test_setup_teardown(test_yield_loop_lets_io_in, arm, disarm),
      cmocka_unit_test_setup_teardown(test_slow_yields_still_poll, arm, disarm),
      cmocka_unit_test_setup_teardown(test_strand_yields_round_robin, arm,
                                      disarm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
