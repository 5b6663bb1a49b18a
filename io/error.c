/* iof_strerror and the mapping of getaddrinfo failures to IOF_EAI_*. */
#include <iofiber/error.h>

#include <errno.h>
#include <netdb.h>
#include <string.h>

static const char *const eai_text[] = {
    [1] = "no such host or service",
    [2] = "temporary failure in name resolution",
    [3] = "non-recoverable failure in name resolution",
    [4] = "no address associated with the host",
    [5] = "address family not supported",
    [6] = "service not supported for the socket type",
    [7] = "socket type not supported",
    [8] = "invalid flags in resolution hints",
    [9] = "no address of the requested family for the host",
    [10] = "argument buffer overflow in name resolution",
};

const char *iof_strerror(int err) {
  if (err == 0) return "success";
  if (IOF_IS_EAI(err)) {
    int i = -3000 - err;
    if (i > 0 && i < (int)(sizeof eai_text / sizeof eai_text[0]) && eai_text[i])
      return eai_text[i];
    return "unknown error";
  }
  if (err < 0) {
    if (err < -4095) return "unknown error"; /* -INT_MIN would overflow */
    err = -err;
  }
  /* strerrordesc_np: a static string (strerror may build one in a shared
   * buffer, which is not thread-safe for unknown codes). */
  const char *s = err < 4096 ? strerrordesc_np(err) : NULL;
  return s ? s : "unknown error";
}

int iof_gai_error(int gai, int sys_errno) {
  switch (gai) {
  case 0:
    return 0;
  case EAI_NONAME:
    return IOF_EAI_NONAME;
  case EAI_AGAIN:
    return IOF_EAI_AGAIN;
  case EAI_FAIL:
    return IOF_EAI_FAIL;
#ifdef EAI_NODATA
  case EAI_NODATA:
    return IOF_EAI_NODATA;
#endif
#ifdef EAI_ADDRFAMILY
  case EAI_ADDRFAMILY:
    return IOF_EAI_ADDRFAMILY;
#endif
  case EAI_FAMILY:
    return IOF_EAI_FAMILY;
  case EAI_SERVICE:
    return IOF_EAI_SERVICE;
  case EAI_SOCKTYPE:
    return IOF_EAI_SOCKTYPE;
  case EAI_BADFLAGS:
    return IOF_EAI_BADFLAGS;
  case EAI_OVERFLOW:
    return IOF_EAI_OVERFLOW;
  case EAI_MEMORY:
    return -ENOMEM;
  case EAI_SYSTEM:
    return sys_errno > 0 ? -sys_errno : -EIO;
  default:
    return IOF_EAI_FAIL;
  }
}
