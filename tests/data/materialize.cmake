# The full set of test models, from what tests/data commits:
#
#   cmake -DFT=path/to/ft -DOUT=build/test-data -P tests/data/materialize.cmake
#
# OUT gets the layout the tests read through FT_SHARED_DIR: OUT/models (the
# committed bases, every JSON and README.md linked from tests/data/models,
# plus every derived model of tests/data/models.txt made with
# `ft quantize BASE NAME TYPE`) and OUT/vocab (a link to tests/data/vocab).
#
# A derived file is kept only when its SHA256 is the one models.txt records,
# which is the hash of llama.cpp's own file: the tests then run on exactly
# llama.cpp's bytes, and comparing ft quantize's output with them (test_quant,
# test_quantize) stays a comparison with llama.cpp, not with ft itself. A
# file already present with the right hash is not made again, so a second run
# only hashes (well under a second). Exit status 1 when any file could not be
# made or differs, with one line per file saying which.
cmake_minimum_required(VERSION 3.20)
if(NOT FT OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DFT=path/to/ft -DOUT=DIR -P tests/data/materialize.cmake")
endif()
get_filename_component(DATA ${CMAKE_CURRENT_LIST_DIR} ABSOLUTE)
file(MAKE_DIRECTORY ${OUT}/models)

# Links are made once; a link that already points somewhere is kept.
function(ft_link src dst)
  if(NOT EXISTS ${dst} AND NOT IS_SYMLINK ${dst})
    file(CREATE_LINK ${src} ${dst} SYMBOLIC)
  endif()
endfunction()

ft_link(${DATA}/vocab ${OUT}/vocab)
ft_link(${DATA}/models/README.md ${OUT}/models/README.md)
file(GLOB jsons RELATIVE ${DATA}/models ${DATA}/models/*.json)
foreach(j ${jsons})
  ft_link(${DATA}/models/${j} ${OUT}/models/${j})
endforeach()

set(failed 0)
file(STRINGS ${DATA}/models.txt lines REGEX "^[^#]")
foreach(line ${lines})
  separate_arguments(f UNIX_COMMAND "${line}")
  list(GET f 0 name)
  list(GET f 1 base)
  list(GET f 2 type)
  list(GET f 3 source)
  list(GET f 4 want)
  set(dst ${OUT}/models/${name})
  if(source STREQUAL "committed")
    file(SHA256 ${DATA}/models/${name} got)
    if(NOT got STREQUAL want)
      # A Git LFS pointer or a damaged checkout: say so rather than let the
      # tests fail in a model loader.
      message(WARNING "tests/data/models/${name}: sha256 ${got}, models.txt says ${want}")
      math(EXPR failed "${failed} + 1")
    endif()
    ft_link(${DATA}/models/${name} ${dst})
    continue()
  endif()
  if(EXISTS ${dst})
    file(SHA256 ${dst} got)
    if(got STREQUAL want)
      continue()
    endif()
    file(REMOVE ${dst})
  endif()
  execute_process(COMMAND ${FT} quantize ${OUT}/models/${base} ${dst} ${type} -t 2
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(WARNING "${name}: ft quantize ${base} ${type} failed (${rc}): ${err}")
    math(EXPR failed "${failed} + 1")
    continue()
  endif()
  file(SHA256 ${dst} got)
  if(NOT got STREQUAL want)
    # Not kept: a test on these bytes would compare ft with itself.
    file(REMOVE ${dst})
    message(WARNING "${name}: ft quantize ${base} ${type} no longer writes llama.cpp's bytes "
                    "(sha256 ${got}, llama.cpp's ${want}); the tests that use ${name} cannot run")
    math(EXPR failed "${failed} + 1")
  endif()
endforeach()

if(failed GREATER 0)
  message(FATAL_ERROR "materialize: ${failed} test data file(s) missing or wrong in ${OUT}/models")
endif()
message(STATUS "materialize: test data ready in ${OUT}")
