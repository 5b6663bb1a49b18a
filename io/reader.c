/* The buffered reader: one buffer, [start, end) unread; a message is
 * consumed by moving start, its bytes stay in place until the next call
 * needs the room (compact moves only the unread tail). */
#include <iofiber/reader.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int iof_reader_init(iof_reader *r, iof_stream *src, void *buf, size_t cap) {
  if (!r || !src || (buf && !cap)) return -EINVAL;
  memset(r, 0, sizeof *r);
  if (!buf) {
    if (!cap) cap = IOF_READER_DEFAULT_CAP;
    if (cap > SIZE_MAX / 2) return -ENOMEM; /* no such object can exist */
    buf = malloc(cap);
    if (!buf) return -ENOMEM;
    r->owned = true;
  }
  r->src = src;
  r->buf = buf;
  r->cap = cap;
  r->max = cap;
  return 0;
}

int iof_reader_init_socket(iof_reader *r, iof_socket *s, void *buf,
                           size_t cap) {
  if (!r || !s) return -EINVAL;
  iof_socket_stream ss;
  iof_stream *st = iof_socket_stream_init(&ss, s);
  int e = iof_reader_init(r, st, buf, cap);
  if (e < 0) return e;
  r->ss = ss; /* now that init cleared r: the stream lives in it */
  r->src = &r->ss.base;
  return 0;
}

void iof_reader_destroy(iof_reader *r) {
  if (!r) return;
  if (r->owned) free(r->buf);
  r->buf = NULL;
  r->owned = false;
  r->start = r->end = r->cap = 0;
}

int iof_reader_set_max(iof_reader *r, size_t max) {
  if (!r || max > r->cap) return -EINVAL;
  r->max = max ? max : r->cap;
  return 0;
}

iof_stream *iof_reader_stream(iof_reader *r) {
  return r ? r->src : NULL;
}

size_t iof_reader_buffered(const iof_reader *r, iof_bytes *out) {
  if (!r) return 0;
  if (out) {
    out->data = r->buf + r->start;
    out->len = r->end - r->start;
  }
  return r->end - r->start;
}

void iof_reader_consume(iof_reader *r, size_t n) {
  if (!r) return;
  size_t have = r->end - r->start;
  r->start += n < have ? n : have;
  if (r->start == r->end) r->start = r->end = 0;
}

/* Reads more after the unread bytes, moving them to the front first when
 * the tail has no room. > 0 bytes added, 0 end of stream, < 0 error. */
static ssize_t fill(iof_reader *r) {
  if (r->eof) return 0;
  if (r->start == r->end) r->start = r->end = 0; /* old views are dead now */
  if (r->end == r->cap && r->start > 0) {
    size_t n = r->end - r->start;
    memmove(r->buf, r->buf + r->start, n);
    r->start = 0;
    r->end = n;
  }
  if (r->end == r->cap) return -EMSGSIZE;
  ssize_t n = iof_stream_read_some(r->src, r->buf + r->end, r->cap - r->end);
  if (n == 0) r->eof = true;
  if (n > 0) r->end += (size_t)n;
  return n;
}

/* Makes n bytes available (n <= cap). 1; 0 (end of stream, nothing
 * buffered); -EPROTO (end after some); error. */
static int want(iof_reader *r, size_t n) {
  while (r->end - r->start < n) {
    ssize_t got = fill(r);
    if (got < 0) return (int)got;
    if (got == 0) return r->end == r->start ? 0 : -EPROTO;
  }
  return 1;
}

static void take(iof_reader *r, size_t n, iof_bytes *out) {
  out->data = r->buf + r->start;
  out->len = n;
  r->start += n;
  /* Not reset to 0 when empty: the view must stay valid. */
}

