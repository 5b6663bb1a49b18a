/* iof_chan: producer/consumer with 1e6 items across pool threads
 * and a plain thread (order per producer kept), unbuffered rendezvous,
 * close semantics (drain then -EPIPE, senders -EPIPE at once, waiters
 * woken), try ops, cancellation (nothing delivered, queue clean), select
 * (fairness over 3 ready channels, blocking select, closed cases,
 * select-to-select rendezvous, cancellation), timed operations.
 *
 * IOF_TEST_THREADED */
#include "sync_test.h"

#include <stdint.h>

/* ---- producer / consumer across threads --------------------------------- */

#define PRODUCERS 4 /* 3 fibers on the pool + 1 plain thread */
#define CONSUMERS 3
#define ITEMS_TOTAL (SYNC_TSAN ? 40000 : 1000000)

typedef struct item {
  uint32_t producer;
  uint32_t seq;
} item;

typedef struct pc {
  iof_chan *ch;
  uint32_t per_producer;
  atomic_int errors;
  atomic_long received;
  atomic_long sum;
  atomic_int producers_left;
} pc;

typedef struct pa {
  pc *s;
  uint32_t id;
} pa;

static void produce(pa *a) {
  for (uint32_t i = 0; i < a->s->per_producer; i++) {
    item it = {a->id, i};
    if (iof_chan_send(a->s->ch, &it) != 0) atomic_fetch_add(&a->s->errors, 1);
  }
  if (atomic_fetch_sub(&a->s->producers_left, 1) == 1) iof_chan_close(a->s->ch);
}

static int producer_fiber(void *arg) {
  produce(arg);
  return 0;
}

static void *producer_thread(void *arg) {
  produce(arg);
  return NULL;
}

static int consumer_fiber(void *arg) {
  pc *s = arg;
  int64_t last[PRODUCERS];
  for (int i = 0; i < PRODUCERS; i++) last[i] = -1;
  long n = 0, sum = 0;
  item it;
  int r;
  while ((r = iof_chan_recv(s->ch, &it)) == 0) {
    if (it.producer >= PRODUCERS || (int64_t)it.seq <= last[it.producer]) {
      atomic_fetch_add(&s->errors, 1); /* order per producer broken */
    } else {
      last[it.producer] = it.seq;
    }
    n++;
    sum += it.seq;
  }
  if (r != -EPIPE) atomic_fetch_add(&s->errors, 1);
  atomic_fetch_add(&s->received, n);
  atomic_fetch_add(&s->sum, sum);
  return 0;
}

static void run_pc(size_t capacity, long total) {
  pc s = {.per_producer = (uint32_t)(total / PRODUCERS)};
  s.ch = iof_chan_create(sizeof(item), capacity);
  assert_non_null(s.ch);
  atomic_store(&s.producers_left, PRODUCERS);
  iof_thread_pool *p = iof_thread_pool_create(4);
  iof_executor_ref ex = iof_thread_pool_executor(p);
  pa args[PRODUCERS];
  for (uint32_t i = 0; i < PRODUCERS; i++) args[i] = (pa){&s, i};
  for (int i = 0; i < CONSUMERS; i++)
    assert_int_equal(iof_launch(ex, consumer_fiber, &s), 0);
  for (int i = 0; i < PRODUCERS - 1; i++)
    assert_int_equal(iof_launch(ex, producer_fiber, &args[i]), 0);
  pthread_t t;
  assert_int_equal(
      pthread_create(&t, NULL, producer_thread, &args[PRODUCERS - 1]), 0);
  pthread_join(t, NULL);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(atomic_load(&s.errors), 0);
  long per = (long)s.per_producer;
  assert_int_equal(atomic_load(&s.received), PRODUCERS * per);
  assert_int_equal(atomic_load(&s.sum), PRODUCERS * (per * (per - 1) / 2));
  assert_int_equal(iof_chan_destroy(s.ch), 0);
}

static void pc_bounded(void **state) {
  (void)state;
  run_pc(64, ITEMS_TOTAL);
}

