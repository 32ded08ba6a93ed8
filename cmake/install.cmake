# Install rules for libbrisk.so and libbrisk.a, and the secure build's
# libbrisk-secure.so and libbrisk-secure.a (included by the top-level
# CMakeLists.txt where those targets exist; not in sanitizer builds). Under
# the prefix:
#   lib/libbrisk.so.MAJOR.MINOR.PATCH, libbrisk.so.MAJOR (its SONAME), libbrisk.so
#   lib/libbrisk.a
#   lib/libbrisk-secure.so.MAJOR.MINOR.PATCH, libbrisk-secure.so.MAJOR, libbrisk-secure.so,
#   lib/libbrisk-secure.a        the secure build (README): same API, checked heap
#   include/brisk.h              the API; it includes include/brisk/*.h, each
#                                one part of it (brisk/internal.h is not API)
#   lib/pkgconfig/brisk.pc       pkg-config --cflags --libs brisk (--static for libbrisk.a)
#   lib/cmake/brisk/             find_package(brisk CONFIG): brisk::brisk, brisk::brisk_static,
#                                brisk::brisk_secure, brisk::brisk_secure_static
# (lib/ is GNUInstallDirs' CMAKE_INSTALL_LIBDIR.) brisk.pc and the CMake
# package find the library and header relative to their own place, so
# `cmake --install --prefix P` may pick any P.
include(CMakePackageConfigHelpers)

set(BRISK_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/brisk)

install(TARGETS brisk brisk_static brisk_secure brisk_secure_static EXPORT briskTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# brisk.h and brisk/*.h, as they lie in the source tree's include/.
install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

install(EXPORT briskTargets NAMESPACE brisk:: DESTINATION ${BRISK_CMAKE_INSTALL_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/briskConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/briskConfig.cmake
  INSTALL_DESTINATION ${BRISK_CMAKE_INSTALL_DIR})
# Same major version, as the SONAME says (libbrisk.so.MAJOR).
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/briskConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/briskConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/briskConfigVersion.cmake
  DESTINATION ${BRISK_CMAKE_INSTALL_DIR})

# brisk.pc: its prefix is found from the file's own place (${pcfiledir},
# which pkg-config and pkgconf both set, minus LIBDIR/pkgconfig), not taken
# from the CMAKE_INSTALL_PREFIX of configure time, which `cmake --install
# --prefix` and CPack's staging replace. An absolute LIBDIR or INCLUDEDIR
# is written as it is.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(BRISK_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(BRISK_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(BRISK_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH BRISK_PC_UP /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)   # ../../ for lib
  string(REGEX REPLACE "/$" "" BRISK_PC_UP "${BRISK_PC_UP}")
  set(BRISK_PC_PREFIX "\${pcfiledir}/${BRISK_PC_UP}")
  set(BRISK_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(BRISK_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/brisk.pc.in ${CMAKE_CURRENT_BINARY_DIR}/brisk.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/brisk.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
