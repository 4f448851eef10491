# deps.cmake: libjpeg(-turbo) and libspng, the two C libraries stoker decodes
# with, as one imported target stk::codecs. Included by the root CMakeLists.txt.
#
# pkg-config is used for hints when present but is not required: a wheel build
# from a bare Python (CMake and Ninja from PyPI) has no pkg-config, and the
# libraries' standard install locations are found without it. JPEG_ROOT,
# SPNG_ROOT or CMAKE_PREFIX_PATH point the search elsewhere.

find_package(JPEG QUIET)
if(NOT JPEG_FOUND)
  message(FATAL_ERROR
    "stoker: libjpeg (libjpeg-turbo) development files not found.\n"
    "  Debian: apt install libjpeg62-turbo-dev    Ubuntu: apt install libjpeg-turbo8-dev\n"
    "  Fedora: dnf install libjpeg-turbo-devel    or set JPEG_ROOT to its install prefix")
endif()

find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(STK_PC_SPNG QUIET spng)
endif()
find_path(SPNG_INCLUDE_DIR spng.h HINTS ${STK_PC_SPNG_INCLUDE_DIRS} ENV SPNG_ROOT
          PATH_SUFFIXES include)
find_library(SPNG_LIBRARY NAMES spng HINTS ${STK_PC_SPNG_LIBRARY_DIRS} ENV SPNG_ROOT
             PATH_SUFFIXES lib lib64)
if(NOT SPNG_INCLUDE_DIR OR NOT SPNG_LIBRARY)
  message(FATAL_ERROR
    "stoker: libspng development files (spng.h, libspng.so) not found.\n"
    "  Debian/Ubuntu: apt install libspng-dev    Fedora: dnf install libspng-devel\n"
    "  or set SPNG_ROOT to its install prefix")
endif()
message(STATUS "stoker: libjpeg ${JPEG_LIBRARIES}, libspng ${SPNG_LIBRARY}")

add_library(stk::codecs INTERFACE IMPORTED)
set_target_properties(stk::codecs PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${JPEG_INCLUDE_DIRS};${SPNG_INCLUDE_DIR}"
  INTERFACE_LINK_LIBRARIES "${JPEG_LIBRARIES};${SPNG_LIBRARY}")