static void pc_unbuffered(void **state) {
  (void)state;
  run_pc(0, ITEMS_TOTAL / 5); /* a wake per item: slower */
}

/* ---- close semantics ---------------------------------------------------- */

typedef struct cl {
  iof_chan *full;  /* bounded, full: a sender waits */
  iof_chan *empty; /* unbuffered: receivers wait */
  int waiting;
  int send_status;
  int recv_status[2];
} cl;

static int blocked_sender(void *arg) {
  cl *c = arg;
  int v = 99;
  c->waiting++;
  c->send_status = iof_chan_send(c->full, &v);
  return 0;
}

static int blocked_receiver(void *arg) {
  cl *c = arg;
  int v;
  int i = c->waiting++ - 1;
  c->recv_status[i] = iof_chan_recv(c->empty, &v);
  return 0;
}

static int close_main(void *arg) {
  cl *c = arg;
  iof_executor_ref ex = iof_env_current()->executor;
  for (int i = 1; i <= 3; i++)
    if (iof_chan_send(c->full, &i) != 0) return -1;
  iof_launch(ex, blocked_sender, c);
  iof_launch(ex, blocked_receiver, c);
  iof_launch(ex, blocked_receiver, c);
  while (c->waiting < 3) iof_yield();
  iof_yield();
  if (iof_chan_close(c->full) != 0 || iof_chan_close(c->empty) != 0) return -2;
  if (iof_chan_close(c->full) != -EPIPE) return -3;
  int v = 0;
  if (iof_chan_send(c->full, &v) != -EPIPE) return -4;
  if (iof_chan_try_send(c->full, &v) != -EPIPE) return -5;
  /* Receivers drain what is left, then -EPIPE. */
  for (int i = 1; i <= 3; i++)
    if (iof_chan_recv(c->full, &v) != 0 || v != i) return -6;
  if (iof_chan_recv(c->full, &v) != -EPIPE) return -7;
  if (iof_chan_try_recv(c->full, &v) != -EPIPE) return -8;
  iof_yield();
  iof_yield();
  return 0;
}

static void close_semantics(void **state) {
  (void)state;
  cl c = {.waiting = 0};
  c.full = iof_chan_create(sizeof(int), 3);
  c.empty = iof_chan_create(sizeof(int), 0);
  assert_int_equal(run_io(close_main, &c), 0);
  assert_int_equal(c.send_status, -EPIPE);
  assert_int_equal(c.recv_status[0], -EPIPE);
  assert_int_equal(c.recv_status[1], -EPIPE);
  assert_true(iof_chan_closed(c.full));
  assert_int_equal(iof_chan_destroy(c.full), 0);
  assert_int_equal(iof_chan_destroy(c.empty), 0);
}

/* ---- try ops, errors, rendezvous ---------------------------------------- */

static void try_and_errors(void **state) {
  (void)state;
  errno = 0;
  assert_null(iof_chan_create(SIZE_MAX / 2, 4));
  assert_int_equal(errno, EINVAL);
  iof_chan *ch = iof_chan_create(sizeof(int), 2);
  assert_non_null(ch);
  assert_int_equal(iof_chan_cap(ch), 2);
  assert_int_equal(iof_chan_elem_size(ch), sizeof(int));
  int v = 1;
  assert_int_equal(iof_chan_send(NULL, &v), -EINVAL);
  assert_int_equal(iof_chan_send(ch, NULL), -EINVAL);
  assert_int_equal(iof_chan_recv(NULL, &v), -EINVAL);
  assert_int_equal(iof_chan_destroy(NULL), -EINVAL);
  assert_int_equal(iof_chan_close(NULL), -EINVAL);
  assert_int_equal(iof_chan_try_recv(ch, &v), -EAGAIN);
  assert_int_equal(iof_chan_try_send(ch, &v), 0);
  v = 2;
  assert_int_equal(iof_chan_send(ch, &v), 0); /* plain thread, room */
  assert_int_equal(iof_chan_try_send(ch, &v), -EAGAIN);
  assert_int_equal(iof_chan_len(ch), 2);
  assert_int_equal(iof_chan_recv(ch, NULL), 0); /* dropped */
  assert_int_equal(iof_chan_try_recv(ch, &v), 0);
  assert_int_equal(v, 2);
  assert_int_equal(iof_chan_destroy(ch), 0);
  /* Unbuffered: try_send needs a waiting receiver. */
  ch = iof_chan_create(0, 0);
  assert_int_equal(iof_chan_try_send(ch, NULL), -EAGAIN);
  assert_int_equal(iof_chan_try_recv(ch, NULL), -EAGAIN);
  assert_int_equal(iof_chan_destroy(ch), 0);
}

