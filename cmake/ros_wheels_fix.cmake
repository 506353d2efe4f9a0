# ROS 2 message wheels from PyPI export <pkg>::<pkg>__rosidl_generator_py
# targets whose include directories name the wheel builder's Python
# (/opt/python/cp311-cp311/...), which does not exist here, and CMake refuses
# to generate. At the end of configuration, point those entries at this
# Python's and numpy's include directories. Nothing on disk changes; on an apt
# ROS install no target matches and this does nothing.
function(_plan_stack_fix_wheel_includes dir py_inc np_inc)
  get_property(targets DIRECTORY "${dir}" PROPERTY IMPORTED_TARGETS)
  foreach(tgt IN LISTS targets)
    get_target_property(incs ${tgt} INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT incs OR NOT incs MATCHES "/opt/python/cp3")
      continue()
    endif()
    list(TRANSFORM incs REPLACE "^/opt/python/cp3[0-9]+-cp3[0-9]+/include/python3.*$" "${py_inc}")
    list(TRANSFORM incs REPLACE "^/opt/python/cp3[0-9]+-cp3[0-9]+/lib/python3[.0-9]+/site-packages/numpy/.*$" "${np_inc}")
    list(REMOVE_DUPLICATES incs)
    set_target_properties(${tgt} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${incs}")
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _plan_stack_fix_wheel_includes("${sub}" "${py_inc}" "${np_inc}")
  endforeach()
endfunction()

function(_plan_stack_fix_wheel_includes_all)
  if(Python3_EXECUTABLE)
    set(py "${Python3_EXECUTABLE}")
  else()
    find_program(py NAMES python3 python REQUIRED)
  endif()
  execute_process(COMMAND "${py}" -c "import sysconfig; print(sysconfig.get_paths()['include'])"
    OUTPUT_VARIABLE py_inc OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND "${py}" -c "import numpy; print(numpy.get_include())"
    OUTPUT_VARIABLE np_inc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT np_inc)
    set(np_inc "${py_inc}")
  endif()
  _plan_stack_fix_wheel_includes("${CMAKE_SOURCE_DIR}" "${py_inc}" "${np_inc}")
  # A venv inside the source tree (our .venv) puts Python/numpy include dirs
  # under the source directory, which CMake forbids in exported targets: keep
  # them for the build only (installed consumers bring their own).
  get_property(own DIRECTORY "${CMAKE_SOURCE_DIR}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(tgt IN LISTS own)
    get_target_property(incs ${tgt} INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT incs)
      continue()
    endif()
    set(fixed "")
    foreach(inc IN LISTS incs)
      if(inc STREQUAL py_inc OR inc STREQUAL np_inc)
        cmake_path(IS_PREFIX CMAKE_SOURCE_DIR "${inc}" NORMALIZE in_source)
        if(in_source)
          set(inc "$<BUILD_INTERFACE:${inc}>")
        endif()
      endif()
      list(APPEND fixed "${inc}")
    endforeach()
    set_target_properties(${tgt} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${fixed}")
  endforeach()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _plan_stack_fix_wheel_includes_all)
