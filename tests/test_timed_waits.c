/* One wait, one clock: timed waits of every kind through the one wait
 * record and the one timer.
 *
 * - 100,000 fibers on one io_context in timed waits of each kind (sem,
 *   cond, mutex, event, channel recv, select, sleep) with distinct
 *   deadlines all time out, each after its own deadline, in bounded time
 *   (the loop's timer heap; the old sorted timer list took ~8 s for 30,000).
 *   The fibers use malloc'd 16 KiB stacks: the default stack pool maps
 *   each stack with a guard page (two mappings), and 100,000 stacks would
 *   exceed vm.max_map_count (65,530 by default). Under ASan the count is
 *   10,000 (its shadow memory and slower switches), under TSan 1,000 (it
 *   counts fibers as threads, with a large state each, up to 8,128).
 * - A timed wait on a thread-pool fiber and from a plain thread time out
 *   through the timer service, whose thread stops once idle; a forked
 *   child starts its own.
 * - Cancel racing timeout racing wake, 10,000 rounds over a thread pool
 *   and an io_context run by another thread: each waiter resumes exactly
 *   once with one of the three results, and the semaphore unit is either
 *   taken by it or still there, never lost or doubled.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"
#include "check_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sched/timer_internal.h"

#define MS 1000000LL

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif
#if UNDER_TSAN || defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

/* TSan counts each fiber as a thread (a large state each, and it dies
 * past 8,128 of them). */
#define MANY (UNDER_TSAN ? 1000 : UNDER_SANITIZER ? 10000 : 100000)
#define ROUNDS 10000

IOF_TEST_CHECK_FIXTURES(setup, teardown, UNDER_SANITIZER ? 280 : 60)

/* ---- many timed waits of each kind -------------------------------------- */

enum { K_SEM, K_COND, K_MUTEX, K_EVENT, K_CHAN, K_SELECT, K_SLEEP, K_COUNT };
static const char *const kind_names[K_COUNT] = {
    "sem", "cond", "mutex", "event", "chan_recv", "select", "sleep"};

typedef struct many {
  int kind;
  iof_sem sem;
  iof_mutex m; /* cond's mutex */
  iof_cond c;
  iof_mutex held; /* held by the main thread throughout */
  iof_event e;
  iof_chan *ch[2];
  int64_t base;
  atomic_int timed_out;
  atomic_int early; /* returned before its own deadline */
  atomic_int other;
} many;

static many M;

static int many_fn(void *arg) {
  int64_t deadline = M.base + (int64_t)(intptr_t)arg * 1000; /* distinct */
  int r = -1;
  int v = 0;
  switch (M.kind) {
  case K_SEM:
    r = iof_sem_timedwait(&M.sem, deadline);
    break;
  case K_COND:
    CHECK(iof_mutex_lock(&M.m) == 0);
    r = iof_cond_timedwait(&M.c, &M.m, deadline);
    CHECK(iof_mutex_unlock(&M.m) == 0);
    break;
  case K_MUTEX:
    r = iof_mutex_timedlock(&M.held, deadline);
    break;
  case K_EVENT:
    r = iof_event_timedwait(&M.e, deadline);
    break;
  case K_CHAN:
    r = iof_chan_recv_until(M.ch[0], &v, deadline);
    break;
  case K_SELECT: {
    iof_chan_case cs[2] = {{M.ch[0], IOF_CHAN_RECV, &v, 0},
                           {M.ch[1], IOF_CHAN_RECV, &v, 0}};
    r = iof_chan_select_until(cs, 2, deadline);
    break;
  }
  case K_SLEEP:
    r = iof_sleep_until(deadline) == 0 ? -ETIMEDOUT : -EIO;
    break;
  }
  if (r == -ETIMEDOUT)
    atomic_fetch_add(&M.timed_out, 1);
  else
    atomic_fetch_add(&M.other, 1);
  if (iof_now_ns() < deadline) atomic_fetch_add(&M.early, 1);
  return 0;
}