int iof_reader_read_until(iof_reader *r, const char *delim, size_t delim_len,
                          iof_bytes *out) {
  if (!r || !r->buf || !delim || !delim_len || !out) return -EINVAL;
  /* No message may be longer than max, the delimiter alone included: say
   * so now rather than after reading max bytes (the peer may send none). */
  if (delim_len > r->max) return -EMSGSIZE;
  size_t scanned = 0; /* offset from start where no match can begin */
  for (;;) {
    const char *base = r->buf + r->start;
    size_t have = r->end - r->start;
    size_t lim = have < r->max ? have : r->max;
    size_t i = scanned;
    while (i + delim_len <= lim) {
      const char *p = memchr(base + i, delim[0], lim - delim_len + 1 - i);
      if (!p) break;
      i = (size_t)(p - base);
      if (memcmp(p, delim, delim_len) == 0) {
        take(r, i + delim_len, out);
        return 1;
      }
      i++;
    }
    scanned = lim >= delim_len ? lim - delim_len + 1 : 0;
    if (have >= r->max) return -EMSGSIZE;
    ssize_t n = fill(r);
    if (n < 0) return (int)n;
    if (n == 0) {
      if (r->end == r->start) return 0;
      take(r, r->end - r->start, out); /* a last message, undelimited */
      return 1;
    }
  }
}

int iof_reader_read_line(iof_reader *r, iof_bytes *line) {
  int e = iof_reader_read_until(r, "\n", 1, line);
  if (e <= 0) return e;
  size_t n = line->len;
  if (n && line->data[n - 1] == '\n') n--;
  if (n && line->data[n - 1] == '\r') n--;
  line->len = n;
  return 1;
}

int iof_reader_read_exact(iof_reader *r, size_t n, iof_bytes *out) {
  if (!r || !r->buf || !out) return -EINVAL;
  if (n > r->cap) return -EMSGSIZE;
  if (n == 0) {
    out->data = r->buf + r->start;
    out->len = 0;
    return 1;
  }
  int e = want(r, n);
  if (e <= 0) return e;
  take(r, n, out);
  return 1;
}

/* Reads the prefix (unconsumed): 1 and *len; 0; -EPROTO; error. */
static int frame_len(iof_reader *r, int prefix, size_t *len) {
  if (prefix != 1 && prefix != 2 && prefix != 4) return -EINVAL;
  int e = want(r, (size_t)prefix);
  if (e <= 0) return e;
  const unsigned char *p = (const unsigned char *)r->buf + r->start;
  size_t v = 0;
  for (int i = 0; i < prefix; i++) v = v << 8 | p[i];
  *len = v;
  return 1;
}

int iof_reader_read_frame(iof_reader *r, int prefix, iof_bytes *out) {
  if (!r || !r->buf || !out) return -EINVAL;
  size_t len;
  int e = frame_len(r, prefix, &len);
  if (e <= 0) return e;
  if (len > r->cap - (size_t)prefix) return -EMSGSIZE;
  e = want(r, (size_t)prefix + len);
  if (e <= 0) return e < 0 ? e : -EPROTO;
  r->start += (size_t)prefix;
  take(r, len, out);
  return 1;
}

int iof_reader_read_frame_into(iof_reader *r, int prefix, void *dst, size_t cap,
                               size_t *len) {
  if (!r || !r->buf || !len || (!dst && cap)) return -EINVAL;
  size_t n;
  int e = frame_len(r, prefix, &n);
  if (e <= 0) return e;
  if (n > cap) return -EMSGSIZE;
  r->start += (size_t)prefix;
  ssize_t got = iof_reader_read(r, dst, n);
  if (got < 0) return (int)got;
  if ((size_t)got < n) return -EPROTO;
  *len = n;
  return 1;
}

ssize_t iof_reader_read(iof_reader *r, void *dst, size_t n) {
  if (!r || (!dst && n)) return -EINVAL;
  size_t have = r->end - r->start;
  size_t k = have < n ? have : n;
  if (k) memcpy(dst, r->buf + r->start, k);
  iof_reader_consume(r, k);
  if (k == n || r->eof) return (ssize_t)k;
  /* The rest straight into dst: no second copy through the buffer. */
  ssize_t more = iof_stream_read(r->src, (char *)dst + k, n - k);
  if (more < 0) return more;
  if ((size_t)more < n - k) r->eof = true;
  return (ssize_t)(k + (size_t)more);
}

ssize_t iof_reader_read_some(iof_reader *r, void *dst, size_t n) {
  if (!r || (!dst && n)) return -EINVAL;
  if (!n) return 0;
  size_t have = r->end - r->start;
  if (!have) {
    if (r->eof) return 0;
    ssize_t got = iof_stream_read_some(r->src, dst, n);
    if (got == 0) r->eof = true;
    return got;
  }
  size_t k = have < n ? have : n;
  memcpy(dst, r->buf + r->start, k);
  iof_reader_consume(r, k);
  return (ssize_t)k;
}
