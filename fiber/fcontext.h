/* The three fcontext entry points of libboost_context, declared here so the
 * C code needs no C++ header.
 *
 * Boost up to 1.86 exports them as C symbols. From 1.87 only the C++
 * functions boost::context::detail::jump_fcontext etc. are exported; the
 * build detects that (cmake/IofBoostContext.cmake) and defines
 * IOF_FCONTEXT_CXX_ABI, which binds the same C declarations to the mangled
 * names. The C++ signatures take fcontext_t (void *) and transfer_t (a
 * struct of two pointers, like iof_transfer), so the calls are identical. */
#ifndef IOF_FCONTEXT_H
#define IOF_FCONTEXT_H

#include <stddef.h>

typedef void *iof_fctx;
typedef struct iof_transfer {
  iof_fctx fctx;
  void *data;
} iof_transfer;

#if defined(IOF_FCONTEXT_CXX_ABI) && IOF_FCONTEXT_CXX_ABI
/* transfer_t jump_fcontext(fcontext_t, void *) */
#define IOF_FCTX_JUMP_SYM                                                      \
  __asm__("_ZN5boost7context6detail13jump_fcontextEPvS2_")
/* fcontext_t make_fcontext(void *, std::size_t, void (*)(transfer_t)) */
#define IOF_FCTX_MAKE_SYM                                                      \
  __asm__("_ZN5boost7context6detail13make_fcontextEPvmPFvNS1_10transfer_tEE")
/* transfer_t ontop_fcontext(fcontext_t, void *, transfer_t (*)(transfer_t)) */
#define IOF_FCTX_ONTOP_SYM                                                     \
  __asm__(                                                                     \
      "_ZN5boost7context6detail14ontop_fcontextEPvS2_PFNS1_10transfer_tES3_E")
#else
#define IOF_FCTX_JUMP_SYM
#define IOF_FCTX_MAKE_SYM
#define IOF_FCTX_ONTOP_SYM
#endif

iof_transfer jump_fcontext(iof_fctx const to, void *vp) IOF_FCTX_JUMP_SYM;
iof_fctx make_fcontext(void *sp, size_t size,
                       void (*fn)(iof_transfer)) IOF_FCTX_MAKE_SYM;
iof_transfer
ontop_fcontext(iof_fctx const to, void *vp,
               iof_transfer (*fn)(iof_transfer)) IOF_FCTX_ONTOP_SYM;

#endif
