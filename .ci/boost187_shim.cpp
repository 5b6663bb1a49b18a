// CI only: a stand-in for a Boost >= 1.87 libboost_context, which exports
// the fcontext entry points only as C++ functions of boost::context::detail.
// Built as a shared library from the installed libboost_context.a with its
// C symbols hidden (--exclude-libs), so the configure probe must pick the
// mangled names and the library must switch through them.
#include <cstddef>

extern "C" {
struct c_transfer {
  void *fctx;
  void *data;
};
c_transfer jump_fcontext(void *to, void *vp);
void *make_fcontext(void *sp, std::size_t size, void (*fn)(c_transfer));
c_transfer ontop_fcontext(void *to, void *vp, c_transfer (*fn)(c_transfer));
}

namespace boost {
namespace context {
namespace detail {
typedef void *fcontext_t;
struct transfer_t {
  fcontext_t fctx;
  void *data;
};

transfer_t jump_fcontext(fcontext_t const to, void *vp) {
  c_transfer t = ::jump_fcontext(to, vp);
  return {t.fctx, t.data};
}

fcontext_t make_fcontext(void *sp, std::size_t size, void (*fn)(transfer_t)) {
  return ::make_fcontext(sp, size, reinterpret_cast<void (*)(c_transfer)>(fn));
}

transfer_t ontop_fcontext(fcontext_t const to, void *vp,
                          transfer_t (*fn)(transfer_t)) {
  c_transfer t = ::ontop_fcontext(
      to, vp, reinterpret_cast<c_transfer (*)(c_transfer)>(fn));
  return {t.fctx, t.data};
}
} // namespace detail
} // namespace context
} // namespace boost
