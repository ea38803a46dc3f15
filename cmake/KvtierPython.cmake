# The Python module: target kvtier_python builds <build>/python/kvtier/, an
# importable package (PYTHONPATH=<build>/python /usr/bin/python3 -c 'import
# kvtier'): the pybind11 extension kvtier/_kvtier.<abi>.so, linked with the
# component libraries, next to the pure-Python files of src/python/kvtier/.
#
# Built for KVTIER_PYTHON (Debian's /usr/bin/python3, which has numpy; a
# pyenv python3 first on PATH has neither numpy nor pybind11). pybind11's
# numpy support needs no numpy headers at build time.
#
# KVTIER_PYTHON_MODULES (a list of interpreters, empty by default) adds one
# target per interpreter, kvtier_python_cpXY, building
# <build>/python-cpXY/kvtier/ for it: the wheels (pyproject.toml,
# cmake/wheel/kvtier_wheel.py) build every CPython from one build folder, so
# the component libraries, the CLI and libkvtier_c.so are compiled once and
# only the extension is compiled per interpreter. pybind11 is header-only:
# a module needs only the interpreter's Python.h and extension suffix, which
# kvtier_python_module() asks the interpreter for; pybind11's own Python
# search is off (NOPYTHON), so no interpreter is cached with it.
set(PYBIND11_NOPYTHON ON)
find_package(pybind11 2.10 CONFIG REQUIRED)
set(KVTIER_PYTHON_MODULES "" CACHE STRING
    "More Python interpreters to build the module for (target kvtier_python_cpXY each)")