typedef struct rv {
  iof_chan *ch;
  int got;
  int sender_done;
  int seen_done_at_recv;
} rv;

static int rv_receiver(void *arg) {
  rv *r = arg;
  iof_yield();
  iof_yield();
  r->seen_done_at_recv = r->sender_done;
  return iof_chan_recv(r->ch, &r->got);
}

static int rv_main(void *arg) {
  rv *r = arg;
  iof_launch(iof_env_current()->executor, rv_receiver, r);
  int v = 42;
  int st = iof_chan_send(r->ch, &v); /* waits for the receiver */
  r->sender_done = 1;
  if (r->got != 42) return -100;
  return st;
}

static void rendezvous(void **state) {
  (void)state;
  rv r = {.ch = iof_chan_create(sizeof(int), 0)};
  assert_int_equal(run_io(rv_main, &r), 0);
  assert_int_equal(r.seen_done_at_recv, 0);
  assert_int_equal(r.got, 42);
  assert_int_equal(iof_chan_destroy(r.ch), 0);
}

/* ---- cancellation ------------------------------------------------------- */

typedef struct cn {
  iof_chan *ch;
  iof_stop_source src;
  int status;
  int waiting;
} cn;

static int cn_sender(void *arg) {
  cn *c = arg;
  int v = 7;
  c->waiting = 1;
  c->status = iof_chan_send(c->ch, &v);
  return 0;
}

static int cn_main(void *arg) {
  cn *c = arg;
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&c->src);
  iof_run_async(iof_env_current()->executor, &o, cn_sender, c);
  while (!c->waiting) iof_yield();
  iof_yield();
  iof_stop_source_request(&c->src);
  iof_yield();
  iof_yield();
  int v;
  /* Nothing was delivered, and the sender's node is gone. */
  if (iof_chan_try_recv(c->ch, &v) != -EAGAIN) return -1;
  return 0;
}

static void cancel_send(void **state) {
  (void)state;
  cn c = {.ch = iof_chan_create(sizeof(int), 0), .status = 1};
  assert_int_equal(iof_stop_source_init(&c.src), 0);
  assert_int_equal(run_io(cn_main, &c), 0);
  assert_int_equal(c.status, -ECANCELED);
  assert_int_equal(iof_chan_destroy(c.ch), 0); /* no waiter left behind */
  iof_stop_source_destroy(&c.src);
}

/* ---- select ----------------------------------------------------------- */

#define FAIR_ROUNDS 30000

static void select_fairness(void **state) {
  (void)state;
  iof_chan *ch[3];
  for (int i = 0; i < 3; i++) ch[i] = iof_chan_create(0, FAIR_ROUNDS);
  int picks[3] = {0, 0, 0};
  for (int r = 0; r < FAIR_ROUNDS; r++) {
    iof_chan_case cs[3];
    for (int i = 0; i < 3; i++)
      cs[i] = (iof_chan_case){ch[i], IOF_CHAN_SEND, NULL, 0};
    int k = iof_chan_select(cs, 3); /* always ready: never waits */
    assert_true(k >= 0 && k < 3);
    assert_int_equal(cs[k].status, 0);
    picks[k]++;
  }
  for (int i = 0; i < 3; i++) {
    /* ~1/3 each: 10,000 +- 5 %. */
    assert_true(picks[i] > FAIR_ROUNDS / 3 * 95 / 100);
    assert_true(picks[i] < FAIR_ROUNDS / 3 * 105 / 100);
    assert_int_equal(iof_chan_len(ch[i]), (size_t)picks[i]);
    assert_int_equal(iof_chan_destroy(ch[i]), 0);
  }
}

