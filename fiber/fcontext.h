/* The three fcontext entry points of libboost_context, declared here so the
 * C code needs no C++ header. They are extern "C" in the library. */
#ifndef IOF_FCONTEXT_H
#define IOF_FCONTEXT_H

#include <stddef.h>

typedef void *iof_fctx;
typedef struct iof_transfer {
  iof_fctx fctx;
  void *data;
} iof_transfer;

iof_transfer jump_fcontext(iof_fctx const to, void *vp);
iof_fctx make_fcontext(void *sp, size_t size, void (*fn)(iof_transfer));
iof_transfer ontop_fcontext(iof_fctx const to, void *vp,
                            iof_transfer (*fn)(iof_transfer));

#endif
