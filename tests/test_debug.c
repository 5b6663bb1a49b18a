/* The registry of live fibers (iof_fiber_walk, iof_fiber_dump): every
 * launched fiber is listed from launch to end, in launch order, with its
 * name, state, executor kind and what it waits on; finished fibers are gone
 * from the list; the dump writes one line per fiber.
 *
 * IOF_TEST_THREADED: fibers launched by several threads, some of which end
 * on another thread. */
#include "io_test.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEEN 16

typedef struct seen {
  unsigned long id;
  char name[32];
  iof_fiber_run_state state;
  const char *kind;
  const void *ex;
  char waiting[64];
  const void *waiting_on;
} seen;

typedef struct scene {
  iof_io_context *io;
  iof_strand *strand;
  iof_socket *sock;
  int fds[2];
  iof_event ev;
  iof_stop_source stop;
  seen seen[MAX_SEEN];
  int nseen;
  int walked;
  char dump[2048];
  int dumped;
  int read_result, wait_result, strand_result, sleep_result;
} scene;

static scene sc;

static int reader(void *arg) {
  (void)arg;
  char c;
  sc.read_result = (int)iof_read_some(sc.sock, &c, 1);
  return 0;
}

static int waiter(void *arg) {
  int *out = arg;
  *out = iof_event_wait(&sc.ev);
  return 0;
}

static int sleeper(void *arg) {
  (void)arg;
  sc.sleep_result = iof_sleep_for((int64_t)10 * 1000000000);
  return 0;
}

static int never(void *arg) {
  (void)arg;
  return 0;
}

static int collect(const iof_fiber_info *i, void *arg) {
  (void)arg;
  if (sc.nseen == MAX_SEEN) return 1;
  seen *s = &sc.seen[sc.nseen++];
  s->id = i->id;
  snprintf(s->name, sizeof s->name, "%s", i->name);
  s->state = i->state;
  s->kind = i->executor_kind;
  s->ex = i->executor.ex;
  snprintf(s->waiting, sizeof s->waiting, "%s", i->waiting);
  s->waiting_on = i->waiting_on;
  return 0;
}

static int stop_at_first(const iof_fiber_info *i, void *arg) {
  (void)i;
  (*(int *)arg)++;
  return 1;
}

static int inspector(void *arg) {
  (void)arg;
  iof_launch_opts o = {.name = "never"};
  iof_run_async(iof_io_context_executor(sc.io), &o, never, NULL);
  sc.walked = iof_fiber_walk(collect, NULL);
  FILE *f = fmemopen(sc.dump, sizeof sc.dump - 1, "w");
  if (f) {
    sc.dumped = iof_fiber_dump(f);
    fclose(f);
  }
  /* Release everyone. */
  char c = 'x';
  if (write(sc.fds[1], &c, 1) != 1) sc.dumped = -1000;
  iof_event_set(&sc.ev);
  iof_stop_source_request(&sc.stop);
  return 0;
}

static void launch_named(iof_executor_ref ex, const char *name, iof_fn fn,
                         void *arg, iof_stop_token tok) {
  iof_launch_opts o = {.name = name, .stop_token = tok};
  assert_int_equal(iof_run_async(ex, &o, fn, arg), 0);
}

static const seen *find(const char *name) {
  for (int i = 0; i < sc.nseen; i++)
    if (strcmp(sc.seen[i].name, name) == 0) return &sc.seen[i];
  return NULL;
}

