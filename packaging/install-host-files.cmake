# Install-time part of packaging/CMakeLists.txt: the files whose place or content depends on
# the prefix given to `cmake --install` (or CPack's /usr), not the one the tree was configured
# with. Like GNUInstallDirs, a /usr prefix puts configuration in /etc and units in
# /lib/systemd/system (Debian 12's systemd.pc); any other prefix keeps everything under it,
# so a test can install into a scratch directory. DESTDIR is honoured (file(INSTALL) adds it).
# Input (set by the install(CODE) before this script): GPUSLICE_PACKAGING_DIR,
# GPUSLICE_BINDIR (relative to the prefix), GPUSLICE_STAGE_DIR (scratch space in the build tree).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(_etc "/etc")
  set(_units "/lib/systemd/system")
else()
  set(_etc "${CMAKE_INSTALL_PREFIX}/etc")
  set(_units "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
endif()
set(BINDIR "${CMAKE_INSTALL_PREFIX}/${GPUSLICE_BINDIR}")
set(SYSCONFDIR "${_etc}")
string(MAKE_C_IDENTIFIER "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}" _id)  # concurrent installs
set(_stage "${GPUSLICE_STAGE_DIR}/units/${_id}")
foreach(unit gpuslice.service gpuslice-slurm-agent.service)
  configure_file("${GPUSLICE_PACKAGING_DIR}/systemd/${unit}.in" "${_stage}/${unit}" @ONLY)
  file(INSTALL DESTINATION "${_units}" TYPE FILE FILES "${_stage}/${unit}"
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endforeach()
# The conffile (dpkg keeps an admin's edits on upgrade; a plain install keeps an existing file).
if(EXISTS "$ENV{DESTDIR}${_etc}/gpuslice/gpuslice.toml" AND "$ENV{DESTDIR}" STREQUAL "")
  message(STATUS "Keeping: ${_etc}/gpuslice/gpuslice.toml (the shipped one is in the package's docs)")
else()
  file(INSTALL DESTINATION "${_etc}/gpuslice" TYPE FILE
       FILES "${GPUSLICE_PACKAGING_DIR}/gpuslice.toml"
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endif()
