# The installable libraries, built from the component libraries' objects:
#
#   kvtier_shared  libkvtier.so  (exported as kvtier::kvtier)
#   kvtier_static  libkvtier.a   (exported as kvtier::kvtier_static)
#
# The components are read from the in-tree INTERFACE target `kvtier`: every
# kvtier_<name> it links, directly or through another component, goes into
# both libraries. Adding a component to `kvtier` in ../CMakeLists.txt is
# therefore the only line a new component needs. kvtier_testing must never be
# part of it (only tests and benches link the test helpers).
#
# Outputs, for the other cmake/*.cmake files:
#   KVTIER_LIBRARY_COMPONENTS  component targets, e.g. kvtier_core;kvtier_disk
#   KVTIER_EXTERNAL_DEPS       their non-kvtier link items, as given
#   KVTIER_EXTERNAL_LINK_ITEMS the same resolved to library files and flags,
#                              usable outside this build (pkg-config, the
#                              static library's exported interface)

include(GNUInstallDirs)

# Appends the component targets reachable from `item` to `comps_var` and the
# other link items to `deps_var`.
function(kvtier_collect_components item comps_var deps_var)
  set(comps ${${comps_var}})
  set(deps ${${deps_var}})
  # A static library's PRIVATE dependencies appear as $<LINK_ONLY:x>.
  string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
  if(item MATCHES "^kvtier_" AND TARGET ${item})
    if(item STREQUAL "kvtier_testing")
      message(FATAL_ERROR "the installed kvtier library would contain kvtier_testing: only tests "
                          "and benches may link it (found through kvtier's link list)")
    endif()
    if(NOT item IN_LIST comps)
      list(APPEND comps ${item})
      get_target_property(next ${item} INTERFACE_LINK_LIBRARIES)
      if(next)
        foreach(n ${next})
          kvtier_collect_components(${n} comps deps)
        endforeach()
      endif()
    endif()
  elseif(NOT item IN_LIST deps)
    list(APPEND deps ${item})
  endif()
  set(${comps_var} ${comps} PARENT_SCOPE)
  set(${deps_var} ${deps} PARENT_SCOPE)
endfunction()

# Resolves a link item to what a linker outside this build needs: imported
# targets become their library files (and their own dependencies),
# header-only targets nothing, Threads the -pthread flag.
function(kvtier_resolve_link_item item out_var)
  set(out ${${out_var}})
  string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
  if(item STREQUAL "Threads::Threads")
    list(APPEND out -pthread)
  elseif(TARGET ${item})
    get_target_property(type ${item} TYPE)
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(loc ${item} IMPORTED_LOCATION)
      if(NOT loc)
        get_target_property(configs ${item} IMPORTED_CONFIGURATIONS)
        foreach(config ${configs})
          if(NOT loc)
            get_target_property(loc ${item} IMPORTED_LOCATION_${config})
          endif()
        endforeach()
      endif()
      if(NOT loc)
        message(FATAL_ERROR "kvtier packaging: no library file for link item ${item}")
      endif()
      list(APPEND out ${loc})
    endif()
    get_target_property(next ${item} INTERFACE_LINK_LIBRARIES)
    if(next)
      foreach(n ${next})
        kvtier_resolve_link_item(${n} out)
      endforeach()
    endif()
  elseif(item MATCHES "^\\$<")
    message(FATAL_ERROR "kvtier packaging: cannot resolve link item ${item}")
  else()
    list(APPEND out ${item})
  endif()
  list(REMOVE_DUPLICATES out)
  set(${out_var} ${out} PARENT_SCOPE)
endfunction()

set(KVTIER_LIBRARY_COMPONENTS "")
set(KVTIER_EXTERNAL_DEPS "")
get_target_property(_kvtier_top kvtier INTERFACE_LINK_LIBRARIES)
foreach(_item ${_kvtier_top})
  kvtier_collect_components(${_item} KVTIER_LIBRARY_COMPONENTS KVTIER_EXTERNAL_DEPS)
endforeach()
set(KVTIER_EXTERNAL_LINK_ITEMS "")
foreach(_item ${KVTIER_EXTERNAL_DEPS})
  kvtier_resolve_link_item(${_item} KVTIER_EXTERNAL_LINK_ITEMS)
endforeach()

set(_kvtier_objects "")
foreach(_comp ${KVTIER_LIBRARY_COMPONENTS})
  get_target_property(_type ${_comp} TYPE)
  if(_type STREQUAL "STATIC_LIBRARY")
    list(APPEND _kvtier_objects $<TARGET_OBJECTS:${_comp}>)
  endif()
endforeach()

set(_kvtier_public_include $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                          $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
# A sanitized kvtier needs the sanitizer runtime in whatever links it.
set(_kvtier_sanitize_link "")
if(KVTIER_SANITIZE)
  set(_kvtier_sanitize_link -fsanitize=${KVTIER_SANITIZE})
endif()

add_library(kvtier_shared SHARED ${_kvtier_objects})
target_link_libraries(kvtier_shared PRIVATE ${KVTIER_EXTERNAL_DEPS})
target_include_directories(kvtier_shared INTERFACE ${_kvtier_public_include})
target_compile_features(kvtier_shared INTERFACE cxx_std_20)
target_link_options(kvtier_shared INTERFACE ${_kvtier_sanitize_link})
# Before 1.0 every minor version may change the C++ ABI.
set_target_properties(kvtier_shared PROPERTIES
  OUTPUT_NAME kvtier EXPORT_NAME kvtier
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
add_library(kvtier::kvtier ALIAS kvtier_shared)

add_library(kvtier_static STATIC ${_kvtier_objects})
target_include_directories(kvtier_static INTERFACE ${_kvtier_public_include})
target_compile_features(kvtier_static INTERFACE cxx_std_20)
# Built here from objects whose dependencies were found here; consumers get
# the same libraries as plain files (see KVTIER_EXTERNAL_LINK_ITEMS).
foreach(_item ${KVTIER_EXTERNAL_DEPS})
  target_link_libraries(kvtier_static INTERFACE $<BUILD_INTERFACE:${_item}>)
endforeach()
foreach(_item ${KVTIER_EXTERNAL_LINK_ITEMS})
  target_link_libraries(kvtier_static INTERFACE $<INSTALL_INTERFACE:${_item}>)
endforeach()
target_link_options(kvtier_static INTERFACE ${_kvtier_sanitize_link})
set_target_properties(kvtier_static PROPERTIES OUTPUT_NAME kvtier EXPORT_NAME kvtier_static)
add_library(kvtier::kvtier_static ALIAS kvtier_static)