kvtier_include_root(python)
file(GLOB _kvtier_py_srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/python/*.cc)
file(GLOB_RECURSE _kvtier_py_files CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}/src/python/kvtier
     ${PROJECT_SOURCE_DIR}/src/python/kvtier/*.py ${PROJECT_SOURCE_DIR}/src/python/kvtier/*.pyi
     ${PROJECT_SOURCE_DIR}/src/python/kvtier/py.typed)

# kvtier_python_module(<target> <python> <package dir>): the extension for
# interpreter <python> in <package dir> (<package dir>/_kvtier<EXT_SUFFIX>),
# and the pure-Python files copied there when they change.
function(kvtier_python_module target python dir)
  execute_process(
    COMMAND ${python} -c "import sysconfig; print(sysconfig.get_paths()['include']); print(sysconfig.get_config_var('EXT_SUFFIX'))"
    OUTPUT_VARIABLE _out RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "kvtier: ${python} does not run (a KVTIER_PYTHON/KVTIER_PYTHON_MODULES entry)")
  endif()
  string(REPLACE "\n" ";" _out "${_out}")
  list(GET _out 0 _include)
  list(GET _out 1 _suffix)
  if(NOT EXISTS ${_include}/Python.h)
    message(FATAL_ERROR "kvtier: no Python.h in ${_include} for ${python} (Debian: python3-dev)")
  endif()
  add_library(${target} MODULE ${_kvtier_py_srcs})
  # Its own headers; the bindings' through kvtier_bindings_common.
  target_include_directories(${target} PRIVATE ${KVTIER_INCLUDE_ROOTS}/python)
  target_include_directories(${target} SYSTEM PRIVATE ${_include})
  target_link_libraries(${target} PRIVATE pybind11::headers kvtier_bindings_common)
  target_compile_definitions(${target} PRIVATE KVTIER_VERSION="${PROJECT_VERSION}")
  # pybind11 needs hidden visibility (as pybind11_add_module sets).
  set_target_properties(${target} PROPERTIES OUTPUT_NAME _kvtier PREFIX "" SUFFIX ${_suffix}
                                             CXX_VISIBILITY_PRESET hidden
                                             VISIBILITY_INLINES_HIDDEN ON
                                             LIBRARY_OUTPUT_DIRECTORY ${dir})
  set(_outputs "")
  foreach(_f ${_kvtier_py_files})
    add_custom_command(OUTPUT ${dir}/${_f}
                       COMMAND ${CMAKE_COMMAND} -E copy ${PROJECT_SOURCE_DIR}/src/python/kvtier/${_f}
                               ${dir}/${_f}
                       DEPENDS ${PROJECT_SOURCE_DIR}/src/python/kvtier/${_f} VERBATIM)
    list(APPEND _outputs ${dir}/${_f})
  endforeach()
  add_custom_target(${target}_files DEPENDS ${_outputs})
  add_dependencies(${target} ${target}_files)
endfunction()

set(KVTIER_PYTHON_PACKAGE_DIR ${CMAKE_BINARY_DIR}/python/kvtier)
kvtier_python_module(kvtier_python ${KVTIER_PYTHON} ${KVTIER_PYTHON_PACKAGE_DIR})

foreach(_python ${KVTIER_PYTHON_MODULES})
  execute_process(COMMAND ${_python} -c "import sys; print('cp%d%d' % sys.version_info[:2])"
                  OUTPUT_VARIABLE _tag OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "kvtier: KVTIER_PYTHON_MODULES entry ${_python} does not run")
  endif()
  if(TARGET kvtier_python_${_tag})
    message(FATAL_ERROR "kvtier: two KVTIER_PYTHON_MODULES entries are ${_tag}")
  endif()
  kvtier_python_module(kvtier_python_${_tag} ${_python} ${CMAKE_BINARY_DIR}/python-${_tag}/kvtier)
endforeach()
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
  # One ctest test per file of tests/python (py_kvtier_module.<file>), so that
  # ctest -j spreads them over the cores, the longest first (COST) when ctest
  # has no timings of its own yet. Under a sanitizer the tests marked `fork`
  # are deselected: the child of a multi-threaded process runs on the
  # sanitizer's copied allocator, whose locks (GCC 12's libasan and libtsan
  # have no fork handler for them) may be held by a parent thread that is not
  # in the child: an ASan child hung in SizeClassAllocator64::GetFromAllocator
  # (gdb, 2 of 8 runs under load), a TSan child is killed ("starting new
  # threads after multi-threaded fork is not supported"). They run against
  # the unsanitized module of the wheels (scripts/test's wheels stage).
  set(_kvtier_py_select "")
  if(KVTIER_SANITIZE)
    set(_kvtier_py_select -m "not fork")
  endif()
  file(GLOB _kvtier_py_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/python/test_*.py)
  foreach(_file ${_kvtier_py_files})
    get_filename_component(_stem ${_file} NAME_WE)
    # test_doc_figures compares pages with what single calls print, calls the
    # other files make under TSan too (dev runs it; 21 s of TSan's test time).
    if(KVTIER_SANITIZE STREQUAL "thread" AND _stem STREQUAL "test_doc_figures")
      continue()
    endif()
    file(STRINGS ${_file} _defs REGEX "^def test_|^    def test_")
    list(LENGTH _defs _count)
    if(KVTIER_SANITIZE)
      # A file whose every test is marked `fork` (test_cache_fork) has
      # nothing to run here; pytest would fail it ("no tests ran").
      file(STRINGS ${_file} _forks REGEX "^@pytest\\.mark\\.fork|^    @pytest\\.mark\\.fork")
      list(LENGTH _forks _fork_count)
      math(EXPR _count "${_count} - ${_fork_count}")
      if(_count LESS_EQUAL 0)
        continue()
      endif()
    endif()
    add_test(NAME py_kvtier_module.${_stem}
             COMMAND ${KVTIER_PYTHON} -m pytest -q -p no:cacheprovider ${_kvtier_py_select} ${_file}
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(py_kvtier_module.${_stem} PROPERTIES
                         ENVIRONMENT_MODIFICATION "${_kvtier_py_env}" TIMEOUT 900 COST ${_count})
  endforeach()
endif()
