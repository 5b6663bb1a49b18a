/* iof_when_all / iof_when_any: results and the first error, siblings stopped,
 * children on the caller's executor and from the chain's allocator (tracking
 * allocator: total == 1 + n, live back to 1 right after return: no
 * orphan), the winner of when_any and its losers stopped and awaited, a
 * stop of the parent forwarded, nesting, shutdown, errors; on an
 * io_context and on a thread pool.
 *
 * IOF_TEST_THREADED */
#include "sync_test.h"

/* ---- shared children ----------------------------------------------------- */

typedef struct kid {
  int ret;    /* what to return */
  int yields; /* yields first */
  bool block; /* then wait on `never` (until stopped) */
  iof_event *never;
  int wait_status; /* what the wait gave */
  iof_executor_ref seen_ex;
  iof_frame_allocator *seen_alloc;
  bool stop_possible;
} kid;

static int kid_fn(void *arg) {
  kid *k = arg;
  k->seen_ex = iof_env_current()->executor;
  k->seen_alloc = iof_current_frame_allocator();
  k->stop_possible = iof_stop_possible(iof_env_current()->stop_token);
  for (int i = 0; i < k->yields; i++) iof_yield();
  if (k->block) {
    k->wait_status = iof_event_wait(k->never);
    return k->wait_status;
  }
  return k->ret;
}

#define MAXK 8

typedef struct scen {
  int n;
  kid kids[MAXK];
  iof_fn fns[MAXK];
  void *args[MAXK];
  int statuses[MAXK];
  int result;
  int winner;
  bool any;
  iof_event never;
  iof_frame_allocator *track;
  iof_tracking_stats after; /* right after the call returned */
  iof_executor_ref parent_ex;
} scen;

static void scen_init(scen *s, int n, bool any) {
  memset(s, 0, sizeof *s);
  s->n = n;
  s->any = any;
  iof_event_init(&s->never, true);
  for (int i = 0; i < n; i++) {
    s->fns[i] = kid_fn;
    s->args[i] = &s->kids[i];
    s->kids[i].never = &s->never;
    s->statuses[i] = 12345;
  }
}

static int scen_main(void *arg) {
  scen *s = arg;
  s->parent_ex = iof_env_current()->executor;
  if (s->any)
    s->result = iof_when_any((size_t)s->n, s->fns, s->args, &s->winner);
  else
    s->result = iof_when_all((size_t)s->n, s->fns, s->args, s->statuses);
  if (s->track) iof_tracking_allocator_stats(s->track, &s->after);
  return 0;
}

/* Runs scen_main on ex (run by io if non-NULL, else a pool joined here),
 * with a tracking allocator as the chain's frame allocator. */
static void run_scen(scen *s, iof_io_context *io, iof_thread_pool *p) {
  s->track = iof_tracking_allocator_create(NULL);
  assert_non_null(s->track);
  iof_launch_opts o = {0};
  o.frame_allocator = s->track;
  iof_executor_ref ex =
      io ? iof_io_context_executor(io) : iof_thread_pool_executor(p);
  assert_int_equal(iof_run_async(ex, &o, scen_main, s), 0);
  if (io)
    assert_true(iof_io_context_run(io) >= 0);
  else
    assert_int_equal(iof_thread_pool_join(p), 0);
  iof_tracking_stats st;
  assert_int_equal(iof_tracking_allocator_stats(s->track, &st), 0);
  /* The parent plus one frame per child, all from the chain's allocator. */
  assert_int_equal(st.total, 1 + (size_t)s->n);
  assert_int_equal(st.live, 0);
  /* No orphan: right after the call only the parent was live. */
  assert_int_equal(s->after.live, 1);
  assert_int_equal(iof_tracking_allocator_destroy(s->track), 0);
  for (int i = 0; i < s->n; i++)
    assert_true(iof_executor_equal(s->kids[i].seen_ex, s->parent_ex));
  for (int i = 0; i < s->n; i++)
    assert_ptr_equal(s->kids[i].seen_alloc, s->track);
  assert_int_equal(iof_event_destroy(&s->never), 0);
}

