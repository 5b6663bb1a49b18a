# `cpack -G DEB` (or `cmake --build build --target package`) in the build
# directory makes one .deb with the libraries, headers, CMake package,
# pkg-config files, gdb extension and iof- tools. Runtime dependencies are
# computed with dpkg-shlibdeps; the -dev packages are recommended, since a
# program built against iofiber includes <ev.h> only if it uses libev itself.
set(CPACK_PACKAGE_NAME iofiber)
set(CPACK_PACKAGE_VENDOR "iofiber")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "C11 stackful fiber runtime for network servers")
set(CPACK_PACKAGE_CONTACT "iofiber maintainers <iofiber@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libev-dev, libboost-context-dev")
include(CPack)