static void walk_lists_live_fibers(void **state) {
  (void)state;
  memset(&sc, 0, sizeof sc);
  sc.io = iof_io_context_create();
  assert_non_null(sc.io);
  sc.strand = iof_strand_create(iof_io_context_executor(sc.io));
  assert_non_null(sc.strand);
  raw_tcp_pair(sc.fds);
  assert_int_equal(iof_socket_adopt(sc.io, sc.fds[0], &sc.sock), 0);
  assert_int_equal(iof_event_init(&sc.ev, true), 0);
  assert_int_equal(iof_stop_source_init(&sc.stop), 0);
  assert_int_equal(iof_fiber_walk(collect, NULL), 0); /* nothing live yet */

  iof_executor_ref ex = iof_io_context_executor(sc.io);
  iof_stop_token none = {0};
  launch_named(ex, "reader", reader, NULL, none);
  launch_named(ex, "waiter", waiter, &sc.wait_result, none);
  launch_named(iof_strand_executor(sc.strand), "stranded", waiter,
               &sc.strand_result, none);
  launch_named(ex, "sleeper", sleeper, NULL, iof_stop_source_token(&sc.stop));
  launch_named(ex, "inspector", inspector, NULL, none);

  /* Before running: all five listed, never started, in launch order. */
  int stopped = 0;
  assert_int_equal(iof_fiber_walk(stop_at_first, &stopped), 1);
  assert_int_equal(stopped, 1);
  sc.nseen = 0;
  assert_int_equal(iof_fiber_walk(collect, NULL), 5);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(sc.seen[i].state, IOF_FIBER_CREATED);
    assert_string_equal(sc.seen[i].waiting, "");
    if (i) assert_true(sc.seen[i].id > sc.seen[i - 1].id);
  }
  assert_string_equal(sc.seen[0].name, "reader");
  assert_string_equal(sc.seen[4].name, "inspector");
  sc.nseen = 0;

  run_all(sc.io);

  /* What the inspector saw from inside. */
  assert_int_equal(sc.walked, 6);
  assert_int_equal(sc.nseen, 6);
  const seen *r = find("reader"), *w = find("waiter"), *s = find("stranded"),
             *sl = find("sleeper"), *in = find("inspector"),
             *nv = find("never");
  assert_true(r && w && s && sl && in && nv);
  assert_int_equal(r->state, IOF_FIBER_SUSPENDED);
  assert_string_equal(r->waiting, "io: socket readable");
  assert_ptr_equal(r->waiting_on, sc.sock);
  assert_string_equal(r->kind, "io_context");
  assert_ptr_equal(r->ex, ex.ex);
  assert_int_equal(w->state, IOF_FIBER_SUSPENDED);
  assert_string_equal(w->waiting,
                      "sync primitive (mutex, cond, sem, event, chan)");
  assert_non_null(w->waiting_on); /* the wait's record, on its stack */
  assert_int_equal(s->state, IOF_FIBER_SUSPENDED);
  assert_string_equal(s->kind, "strand");
  assert_string_equal(s->waiting, w->waiting);
  assert_int_equal(sl->state, IOF_FIBER_SUSPENDED);
  assert_string_equal(sl->waiting, "io: timer, signal or resolver");
  assert_int_equal(in->state, IOF_FIBER_RUNNING);
  assert_string_equal(in->waiting, "");
  assert_int_equal(nv->state, IOF_FIBER_CREATED);
  assert_true(nv->id > in->id);

  /* The dump: one line per fiber. */
  assert_int_equal(sc.dumped, 6);
  int lines = 0;
  for (const char *p = sc.dump; *p; p++) lines += *p == '\n';
  assert_int_equal(lines, 6);
  assert_non_null(strstr(sc.dump, "\"reader\" suspended on io_context@"));
  assert_non_null(strstr(sc.dump, "waiting: io: socket readable @"));
  assert_non_null(strstr(sc.dump, "\"inspector\" running on io_context@"));
  assert_non_null(strstr(sc.dump, "\"never\" created on io_context@"));
  assert_non_null(strstr(sc.dump, "\"stranded\" suspended on strand@"));

  /* Everyone finished normally and left the registry. */
  assert_int_equal(sc.read_result, 1);
  assert_int_equal(sc.wait_result, 0);
  assert_int_equal(sc.strand_result, 0);
  assert_int_equal(sc.sleep_result, -ECANCELED);
  assert_int_equal(iof_fiber_walk(collect, NULL), 0);

  iof_socket_free(sc.sock);
  close(sc.fds[1]);
  iof_event_destroy(&sc.ev);
  iof_stop_source_destroy(&sc.stop);
  assert_int_equal(iof_strand_destroy(sc.strand), 0);
  assert_int_equal(iof_io_context_destroy(sc.io), 0);
}

static void destroy_drops_unstarted(void **state) {
  (void)state;
  memset(&sc, 0, sizeof sc);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  assert_int_equal(iof_launch(iof_io_context_executor(io), never, NULL), 0);
  assert_int_equal(iof_fiber_walk(collect, NULL), 1);
  assert_int_equal(iof_io_context_destroy(io), 0); /* never ran: cancelled */
  assert_int_equal(iof_fiber_walk(collect, NULL), 0);
}

static void bad_args(void **state) {
  (void)state;
  assert_int_equal(iof_fiber_walk(NULL, NULL), -EINVAL);
  char buf[64];
  FILE *f = fmemopen(buf, sizeof buf, "w");
  assert_non_null(f);
  assert_int_equal(iof_fiber_dump(f), 0); /* no live fiber: no line */
  fclose(f);
}

/* ---- several launching threads ----------------------------------------- */

#define THREADS 4
#define PER_THREAD 10

typedef struct launcher {
  pthread_t t;
  int index;
  iof_thread_pool *pool; /* some of its fibers end there */
  atomic_int *launched;
  atomic_bool *go;
  atomic_int pool_done;
} launcher;

