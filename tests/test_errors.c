/* Error codes and their text: iof_strerror for success, negated and
 * positive errno values, every IOF_EAI_* code (distinct texts, none
 * "unknown"), unknown codes; the IOF_EAI_* range stays clear of errno
 * values; getaddrinfo results map to distinct codes. */
#include "test_support.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <netdb.h>
#include <string.h>

static const int eai[] = {
    IOF_EAI_NONAME,     IOF_EAI_AGAIN,   IOF_EAI_FAIL,     IOF_EAI_NODATA,
    IOF_EAI_FAMILY,     IOF_EAI_SERVICE, IOF_EAI_SOCKTYPE, IOF_EAI_BADFLAGS,
    IOF_EAI_ADDRFAMILY, IOF_EAI_OVERFLOW};
#define N_EAI (int)(sizeof eai / sizeof eai[0])

static void strerror_texts(void **state) {
  (void)state;
  assert_string_equal(iof_strerror(0), "success");
  assert_string_equal(iof_strerror(-ECANCELED), strerror(ECANCELED));
  assert_string_equal(iof_strerror(ETIMEDOUT), iof_strerror(-ETIMEDOUT));
  assert_string_equal(iof_strerror(-EMSGSIZE), strerror(EMSGSIZE));
  for (int i = 0; i < N_EAI; i++) {
    assert_true(IOF_IS_EAI(eai[i]));
    const char *t = iof_strerror(eai[i]);
    assert_non_null(t);
    assert_string_not_equal(t, "unknown error");
    for (int j = 0; j < i; j++)
      assert_string_not_equal(t, iof_strerror(eai[j]));
  }
  assert_string_equal(iof_strerror(IOF_EAI_NONAME), "no such host or service");
  assert_string_equal(iof_strerror(-3050), "unknown error");
  assert_string_equal(iof_strerror(-100000), "unknown error");
  assert_string_equal(iof_strerror(-4095), "unknown error");
  /* No errno value the C library knows falls in the library's range. */
  for (int e = 1; e < 4096; e++)
    if (strerrordesc_np(e)) assert_false(IOF_IS_EAI(-e));
}

static void gai_mapping(void **state) {
  (void)state;
  assert_int_equal(iof_gai_error(0, 0), 0);
  assert_int_equal(iof_gai_error(EAI_NONAME, 0), IOF_EAI_NONAME);
  assert_int_equal(iof_gai_error(EAI_AGAIN, 0), IOF_EAI_AGAIN);
  assert_int_equal(iof_gai_error(EAI_FAIL, 0), IOF_EAI_FAIL);
#ifdef EAI_NODATA
  assert_int_equal(iof_gai_error(EAI_NODATA, 0), IOF_EAI_NODATA);
#endif
  assert_int_equal(iof_gai_error(EAI_FAMILY, 0), IOF_EAI_FAMILY);
  assert_int_equal(iof_gai_error(EAI_SERVICE, 0), IOF_EAI_SERVICE);
  assert_int_equal(iof_gai_error(EAI_SOCKTYPE, 0), IOF_EAI_SOCKTYPE);
  assert_int_equal(iof_gai_error(EAI_BADFLAGS, 0), IOF_EAI_BADFLAGS);
  assert_int_equal(iof_gai_error(EAI_MEMORY, 0), -ENOMEM);
  assert_int_equal(iof_gai_error(EAI_SYSTEM, EMFILE), -EMFILE);
  assert_int_equal(iof_gai_error(EAI_SYSTEM, 0), -EIO);
  assert_int_equal(iof_gai_error(12345, 0), IOF_EAI_FAIL);
  /* A real lookup that cannot succeed, without the network. */
  struct addrinfo h, *res = NULL;
  memset(&h, 0, sizeof h);
  h.ai_flags = AI_NUMERICHOST;
  int gai = getaddrinfo("not-a-number", NULL, &h, &res);
  assert_int_equal(iof_gai_error(gai, 0), IOF_EAI_NONAME);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(strerror_texts),
      cmocka_unit_test(gai_mapping),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
