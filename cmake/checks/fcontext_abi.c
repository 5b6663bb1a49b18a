/* Configure-time probe: links only if libboost_context exports the three
 * fcontext entry points under the names fiber/fcontext.h will use (C names,
 * or with IOF_FCONTEXT_CXX_ABI the C++ ones of boost::context::detail). */
#include "fiber/fcontext.h"

int main(int argc, char **argv) {
  (void)argv;
  void *volatile syms[] = {(void *)jump_fcontext, (void *)make_fcontext,
                           (void *)ontop_fcontext};
  return syms[argc % 3] == 0;
}