typedef struct sel {
  iof_chan *a, *b, *c;
  iof_stop_source src;
  int index;
  int got;
  int status;
  int waiting;
  int cancelled_index;
} sel;

static int sel_waiter(void *arg) {
  sel *s = arg;
  int in = 0, out = 5;
  iof_chan_case cs[4] = {
      {s->a, IOF_CHAN_RECV, &in, 1},
      {NULL, IOF_CHAN_RECV, NULL, 1}, /* disabled */
      {s->b, IOF_CHAN_RECV, &in, 1},
      {s->c, IOF_CHAN_SEND, &out, 1},
  };
  s->waiting = 1;
  s->index = iof_chan_select(cs, 4);
  if (s->index >= 0) s->status = cs[s->index].status;
  s->got = in;
  return 0;
}

static int sel_cancelled(void *arg) {
  sel *s = arg;
  int in;
  iof_chan_case cs[2] = {{s->a, IOF_CHAN_RECV, &in, 1},
                         {s->b, IOF_CHAN_RECV, &in, 1}};
  s->waiting = 1;
  s->cancelled_index = iof_chan_select(cs, 2);
  return 0;
}

static int sel_main(void *arg) {
  sel *s = arg;
  iof_executor_ref ex = iof_env_current()->executor;
  /* 1. Blocks, then b gets an element: index 2. */
  iof_launch(ex, sel_waiter, s);
  while (!s->waiting) iof_yield();
  iof_yield();
  int v = 11;
  if (iof_chan_send(s->b, &v) != 0) return -1;
  iof_yield();
  iof_yield();
  if (s->index != 2 || s->got != 11 || s->status != 0) return -2;
  /* Its other nodes are gone: a and c have no waiter left. */
  if (iof_chan_try_send(s->a, &v) != -EAGAIN) return -3;
  if (iof_chan_try_recv(s->c, &v) != -EAGAIN) return -4;
  /* 2. A select-to-select rendezvous: the waiter sends on c, we select
   * recv on c. */
  s->waiting = 0;
  iof_launch(ex, sel_waiter, s);
  while (!s->waiting) iof_yield();
  iof_yield();
  int in = 0;
  iof_chan_case mine[1] = {{s->c, IOF_CHAN_RECV, &in, 1}};
  if (iof_chan_select(mine, 1) != 0 || in != 5 || mine[0].status != 0)
    return -5;
  iof_yield();
  if (s->index != 3) return -6;
  /* 3. A closed channel makes its case ready with -EPIPE. */
  s->waiting = 0;
  iof_launch(ex, sel_waiter, s);
  while (!s->waiting) iof_yield();
  iof_yield();
  iof_chan_close(s->a);
  iof_yield();
  iof_yield();
  if (s->index != 0 || s->status != -EPIPE) return -7;
  /* 4. Cancellation. */
  s->waiting = 0;
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&s->src);
  iof_chan *b2 = iof_chan_create(sizeof(int), 0);
  iof_chan *a = s->a;
  s->a = b2; /* two open channels */
  iof_run_async(ex, &o, sel_cancelled, s);
  while (!s->waiting) iof_yield();
  iof_yield();
  iof_stop_source_request(&s->src);
  iof_yield();
  iof_yield();
  s->a = a;
  if (s->cancelled_index != -ECANCELED) return -8;
  if (iof_chan_destroy(b2) != 0) return -9; /* its node was unlinked */
  return 0;
}