static void on_io(scen *s) {
  iof_io_context *io = iof_io_context_create();
  run_scen(s, io, NULL);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void on_pool(scen *s) {
  iof_thread_pool *p = iof_thread_pool_create(4);
  run_scen(s, NULL, p);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

/* ---- when_all ------------------------------------------------------------ */

static void all_results(void **state) {
  (void)state;
  for (int where = 0; where < 2; where++) {
    scen s;
    scen_init(&s, 5, false);
    for (int i = 0; i < 5; i++) {
      s.kids[i].ret = i * 10;
      s.kids[i].yields = i % 3;
    }
    where ? on_pool(&s) : on_io(&s);
    assert_int_equal(s.result, 0);
    for (int i = 0; i < 5; i++) {
      assert_int_equal(s.statuses[i], i * 10);
      assert_true(s.kids[i].stop_possible); /* linked child tokens */
    }
  }
}

static void all_first_error_stops_siblings(void **state) {
  (void)state;
  for (int where = 0; where < 2; where++) {
    scen s;
    scen_init(&s, 4, false);
    s.kids[0].ret = -EIO;
    s.kids[0].yields = 2;
    for (int i = 1; i < 4; i++) s.kids[i].block = true;
    where ? on_pool(&s) : on_io(&s);
    assert_int_equal(s.result, -EIO);
    assert_int_equal(s.statuses[0], -EIO);
    for (int i = 1; i < 4; i++) {
      assert_int_equal(s.kids[i].wait_status, -ECANCELED);
      assert_int_equal(s.statuses[i], -ECANCELED);
    }
  }
}

/* The first error in time, not in index order. */
static void all_first_error_in_time(void **state) {
  (void)state;
  scen s;
  scen_init(&s, 3, false);
  s.kids[0].ret = -EIO;
  s.kids[0].yields = 5;
  s.kids[1].ret = -ENOENT;
  s.kids[2].ret = 1;
  on_io(&s);
  assert_int_equal(s.result, -ENOENT);
  assert_int_equal(s.statuses[0], -EIO);
  assert_int_equal(s.statuses[2], 1);
}

/* ---- when_any ------------------------------------------------------------ */

static void any_winner(void **state) {
  (void)state;
  for (int where = 0; where < 2; where++) {
    scen s;
    scen_init(&s, 4, true);
    s.kids[0].block = true; /* a loser that waits: stopped */
    s.kids[1].ret = -EIO;   /* errors never win */
    s.kids[2].ret = 7;
    s.kids[2].yields = 2;
    s.kids[3].block = true;
    where ? on_pool(&s) : on_io(&s);
    assert_int_equal(s.result, 7);
    assert_int_equal(s.winner, 2);
    assert_int_equal(s.kids[0].wait_status, -ECANCELED);
    assert_int_equal(s.kids[3].wait_status, -ECANCELED);
  }
}

static void any_all_fail(void **state) {
  (void)state;
  scen s;
  scen_init(&s, 3, true);
  s.kids[0].ret = -EIO;
  s.kids[0].yields = 3;
  s.kids[1].ret = -ENOENT;
  s.kids[2].ret = -EPIPE;
  s.kids[2].yields = 1;
  on_io(&s);
  assert_int_equal(s.result, -ENOENT);
  assert_int_equal(s.winner, -1);
}

/* Many rounds on a pool: the winner is unique, losers are all stopped and
 * awaited before the call returns. */
#define ANY_ROUNDS (SYNC_TSAN ? 30 : 200)

static void done_release(void *user, int status) {
  __atomic_store_n((int *)user, status, __ATOMIC_RELEASE);
}

static void any_races(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(4);
  /* Trackers are destroyed after the pool is joined: a frame freed on a
   * pool thread is only ordered before this thread by the join. */
  static iof_frame_allocator *trackers[ANY_ROUNDS];
  for (int r = 0; r < ANY_ROUNDS; r++) {
    scen s;
    scen_init(&s, 4, true);
    for (int i = 0; i < 4; i++) {
      s.kids[i].ret = 100 + i;
      s.kids[i].yields = (r + i) % 3;
    }
    s.track = trackers[r] = iof_tracking_allocator_create(NULL);
    iof_launch_opts o = {0};
    o.frame_allocator = s.track;
    int st = 1;
    o.on_done = done_release;
    o.user = &st;
    assert_int_equal(
        iof_run_async(iof_thread_pool_executor(p), &o, scen_main, &s), 0);
    while (__atomic_load_n(&st, __ATOMIC_ACQUIRE) == 1) sleep_ms(0);
    assert_true(s.winner >= 0 && s.winner < 4);
    assert_int_equal(s.result, 100 + s.winner);
    /* Right after the call: the parent's frame only. */
    assert_int_equal(s.after.live, 1);
    assert_int_equal(s.after.total, 5);
    iof_event_destroy(&s.never);
  }
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  for (int r = 0; r < ANY_ROUNDS; r++) {
    iof_tracking_stats ts;
    iof_tracking_allocator_stats(trackers[r], &ts);
    assert_int_equal(ts.live, 0);
    assert_int_equal(iof_tracking_allocator_destroy(trackers[r]), 0);
  }
}

/* ---- stop of the parent, nesting, shutdown, errors ---------------------- */

typedef struct stopper {
  iof_stop_source *src;
} stopper;

static int stop_later(void *arg) {
  for (int i = 0; i < 5; i++) iof_yield();
  iof_stop_source_request(arg);
  return 0;
}

static void parent_stop_forwarded(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  scen s;
  scen_init(&s, 3, false);
  for (int i = 0; i < 3; i++) s.kids[i].block = true;
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  iof_executor_ref ex = iof_io_context_executor(io);
  assert_int_equal(iof_run_async(ex, &o, scen_main, &s), 0);
  assert_int_equal(iof_launch(ex, stop_later, &src), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(s.result, -ECANCELED);
  for (int i = 0; i < 3; i++)
    assert_int_equal(s.kids[i].wait_status, -ECANCELED);
  iof_stop_source_destroy(&src);
  iof_event_destroy(&s.never);
}

static int inner_all(void *arg) {
  (void)arg;
  iof_fn f[3] = {kid_fn, kid_fn, kid_fn};
  kid k[3];
  memset(k, 0, sizeof k);
  void *a[3] = {&k[0], &k[1], &k[2]};
  for (int i = 0; i < 3; i++) k[i].ret = i;
  int st[3];
  int r = iof_when_all(3, f, a, st);
  if (r != 0) return r;
  return st[0] + st[1] + st[2]; /* 3 */
}

static int nested_main(void *arg) {
  int *sum = arg;
  iof_fn f[2] = {inner_all, inner_all};
  int st[2];
  int r = iof_when_all(2, f, NULL, st);
  *sum = st[0] + st[1];
  return r;
}

static void nested(void **state) {
  (void)state;
  iof_frame_allocator *track = iof_tracking_allocator_create(NULL);
  iof_io_context *io = iof_io_context_create();
  int sum = 0, status = 1;
  iof_launch_opts o = {0};
  o.frame_allocator = track;
  o.on_done = sync_test_done;
  o.user = &status;
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, nested_main, &sum), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(status, 0);
  assert_int_equal(sum, 6);
  iof_tracking_stats st;
  iof_tracking_allocator_stats(track, &st);
  assert_int_equal(st.total, 1 + 2 + 2 * 3); /* all from the chain's */
  assert_int_equal(st.live, 0);
  assert_int_equal(iof_tracking_allocator_destroy(track), 0);
}

static void shutdown_unwinds(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  scen s;
  scen_init(&s, 3, false);
  for (int i = 0; i < 3; i++) s.kids[i].block = true;
  int status = 1;
  iof_launch_opts o = {0};
  o.on_done = sync_test_done;
  o.user = &status;
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, scen_main, &s), 0);
  iof_io_context_run_for(io, 20000000);
  assert_int_equal(status, 1);
  /* The blocked children are cancelled, the parent resumes and ends. */
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(status, 0);
  assert_int_equal(s.result, -ECANCELED);
  iof_event_destroy(&s.never);
}

