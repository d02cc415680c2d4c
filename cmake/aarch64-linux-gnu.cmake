# Cross-compiling for aarch64 Linux with Debian's gcc-aarch64-linux-gnu:
#   cmake -S tests/arm -B build/arm -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# Binaries run under qemu-aarch64 (qemu-user), which CMake also uses as the
# emulator for try_run and ctest when it is installed.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(FT_CROSS_PREFIX aarch64-linux-gnu-)
set(CMAKE_C_COMPILER ${FT_CROSS_PREFIX}gcc)
set(CMAKE_CXX_COMPILER ${FT_CROSS_PREFIX}g++)

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

find_program(FT_QEMU_AARCH64 qemu-aarch64)
if(FT_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${FT_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()