static void many_timed_waits_of_each_kind_all_time_out(void **state) {
  (void)state;
  assert_int_equal(iof_sem_init(&M.sem, 0), 0);
  assert_int_equal(iof_mutex_init(&M.m), 0);
  assert_int_equal(iof_cond_init(&M.c), 0);
  assert_int_equal(iof_mutex_init(&M.held), 0);
  assert_int_equal(iof_event_init(&M.e, false), 0);
  M.ch[0] = iof_chan_create(sizeof(int), 0);
  M.ch[1] = iof_chan_create(sizeof(int), 0);
  assert_non_null(M.ch[0]);
  assert_non_null(M.ch[1]);
  assert_int_equal(iof_mutex_lock(&M.held), 0);
  iof_launch_opts o = {0};
  o.frame_allocator = iof_malloc_allocator();
  o.stack_size = IOF_FIBER_STACK_MIN;
  for (int k = 0; k < K_COUNT; k++) {
    M.kind = k;
    atomic_store(&M.timed_out, 0);
    atomic_store(&M.early, 0);
    atomic_store(&M.other, 0);
    iof_io_context *io = new_io();
    uint64_t t0 = iof_test_now_ns();
    /* Deadlines from 100 ms to 200 ms ahead (1 us apart at 100,000), in
     * reverse launch order: each arm goes to the top of the heap. */
    M.base = iof_now_ns() + 100 * MS;
    for (int i = 0; i < MANY; i++)
      assert_int_equal(
          iof_run_async(iof_io_context_executor(io), &o, many_fn,
                        (void *)(intptr_t)((MANY - i) * (100000 / MANY))),
          0);
    assert_true(iof_io_context_run(io) >= 0);
    int64_t ms = ms_since(t0);
    assert_int_equal(iof_io_context_destroy(io), 0);
    printf("%d %s waits: %lld ms\n", MANY, kind_names[k], (long long)ms);
    assert_int_equal(atomic_load(&M.timed_out), MANY);
    assert_int_equal(atomic_load(&M.other), 0);
    assert_int_equal(atomic_load(&M.early), 0);
    assert_true(ms < (UNDER_SANITIZER ? 60000 : 30000)); /* a hang guard */
  }
  assert_int_equal(iof_mutex_unlock(&M.held), 0);
  assert_int_equal(iof_chan_destroy(M.ch[0]), 0);
  assert_int_equal(iof_chan_destroy(M.ch[1]), 0);
  assert_int_equal(iof_event_destroy(&M.e), 0);
  assert_int_equal(iof_mutex_destroy(&M.held), 0);
  assert_int_equal(iof_cond_destroy(&M.c), 0);
  assert_int_equal(iof_mutex_destroy(&M.m), 0);
  assert_int_equal(iof_sem_destroy(&M.sem), 0);
  assert_no_failures();
}

/* ---- thread pool and plain thread --------------------------------------- */

typedef struct pool_case {
  iof_sem s;
  atomic_int timed_out;
  atomic_int slept;
  atomic_int done;
} pool_case;

static int pool_fn(void *arg) {
  pool_case *pc = arg;
  int64_t t0 = iof_now_ns();
  int r = iof_sem_timedwait(&pc->s, iof_deadline_after(20 * MS));
  CHECK(r == -ETIMEDOUT);
  CHECK(iof_now_ns() - t0 >= 20 * MS);
  if (r == -ETIMEDOUT) atomic_fetch_add(&pc->timed_out, 1);
  t0 = iof_now_ns();
  r = iof_sleep_for(10 * MS);
  CHECK(r == 0);
  CHECK(iof_now_ns() - t0 >= 10 * MS);
  if (r == 0) atomic_fetch_add(&pc->slept, 1);
  return 0;
}

static void pool_done(void *user, int status) {
  (void)status;
  atomic_fetch_add(&((pool_case *)user)->done, 1);
}