static int err_fn(void *arg) {
  (void)arg;
  iof_fn f[1] = {kid_fn};
  iof_fn nul[1] = {NULL};
  int w = 5;
  if (iof_when_all(0, NULL, NULL, NULL) != 0) return -1;
  if (iof_when_any(0, f, NULL, &w) != -EINVAL || w != -1) return -2;
  if (iof_when_all(1, NULL, NULL, NULL) != -EINVAL) return -3;
  if (iof_when_all(1, nul, NULL, NULL) != -EINVAL) return -4;
  if (iof_when_any(1, nul, NULL, NULL) != -EINVAL) return -5;
  return 0;
}

static int stopped_fn(void *arg) {
  (void)arg;
  iof_fn f[1] = {kid_fn};
  kid k = {.ret = 1};
  void *a[1] = {&k};
  int st[1] = {9};
  int r1 = iof_when_all(1, f, a, st);
  int r2 = iof_when_any(1, f, a, NULL);
  return r1 == -ECANCELED && r2 == -ECANCELED && st[0] == 9 ? 0 : -1;
}

static void errors(void **state) {
  (void)state;
  iof_fn f[1] = {kid_fn};
  assert_int_equal(iof_when_all(1, f, NULL, NULL), -EPERM);
  assert_int_equal(iof_when_any(1, f, NULL, NULL), -EPERM);
  assert_int_equal(run_io(err_fn, NULL), 0);
  iof_stop_source src;
  iof_stop_source_init(&src);
  iof_stop_source_request(&src);
  iof_io_context *io = iof_io_context_create();
  int status = 1;
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  o.on_done = sync_test_done;
  o.user = &status;
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, stopped_fn, NULL), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(status, 0);
  iof_stop_source_destroy(&src);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(all_results, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(all_first_error_stops_siblings,
                                      sync_test_arm, sync_test_disarm),
      cmocka_unit_test_setup_teardown(all_first_error_in_time, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(any_winner, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(any_all_fail, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(any_races, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(parent_stop_forwarded, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(nested, sync_test_arm, sync_test_disarm),
      cmocka_unit_test_setup_teardown(shutdown_unwinds, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(errors, sync_test_arm, sync_test_disarm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
