// kiln's version, for programs built against the installed package (<kiln/version.h>).
// Intended usage:
//   #if KILN_VERSION_NUMBER >= 400   // 0.4.0: kiln::Run
//   std::printf("kiln %s\n", KILN_VERSION_STRING);
// The CMake package (kilnConfigVersion.cmake) and kiln.pc carry the same numbers. No declarations else.
#pragma once

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 4
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.4.0"
#define KILN_VERSION_NUMBER (KILN_VERSION_MAJOR * 10000 + KILN_VERSION_MINOR * 100 + KILN_VERSION_PATCH)
