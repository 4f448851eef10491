# deps.cmake: libjpeg(-turbo), libspng, libwebp (with libwebpdemux) and
# libtiff, the C libraries stoker decodes with, as one imported target
# stk::codecs. Included by the root CMakeLists.txt.
#
# pkg-config is used for hints when present but is not required: a wheel build
# from a bare Python (CMake and Ninja from PyPI) has no pkg-config, and the
# libraries' standard install locations are found without it. JPEG_ROOT,
# SPNG_ROOT, WEBP_ROOT, TIFF_ROOT or CMAKE_PREFIX_PATH point the search
# elsewhere.

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

# libwebp and libwebpdemux (the first frame of an animation), pkg-config
# names libwebp and libwebpdemux; libtiff, pkg-config name libtiff-4.
if(PKG_CONFIG_FOUND)
  pkg_check_modules(STK_PC_WEBP QUIET libwebp)
  pkg_check_modules(STK_PC_WEBPDEMUX QUIET libwebpdemux)
  pkg_check_modules(STK_PC_TIFF QUIET libtiff-4)
endif()
find_path(WEBP_INCLUDE_DIR webp/decode.h HINTS ${STK_PC_WEBP_INCLUDE_DIRS} ENV WEBP_ROOT
          PATH_SUFFIXES include)
find_library(WEBP_LIBRARY NAMES webp HINTS ${STK_PC_WEBP_LIBRARY_DIRS} ENV WEBP_ROOT
             PATH_SUFFIXES lib lib64)
find_library(WEBPDEMUX_LIBRARY NAMES webpdemux HINTS ${STK_PC_WEBPDEMUX_LIBRARY_DIRS} ENV WEBP_ROOT
             PATH_SUFFIXES lib lib64)
if(NOT WEBP_INCLUDE_DIR OR NOT WEBP_LIBRARY OR NOT WEBPDEMUX_LIBRARY)
  message(FATAL_ERROR
    "stoker: libwebp development files (webp/decode.h, libwebp.so, libwebpdemux.so) not found.\n"
    "  Debian/Ubuntu: apt install libwebp-dev    Fedora: dnf install libwebp-devel\n"
    "  or set WEBP_ROOT to its install prefix")
endif()
find_path(TIFF_INCLUDE_DIR tiffio.h HINTS ${STK_PC_TIFF_INCLUDE_DIRS} ENV TIFF_ROOT
          PATH_SUFFIXES include)
find_library(TIFF_LIBRARY NAMES tiff HINTS ${STK_PC_TIFF_LIBRARY_DIRS} ENV TIFF_ROOT
             PATH_SUFFIXES lib lib64)
if(NOT TIFF_INCLUDE_DIR OR NOT TIFF_LIBRARY)
  message(FATAL_ERROR
    "stoker: libtiff development files (tiffio.h, libtiff.so) not found.\n"
    "  Debian/Ubuntu: apt install libtiff-dev    Fedora: dnf install libtiff-devel\n"
    "  or set TIFF_ROOT to its install prefix")
endif()
message(STATUS "stoker: libjpeg ${JPEG_LIBRARIES}, libspng ${SPNG_LIBRARY}, libwebp ${WEBP_LIBRARY}, "
               "libtiff ${TIFF_LIBRARY}")

add_library(stk::codecs INTERFACE IMPORTED)
set_target_properties(stk::codecs PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${JPEG_INCLUDE_DIRS};${SPNG_INCLUDE_DIR};${WEBP_INCLUDE_DIR};${TIFF_INCLUDE_DIR}"
  INTERFACE_LINK_LIBRARIES "${JPEG_LIBRARIES};${SPNG_LIBRARY};${WEBPDEMUX_LIBRARY};${WEBP_LIBRARY};${TIFF_LIBRARY}")