static void count_done(void *user, int status) {
  (void)status;
  atomic_fetch_add(&((launcher *)user)->pool_done, 1);
}

static void *launcher_main(void *arg) {
  launcher *l = arg;
  iof_io_context *io = iof_io_context_create();
  if (!io) abort();
  char name[32];
  for (int i = 0; i < PER_THREAD; i++) {
    snprintf(name, sizeof name, "t%d-%d", l->index, i);
    iof_launch_opts o = {.name = name};
    iof_executor_ref ex = iof_io_context_executor(io);
    if (i % 2) { /* launched here, run and ended on the pool */
      ex = iof_thread_pool_executor(l->pool);
      o.on_done = count_done;
      o.user = l;
    }
    if (iof_run_async(ex, &o, never, NULL) != 0) abort();
  }
  atomic_fetch_add(l->launched, 1);
  while (!atomic_load(l->go)) sched_yield();
  iof_io_context_run(io);
  iof_io_context_destroy(io);
  return NULL;
}

typedef struct by_thread {
  int n;
  unsigned long last_id[THREADS];
  int next[THREADS];      /* the next index expected from each thread (the
                            even ones stay on its io_context) */
  unsigned long last_any; /* the id seen before, any thread's */
  bool ordered;
  unsigned long ids[THREADS * PER_THREAD];
} by_thread;

static int check_order(const iof_fiber_info *i, void *arg) {
  by_thread *b = arg;
  int t = -1, k = -1;
  if (sscanf(i->name, "t%d-%d", &t, &k) != 2 || t < 0 || t >= THREADS)
    return 0; /* not one of ours */
  if (k != b->next[t] || (b->next[t] && i->id <= b->last_id[t]))
    b->ordered = false;
  if (b->n && i->id <= b->last_any) b->ordered = false; /* merged by id */
  b->last_any = i->id;
  b->next[t] = k + 2;
  b->last_id[t] = i->id;
  if (b->n < THREADS * PER_THREAD) b->ids[b->n] = i->id;
  b->n++;
  return 0;
}

static int walk_ours(by_thread *b) {
  memset(b, 0, sizeof *b);
  b->ordered = true;
  int n = iof_fiber_walk(check_order, b);
  for (int x = 0; x < b->n && x < THREADS * PER_THREAD; x++)
    for (int y = 0; y < x; y++) assert_true(b->ids[x] != b->ids[y]);
  return n;
}

/* Fibers launched by several threads are all listed, each thread's in its
 * launch order with unique ids, also once the threads (and their lists)
 * are gone and new threads launch; fibers that end on a pool thread leave
 * the list. Twice, so that the second round takes over the first round's
 * lists. */
static void walk_lists_fibers_of_every_thread(void **state) {
  (void)state;
  iof_thread_pool *pool = iof_thread_pool_create(2);
  assert_non_null(pool);
  for (int round = 0; round < 2; round++) {
    atomic_int launched = 0;
    atomic_bool go = false;
    launcher l[THREADS];
    for (int t = 0; t < THREADS; t++) {
      l[t] = (launcher){
          .index = t, .pool = pool, .launched = &launched, .go = &go};
      atomic_init(&l[t].pool_done, 0);
      assert_int_equal(pthread_create(&l[t].t, NULL, launcher_main, &l[t]), 0);
    }
    while (atomic_load(&launched) < THREADS) sched_yield();
    /* The pool runs its half at once: wait until those ended. */
    for (int t = 0; t < THREADS; t++)
      while (atomic_load(&l[t].pool_done) < PER_THREAD / 2) sched_yield();
    by_thread b;
    /* A pool fiber calls on_done before it leaves the list: let it. */
    for (int tries = 0; tries < 1000; tries++) {
      if (walk_ours(&b) == THREADS * PER_THREAD / 2) break;
      usleep(1000);
    }
    assert_int_equal(walk_ours(&b), THREADS * PER_THREAD / 2);
    assert_int_equal(b.n, THREADS * PER_THREAD / 2);
    assert_true(b.ordered);
    atomic_store(&go, true);
    for (int t = 0; t < THREADS; t++)
      assert_int_equal(pthread_join(l[t].t, NULL), 0);
    assert_int_equal(walk_ours(&b), 0);
  }
  assert_int_equal(iof_thread_pool_destroy(pool), 0);
}

IOF_TEST_WATCHDOG(setup, teardown, 20)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(walk_lists_live_fibers, setup, teardown),
      cmocka_unit_test_setup_teardown(destroy_drops_unstarted, setup, teardown),
      cmocka_unit_test_setup_teardown(bad_args, setup, teardown),
      cmocka_unit_test_setup_teardown(walk_lists_fibers_of_every_thread, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