static void select_cases(void **state) {
  (void)state;
  sel s = {.index = -100};
  s.a = iof_chan_create(sizeof(int), 0);
  s.b = iof_chan_create(sizeof(int), 0);
  s.c = iof_chan_create(sizeof(int), 0);
  assert_int_equal(iof_stop_source_init(&s.src), 0);
  assert_int_equal(run_io(sel_main, &s), 0);
  iof_chan_case none[2] = {{NULL, IOF_CHAN_RECV, NULL, 0},
                           {NULL, IOF_CHAN_SEND, NULL, 0}};
  assert_int_equal(iof_chan_select(none, 2), -EINVAL);
  assert_int_equal(iof_chan_select(NULL, 1), -EINVAL);
  assert_int_equal(iof_chan_select(none, 0), -EINVAL);
  iof_chan_case bad[1] = {{s.b, 7, NULL, 0}};
  assert_int_equal(iof_chan_select(bad, 1), -EINVAL);
  iof_chan_case tr[1] = {{s.b, IOF_CHAN_RECV, NULL, 0}};
  assert_int_equal(iof_chan_try_select(tr, 1), -EAGAIN);
  assert_int_equal(iof_chan_destroy(s.a), 0);
  assert_int_equal(iof_chan_destroy(s.b), 0);
  assert_int_equal(iof_chan_destroy(s.c), 0);
  iof_stop_source_destroy(&s.src);
}

/* A select across threads: a plain thread selects over two channels fed
 * by fibers on the pool. */
#define XSEL_ITEMS (SYNC_TSAN ? 2000 : 20000)

typedef struct xs {
  iof_chan *ch[2];
  int id;
} xs;

static int xs_feed(void *arg) {
  xs *x = arg;
  for (int i = 0; i < XSEL_ITEMS; i++)
    if (iof_chan_send(x->ch[x->id], &i) != 0) return -1;
  return 0;
}

static void select_threads(void **state) {
  (void)state;
  iof_chan *ch[2] = {iof_chan_create(sizeof(int), 0),
                     iof_chan_create(sizeof(int), 4)};
  xs a[2] = {{{ch[0], ch[1]}, 0}, {{ch[0], ch[1]}, 1}};
  iof_thread_pool *p = iof_thread_pool_create(2);
  for (int i = 0; i < 2; i++)
    assert_int_equal(iof_launch(iof_thread_pool_executor(p), xs_feed, &a[i]),
                     0);
  int next[2] = {0, 0};
  for (int n = 0; n < 2 * XSEL_ITEMS; n++) {
    int v[2] = {-1, -1};
    iof_chan_case cs[2] = {{ch[0], IOF_CHAN_RECV, &v[0], 0},
                           {ch[1], IOF_CHAN_RECV, &v[1], 0}};
    int k = iof_chan_select(cs, 2);
    assert_true(k == 0 || k == 1);
    assert_int_equal(v[k], next[k]);
    next[k]++;
  }
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_chan_destroy(ch[0]), 0);
  assert_int_equal(iof_chan_destroy(ch[1]), 0);
}

/* ---- timed ------------------------------------------------------------ */

static int timed_fiber(void *arg) {
  int v;
  return iof_chan_recv_until(arg, &v, iof_deadline_after(5000000));
}

static void timed(void **state) {
  (void)state;
  iof_chan *ch = iof_chan_create(sizeof(int), 1);
  int v = 1;
  assert_int_equal(iof_chan_recv_until(ch, &v, iof_deadline_after(2000000)),
                   -ETIMEDOUT);
  assert_int_equal(iof_chan_send_until(ch, &v, 0), 0); /* room: past is ok */
  assert_int_equal(iof_chan_send_until(ch, &v, iof_deadline_after(2000000)),
                   -ETIMEDOUT);
  assert_int_equal(iof_chan_recv(ch, &v), 0);
  iof_chan_case cs[1] = {{ch, IOF_CHAN_RECV, &v, 0}};
  assert_int_equal(iof_chan_select_until(cs, 1, iof_deadline_after(2000000)),
                   -ETIMEDOUT);
  assert_int_equal(run_io(timed_fiber, ch), -ETIMEDOUT);
  assert_int_equal(iof_chan_destroy(ch), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(pc_bounded, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(pc_unbuffered, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(close_semantics, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(try_and_errors, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(rendezvous, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(cancel_send, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(select_fairness, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(select_cases, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(select_threads, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(timed, sync_test_arm, sync_test_disarm),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  return r;
}
