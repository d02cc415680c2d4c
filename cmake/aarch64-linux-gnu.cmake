# Cross-compiling for aarch64 Linux with Debian's gcc-aarch64-linux-gnu.
#
# The simd/ layer and its kernel tests alone (no libraries; static):
#   cmake -S tests/arm -B build/arm -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# The whole project, against an arm64 sysroot of Debian's libraries
# (scripts/arm64-sysroot.sh makes it):
#   cmake -S . -B build/arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DFT_ARM64_SYSROOT=$PWD/build/arm64-sysroot
# Binaries run under qemu-aarch64 (qemu-user), which CMake also uses as the
# emulator for try_run and ctest when it is installed.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(FT_CROSS_PREFIX aarch64-linux-gnu-)
set(CMAKE_C_COMPILER ${FT_CROSS_PREFIX}gcc)
set(CMAKE_CXX_COMPILER ${FT_CROSS_PREFIX}g++)

# try_compile projects get the sysroot too
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES FT_ARM64_SYSROOT)
if(FT_ARM64_SYSROOT)
  if(NOT EXISTS ${FT_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/libc.so)
    message(FATAL_ERROR "FT_ARM64_SYSROOT=${FT_ARM64_SYSROOT} has no arm64 libc: run scripts/arm64-sysroot.sh")
  endif()
  # A Debian multiarch tree (dpkg -x of the :arm64 packages): the cross gcc
  # finds crt files, libc and the libraries under usr/lib/aarch64-linux-gnu.
  set(CMAKE_SYSROOT ${FT_ARM64_SYSROOT})
  set(CMAKE_FIND_ROOT_PATH ${FT_ARM64_SYSROOT})
  # pkg-config reads only the sysroot's .pc files and prefixes their paths
  set(ENV{PKG_CONFIG_SYSROOT_DIR} ${FT_ARM64_SYSROOT})
  set(ENV{PKG_CONFIG_LIBDIR} "${FT_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${FT_ARM64_SYSROOT}/usr/share/pkgconfig")
  set(ENV{PKG_CONFIG_PATH} "")
  set(FT_QEMU_LD_PREFIX ${FT_ARM64_SYSROOT})
else()
  set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
  set(FT_QEMU_LD_PREFIX /usr/aarch64-linux-gnu)
endif()
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

find_program(FT_QEMU_AARCH64 qemu-aarch64)
if(FT_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${FT_QEMU_AARCH64} -L ${FT_QEMU_LD_PREFIX})
endif()