static void timed_waits_on_a_pool_and_a_thread_use_the_service(void **state) {
  (void)state;
  pool_case pc;
  assert_int_equal(iof_sem_init(&pc.s, 0), 0);
  atomic_init(&pc.timed_out, 0);
  atomic_init(&pc.slept, 0);
  atomic_init(&pc.done, 0);
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  enum { N = 1000 };
  iof_launch_opts o = {0};
  o.on_done = pool_done;
  o.user = &pc;
  for (int i = 0; i < N; i++)
    assert_int_equal(
        iof_run_async(iof_thread_pool_executor(p), &o, pool_fn, &pc), 0);
  /* Meanwhile a plain thread (this one) times out too. */
  int64_t t0 = iof_now_ns();
  assert_int_equal(iof_sem_timedwait(&pc.s, iof_deadline_after(15 * MS)),
                   -ETIMEDOUT);
  assert_true(iof_now_ns() - t0 >= 15 * MS);
  assert_true(iof__timer_service_running());
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(atomic_load(&pc.done), N);
  assert_int_equal(atomic_load(&pc.timed_out), N);
  assert_int_equal(atomic_load(&pc.slept), N);
  /* Idle: the service's thread leaves on its own. */
  uint64_t w0 = iof_test_now_ns();
  while (iof__timer_service_running() && ms_since(w0) < 5000) sleep_ms(5);
  assert_false(iof__timer_service_running());
  /* And comes back for the next timed wait. */
  assert_int_equal(iof_sem_timedwait(&pc.s, iof_deadline_after(2 * MS)),
                   -ETIMEDOUT);
  assert_int_equal(iof_sem_destroy(&pc.s), 0);
  assert_no_failures();
}

/* ---- fork ---------------------------------------------------------------- */

static void *service_busy(void *arg) {
  iof_sem *s = arg;
  /* Keeps a timer armed on the service while the main thread forks. */
  iof_sem_timedwait(s, iof_deadline_after(200 * MS));
  return NULL;
}

static void a_forked_child_gets_its_own_timer_service(void **state) {
  (void)state;
  if (UNDER_TSAN) skip(); /* TSan does not support threads after fork */
  iof_sem s;
  assert_int_equal(iof_sem_init(&s, 0), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, service_busy, &s), 0);
  sleep_ms(20);
  assert_true(iof__timer_service_running());
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* The parent's service thread does not exist here. */
    int r = iof_sem_timedwait(&s, iof_deadline_after(10 * MS));
    _exit(r == -ETIMEDOUT ? 0 : 1);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  pthread_join(th, NULL);
  assert_int_equal(iof_sem_destroy(&s), 0);
}

/* ---- cancel racing timeout racing wake ---------------------------------- */

typedef struct race {
  iof_sem s;
  iof_stop_source src;
  int64_t after;
  atomic_int started;
  atomic_int result;
  atomic_int resumed; /* times the waiter returned */
  atomic_int finished;
} race;

static int race_waiter(void *arg) {
  race *r = arg;
  int64_t deadline = iof_now_ns() + r->after;
  atomic_store(&r->started, 1);
  int res = iof_sem_timedwait(&r->s, deadline);
  atomic_store(&r->result, res);
  atomic_fetch_add(&r->resumed, 1);
  return 0;
}

static void race_done(void *user, int status) {
  (void)status;
  atomic_store(&((race *)user)->finished, 1);
}

static void *run_io_thread(void *arg) {
  iof_io_context_run(arg);
  return NULL;
}

static void spin_ns(int64_t ns) {
  int64_t end = iof_now_ns() + ns;
  while (iof_now_ns() < end) {
  }
}

static void run_races(iof_executor_ref ex, int rounds, int *counts) {
  for (int i = 0; i < rounds; i++) {
    race r;
    assert_int_equal(iof_sem_init(&r.s, 0), 0);
    assert_int_equal(iof_stop_source_init(&r.src), 0);
    atomic_init(&r.started, 0);
    atomic_init(&r.result, 1);
    atomic_init(&r.resumed, 0);
    atomic_init(&r.finished, 0);
    /* The three contenders land within a few microseconds of each other,
     * in an order that varies with i. */
    r.after = (i % 7) * 4000;
    iof_launch_opts o = {0};
    o.stop_token = iof_stop_source_token(&r.src);
    o.on_done = race_done;
    o.user = &r;
    assert_int_equal(iof_run_async(ex, &o, race_waiter, &r), 0);
    while (!atomic_load(&r.started)) {
    }
    spin_ns((i % 5) * 4000);
    if (i % 2) {
      assert_int_equal(iof_sem_post(&r.s), 0);
      iof_stop_source_request(&r.src);
    } else {
      iof_stop_source_request(&r.src);
      assert_int_equal(iof_sem_post(&r.s), 0);
    }
    uint64_t t0 = iof_test_now_ns();
    while (!atomic_load(&r.finished) && ms_since(t0) < 10000) sched_yield();
    assert_true(atomic_load(&r.finished));
    assert_int_equal(atomic_load(&r.resumed), 1);
    int res = atomic_load(&r.result);
    /* The unit went to the waiter (0) or is still in the semaphore. */
    if (res == 0) {
      counts[0]++;
      assert_int_equal(iof_sem_value(&r.s), 0);
    } else {
      assert_true(res == -ETIMEDOUT || res == -ECANCELED);
      counts[res == -ETIMEDOUT ? 1 : 2]++;
      assert_int_equal(iof_sem_value(&r.s), 1);
      assert_int_equal(iof_sem_trywait(&r.s), 0);
    }
    assert_int_equal(iof_sem_destroy(&r.s), 0);
    iof_stop_source_destroy(&r.src);
  }
}

