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
target_include_directories(kvtier_python PRIVATE ${PROJECT_SOURCE_DIR}/src)
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
