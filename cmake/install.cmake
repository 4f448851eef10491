# install.cmake: what `cmake --install` (and `make install`) puts under the
# prefix for C users: the header, libstoker.so, the stoker command, stoker.pc
# and a CMake package (find_package(stoker) -> the target stoker::stoker).
# Included at the end of the root CMakeLists.txt.
#
# The static archive is not installed: it is the tests' build, which exposes
# the internal stk__* functions and headers, and linking it statically would
# put libjpeg and libspng on every user's link line. The Python extension is
# installed by pip (setup.py), not here.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS stoker EXPORT stokerTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS stoker_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/stoker.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(STK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/stoker)
install(EXPORT stokerTargets NAMESPACE stoker:: DESTINATION ${STK_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/stokerConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/stokerConfig.cmake
                              INSTALL_DESTINATION ${STK_CMAKE_DIR})
# 0.x: a new minor version may change the ABI (the SOVERSION is 0), so only
# the same major.minor satisfies find_package(stoker 0.3).
write_basic_package_version_file(${CMAKE_BINARY_DIR}/stokerConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/stokerConfig.cmake ${CMAKE_BINARY_DIR}/stokerConfigVersion.cmake
        DESTINATION ${STK_CMAKE_DIR})

# stoker.pc finds the prefix from its own location (${pcfiledir}), so the
# tree stays usable after `cmake --install --prefix P` or when moved.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(STK_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(STK_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(STK_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH _stk_up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  string(REGEX REPLACE "/$" "" _stk_up "${_stk_up}")
  set(STK_PC_PREFIX "\${pcfiledir}/${_stk_up}")
  set(STK_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(STK_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/stoker.pc.in ${CMAKE_BINARY_DIR}/stoker.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/stoker.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
