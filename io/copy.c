/* Copy and relay: one pump loop per direction over a caller's (or one
 * allocated) buffer. The idle timeout is a read deadline pushed forward
 * only when it expires: the pump then looks at the last time any
 * direction moved bytes, so a quiet direction of a busy relay costs one
 * deadline update per idle period, not one per chunk. */
#include <iofiber/stream.h>
#include <iofiber/timer.h>
#include <iofiber/when.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct pump {
  iof_stream *src, *dst;
  char *buf;
  size_t len;
  int64_t idle;
  _Atomic int64_t *last; /* shared by both directions of a relay */
  bool half_close;
  uint64_t moved;
} pump;

static int pump_run(void *arg) {
  pump *p = arg;
  int ret = 0;
  if (p->idle > 0) {
    ret = iof_stream_set_deadline(p->src, IOF_READ, iof_now_ns() + p->idle);
    if (ret == 0) ret = iof_stream_set_timeout(p->dst, IOF_WRITE, p->idle);
    if (ret < 0) goto out;
  }
  for (;;) {
    ssize_t n = iof_stream_read_some(p->src, p->buf, p->len);
    if (n == -ETIMEDOUT && p->idle > 0) {
      int64_t next =
          atomic_load_explicit(p->last, memory_order_relaxed) + p->idle;
      if (next > iof_now_ns()) { /* the other direction moved meanwhile */
        ret = iof_stream_set_deadline(p->src, IOF_READ, next);
        if (ret < 0) break;
        continue;
      }
    }
    if (n < 0) {
      ret = (int)n;
      break;
    }
    if (n == 0) {
      if (p->half_close) {
        int r = iof_stream_shutdown_write(p->dst);
        if (r < 0 && r != -ENOTSUP && r != -ENOTCONN) ret = r;
      }
      break;
    }
    ssize_t w = iof_stream_write(p->dst, p->buf, (size_t)n);
    if (w < 0) {
      ret = (int)w;
      break;
    }
    p->moved += (uint64_t)w;
    if (p->idle > 0)
      atomic_store_explicit(p->last, iof_now_ns(), memory_order_relaxed);
  }
out:
  if (p->idle > 0) {
    iof_stream_set_deadline(p->src, IOF_READ, 0);
    iof_stream_set_timeout(p->dst, IOF_WRITE, 0);
  }
  return ret;
}

static bool limits_ok(iof_stream *s) {
  return s->vtbl && s->vtbl->set_limit;
}

int iof_stream_copy(iof_stream *dst, iof_stream *src, const iof_copy_opts *opts,
                    uint64_t *copied) {
  if (copied) *copied = 0;
  iof_copy_opts o = {0};
  if (opts) o = *opts;
  if (!dst || !src || !dst->vtbl || !src->vtbl) return -EINVAL;
  if (o.idle_ns > 0 && (!limits_ok(src) || !limits_ok(dst))) return -ENOTSUP;
  /* A caller's buffer of unknown size would be overrun by the default;
   * no allocation can be larger than half the address space. */
  if (o.buf && !o.buf_len) return -EINVAL;
  if (o.idle_ns > INT64_MAX / 2) o.idle_ns = INT64_MAX / 2; /* added to now */
  if (o.buf_len > SIZE_MAX / 2) return -ENOMEM;
  size_t len = o.buf_len ? o.buf_len : IOF_COPY_DEFAULT_BUF;
  char *buf = o.buf;
  if (!buf && !(buf = malloc(len))) return -ENOMEM;
  _Atomic int64_t last = iof_now_ns();
  pump p = {src, dst, buf, len, o.idle_ns, &last, !o.no_half_close, 0};
  int r = pump_run(&p);
  if (copied) *copied = p.moved;
  if (!o.buf) free(buf);
  return r;
}

int iof_stream_relay(iof_stream *a, iof_stream *b, const iof_copy_opts *opts,
                     uint64_t *a_to_b, uint64_t *b_to_a) {
  if (a_to_b) *a_to_b = 0;
  if (b_to_a) *b_to_a = 0;
  iof_copy_opts o = {0};
  if (opts) o = *opts;
  if (!a || !b || !a->vtbl || !b->vtbl || a == b) return -EINVAL;
  if (o.idle_ns > 0 && (!limits_ok(a) || !limits_ok(b))) return -ENOTSUP;
  if (o.buf && o.buf_len < 2) return -EINVAL;
  if (o.idle_ns > INT64_MAX / 2) o.idle_ns = INT64_MAX / 2; /* added to now */
  if (!o.buf && o.buf_len > SIZE_MAX / 4) return -ENOMEM;   /* 2 * len wraps */
  size_t len = o.buf       ? o.buf_len / 2
               : o.buf_len ? o.buf_len
                           : IOF_COPY_DEFAULT_BUF;
  char *buf = o.buf;
  if (!buf && !(buf = malloc(2 * len))) return -ENOMEM;
  _Atomic int64_t last = iof_now_ns();
  pump p[2] = {{a, b, buf, len, o.idle_ns, &last, true, 0},
               {b, a, buf + len, len, o.idle_ns, &last, true, 0}};
  iof_fn fns[2] = {pump_run, pump_run};
  void *args[2] = {&p[0], &p[1]};
  int r = iof_when_all(2, fns, args, NULL);
  if (a_to_b) *a_to_b = p[0].moved;
  if (b_to_a) *b_to_a = p[1].moved;
  if (!o.buf) free(buf);
  return r;
}