static void cancel_timeout_and_wake_race_resume_once(void **state) {
  (void)state;
  int counts[3] = {0, 0, 0};
  /* Half on a thread pool (the timer service fires)... */
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  run_races(iof_thread_pool_executor(p), ROUNDS / 2, counts);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  /* ...half on an io_context run by another thread (its loop fires). */
  iof_io_context *io = new_io();
  iof_work_guard g;
  assert_int_equal(iof_work_guard_init(&g, iof_io_context_executor(io)), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, run_io_thread, io), 0);
  run_races(iof_io_context_executor(io), ROUNDS / 2, counts);
  iof_work_guard_reset(&g);
  pthread_join(th, NULL);
  assert_int_equal(iof_io_context_destroy(io), 0);
  printf("races: %d woken, %d timed out, %d cancelled\n", counts[0], counts[1],
         counts[2]);
  assert_int_equal(counts[0] + counts[1] + counts[2], ROUNDS);
}

/* ---- passed deadlines keep their order -------------------------------- */

/* A timer armed on the loop with a deadline passed already (an in-order
 * sleep preempted between its check and its arm) fires with the other due
 * timers in order of deadline, not of arming: three armed latest-first
 * fire earliest-first. */
typedef struct passed {
  iof_io_context *io;
  int order[3];
  int n;
} passed;

typedef struct passed_fire {
  passed *p;
  int id;
} passed_fire;

static void passed_fire_fn(void *arg) {
  passed_fire *f = arg;
  if (f->p->n < 3) f->p->order[f->p->n] = f->id;
  f->p->n++;
}

static int passed_fn(void *arg) {
  passed *p = arg;
  iof__timer t[3];
  passed_fire f[3];
  int64_t now = iof_now_ns();
  for (int i = 0; i < 3; i++) {
    f[i] = (passed_fire){p, i};
    CHECK(iof__timer_arm(&t[i], iof_io_context_executor(p->io),
                         now - (i + 1) * MS, passed_fire_fn, &f[i]) == 0);
  }
  CHECK(p->n == 0); /* never inside the arm */
  CHECK(iof_sleep_for(5 * MS) == 0);
  for (int i = 0; i < 3; i++) iof__timer_cancel(&t[i]);
  return 0;
}

static void passed_deadlines_fire_in_deadline_order(void **state) {
  (void)state;
  passed p = {new_io(), {-1, -1, -1}, 0};
  assert_int_equal(iof_launch(iof_io_context_executor(p.io), passed_fn, &p), 0);
  assert_true(iof_io_context_run(p.io) >= 1);
  assert_int_equal(p.n, 3);
  assert_int_equal(p.order[0], 2);
  assert_int_equal(p.order[1], 1);
  assert_int_equal(p.order[2], 0);
  assert_int_equal(iof_io_context_destroy(p.io), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
      T(many_timed_waits_of_each_kind_all_time_out),
      T(timed_waits_on_a_pool_and_a_thread_use_the_service),
      T(a_forked_child_gets_its_own_timer_service),
      T(cancel_timeout_and_wake_race_resume_once),
      T(passed_deadlines_fire_in_deadline_order),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
