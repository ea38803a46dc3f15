# The Python module: target kvtier_python builds <build>/python/kvtier/, an
# importable package (PYTHONPATH=<build>/python /usr/bin/python3 -c 'import
# kvtier'): the pybind11 extension kvtier/_kvtier.<abi>.so, linked with the
# component libraries, next to the pure-Python files of src/python/kvtier/.
#
# Built for KVTIER_PYTHON (Debian's /usr/bin/python3, which has numpy; a
# pyenv python3 first on PATH has neither numpy nor pybind11). pybind11's
# numpy support needs no numpy headers at build time.
set(PYTHON_EXECUTABLE ${KVTIER_PYTHON} CACHE FILEPATH "Python for pybind11" FORCE)
find_package(pybind11 2.10 CONFIG REQUIRED)

set(KVTIER_PYTHON_PACKAGE_DIR ${CMAKE_BINARY_DIR}/python/kvtier)
file(GLOB _kvtier_py_srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/python/*.cc)
pybind11_add_module(kvtier_python MODULE NO_EXTRAS ${_kvtier_py_srcs})
# Its own headers; the bindings' through kvtier_bindings_common.
kvtier_include_root(python)
target_include_directories(kvtier_python PRIVATE ${KVTIER_INCLUDE_ROOTS}/python)
target_link_libraries(kvtier_python PRIVATE kvtier_bindings_common)
target_compile_definitions(kvtier_python PRIVATE KVTIER_VERSION="${PROJECT_VERSION}")
set_target_properties(kvtier_python PROPERTIES OUTPUT_NAME _kvtier
                                               LIBRARY_OUTPUT_DIRECTORY ${KVTIER_PYTHON_PACKAGE_DIR})

# The pure-Python files, copied when they change.
file(GLOB_RECURSE _kvtier_py_files CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}/src/python/kvtier
     ${PROJECT_SOURCE_DIR}/src/python/kvtier/*.py ${PROJECT_SOURCE_DIR}/src/python/kvtier/*.pyi
     ${PROJECT_SOURCE_DIR}/src/python/kvtier/py.typed)
set(_kvtier_py_outputs "")
foreach(_f ${_kvtier_py_files})
  add_custom_command(OUTPUT ${KVTIER_PYTHON_PACKAGE_DIR}/${_f}
                     COMMAND ${CMAKE_COMMAND} -E copy ${PROJECT_SOURCE_DIR}/src/python/kvtier/${_f}
                             ${KVTIER_PYTHON_PACKAGE_DIR}/${_f}
                     DEPENDS ${PROJECT_SOURCE_DIR}/src/python/kvtier/${_f} VERBATIM)
  list(APPEND _kvtier_py_outputs ${KVTIER_PYTHON_PACKAGE_DIR}/${_f})
endforeach()
add_custom_target(kvtier_python_files DEPENDS ${_kvtier_py_outputs})
add_dependencies(kvtier_python kvtier_python_files)

# A sanitized extension module needs its runtime loaded before python3 runs
# (and libstdc++ before it, so that ASan finds __cxa_throw to intercept):
# KVTIER_PY_PRELOAD is the LD_PRELOAD value for the tests that import it.
set(KVTIER_PY_PRELOAD "")
if(KVTIER_SANITIZE MATCHES "address")
  set(_kvtier_runtime libasan.so)
elseif(KVTIER_SANITIZE MATCHES "thread")
  set(_kvtier_runtime libtsan.so)
endif()
if(_kvtier_runtime)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${_kvtier_runtime}
                  OUTPUT_VARIABLE _kvtier_rt OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                  OUTPUT_VARIABLE _kvtier_stdcxx OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(KVTIER_PY_PRELOAD "${_kvtier_rt} ${_kvtier_stdcxx}")
endif()

if(KVTIER_BUILD_TESTS)
  set(_kvtier_py_env
      "PYTHONPATH=set:${CMAKE_BINARY_DIR}/python"
      "PYTHONDONTWRITEBYTECODE=set:1"
      "KVTIER_SOURCE_DIR=set:${PROJECT_SOURCE_DIR}"
      "KVTIER_BUILD_DIR=set:${CMAKE_BINARY_DIR}"
      "KVTIER_CLI=set:$<TARGET_FILE:kvtier_cli>"
      "KVTIER_C_COMPILER=set:${CMAKE_C_COMPILER}"
      "KVTIER_SANITIZE=set:${KVTIER_SANITIZE}"
      "KVTIER_PY_PRELOAD=set:${KVTIER_PY_PRELOAD}")
  if(KVTIER_PY_PRELOAD)
    # Python itself is not instrumented: its allocations look like leaks.
    list(APPEND _kvtier_py_env "LD_PRELOAD=set:${KVTIER_PY_PRELOAD}"
                               "ASAN_OPTIONS=set:detect_leaks=0")
  endif()
  add_test(NAME py_kvtier_module
           COMMAND ${KVTIER_PYTHON} -m pytest -q -p no:cacheprovider ${PROJECT_SOURCE_DIR}/tests/python
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(py_kvtier_module PROPERTIES ENVIRONMENT_MODIFICATION "${_kvtier_py_env}"
                                                   TIMEOUT 900)
endif()
