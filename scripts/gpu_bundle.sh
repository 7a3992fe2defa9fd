#!/usr/bin/env bash
# scripts/gpu_bundle.sh DIR (also `tools/gpu-check --bundle DIR`): on a Debian machine with kiln's build
# dependencies installed, makes DIR, a relocatable prefix holding what a bare GPU machine (nvcc, CMake, a
# compiler, PyTorch; no -dev packages, no network) lacks to build and run kiln: TurboJPEG + libjpeg, OpenBLAS
# (+ libgfortran5, libquadmath0 at run time), zlib, libpng, doctest, CLI11, nlohmann-json, stb_image and pkgconf,
# with headers in DIR/include, libraries in DIR/lib, pkg-config files that find their own folder
# (${pcfiledir}) and CMake package files that compute their prefix from where they lie. Then DIR.tar.xz
# (tools/gpu-check unpacks it by itself). Copies files of installed packages only; downloads nothing.
# cuDNN is not bundled: the GPU machine has it with CUDA or PyTorch (tools/gpu-check passes KILN_CUDNN_ROOT).
set -euo pipefail
TAR=1
[ "${1:-}" = "--no-tar" ] && { TAR=0; shift; }
[ $# = 1 ] || { echo "usage: $0 [--no-tar] DIR   (makes DIR and DIR.tar.xz)" >&2; exit 2; }
OUT=$1
case $OUT in /*) ;; *) OUT=$(pwd)/$OUT ;; esac
MA=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
L=/usr/lib/$MA
need() { [ -e "$1" ] || { echo "gpu_bundle: $1 not found: install $2 (apt-get install $2)" >&2; exit 1; }; }
need /usr/include/turbojpeg.h libturbojpeg0-dev
need /usr/include/jpeglib.h libjpeg62-turbo-dev
need /usr/include/zlib.h zlib1g-dev
need /usr/include/libpng16/png.h libpng-dev
need /usr/include/doctest/doctest.h doctest-dev
need /usr/include/CLI/CLI.hpp libcli11-dev
need /usr/include/nlohmann/json.hpp nlohmann-json3-dev
need /usr/include/stb/stb_image.h libstb-dev
need "$L/pkgconfig/openblas.pc" libopenblas-dev
need /usr/bin/pkgconf pkgconf-bin
command -v objdump >/dev/null || { echo "gpu_bundle: objdump not found (binutils)" >&2; exit 1; }

rm -rf "$OUT" "$OUT.tar.xz"
mkdir -p "$OUT"/{include/stb,lib/pkgconfig,lib/cmake,share/cmake,bin}
I=$OUT/include

# Headers.
cp /usr/include/{turbojpeg.h,jpeglib.h,jerror.h,jmorecfg.h,zlib.h,zconf.h} "$I/"
cp /usr/include/libpng16/{png.h,pngconf.h,pnglibconf.h} "$I/"
cp /usr/include/"$MA"/jconfig.h "$I/"
cp -r /usr/include/doctest /usr/include/CLI /usr/include/nlohmann "$I/"
cp /usr/include/stb/stb_image.h "$I/stb/"
BLAS_INC=$(sed -n 's/^includedir=//p' "$L/pkgconfig/openblas.pc")
cp "$BLAS_INC"/{cblas.h,f77blas.h,openblas_config.h} "$I/"

# Libraries: each real file once, under its SONAME, plus the unversioned link the linker looks for.
add_lib() {  # path-of-libX.so (any link in its chain) [dev-name]
  local real soname dev
  real=$(readlink -f "$1")
  soname=$(objdump -p "$real" | awk '/SONAME/ {print $2}')
  [ -n "$soname" ] || soname=$(basename "$real")
  cp "$real" "$OUT/lib/$soname"
  dev=${2:-}
  [ -z "$dev" ] || [ "$dev" = "$soname" ] || ln -sf "$soname" "$OUT/lib/$dev"
}
add_lib "$L/libturbojpeg.so" libturbojpeg.so
add_lib "$L/libjpeg.so" libjpeg.so
add_lib "$L/libz.so" libz.so
add_lib "$L/libpng16.so" libpng.so
BLAS_LIB=$(sed -n 's/^libdir=//p' "$L/pkgconfig/openblas.pc")
add_lib "${BLAS_LIB%/}/libopenblas.so" libopenblas.so
for so in libgfortran.so.5 libquadmath.so.0 libpkgconf.so.3; do add_lib "$L/$so"; done
cp /usr/bin/pkgconf "$OUT/bin/pkgconf"
cat >"$OUT/bin/pkg-config" <<'EOF'
#!/bin/sh
# pkgconf from the bundle, with its library beside it and the bundle's .pc files first.
d=$(cd "$(dirname "$0")" && pwd)
PKG_CONFIG_PATH="$d/../lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
LD_LIBRARY_PATH="$d/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/pkgconf" "$@"
EOF
chmod +x "$OUT/bin/pkg-config"

# pkg-config files that point at their own folder wherever the bundle is unpacked.
pc() {  # name version description libs cflags
  cat >"$OUT/lib/pkgconfig/$1.pc" <<EOF
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: $1
Description: $3 (kiln GPU bundle)
Version: $2
Libs: $4
Cflags: $5
EOF
}
pcver() { sed -n 's/^Version: *//p' "$1" | head -1; }
pc libturbojpeg "$(pcver "$L/pkgconfig/libturbojpeg.pc")" "TurboJPEG" "-L\${libdir} -lturbojpeg" "-I\${includedir}"
pc libjpeg "$(pcver "$L/pkgconfig/libjpeg.pc")" "libjpeg-turbo" "-L\${libdir} -ljpeg" "-I\${includedir}"
pc zlib "$(pcver "$L/pkgconfig/zlib.pc")" "zlib" "-L\${libdir} -lz" "-I\${includedir}"
pc libpng "$(pcver "$L/pkgconfig/libpng16.pc")" "libpng" "-L\${libdir} -lpng16" "-I\${includedir}"
pc openblas "$(sed -n 's/^version=//p' "$L/pkgconfig/openblas.pc")" "OpenBLAS" \
   "-L\${libdir} -lopenblas" "-I\${includedir}"
echo "Libs.private: -lm -lpthread -lgfortran" >>"$OUT/lib/pkgconfig/openblas.pc"
pc nlohmann_json "$(pcver /usr/share/pkgconfig/nlohmann_json.pc 2>/dev/null || echo 3)" "nlohmann-json" "" "-I\${includedir}"
pc CLI11 "$(pcver /usr/share/pkgconfig/CLI11.pc 2>/dev/null || echo 2)" "CLI11" "" "-I\${includedir}"

# CMake package files (those three compute their prefix three folders above themselves; doctest's
# hard-coded "/usr" is rewritten so).
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$OUT/share/cmake/"
cp -r /usr/lib/cmake/doctest "$OUT/lib/cmake/"
sed -i 's|^set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
  "$OUT/lib/cmake/doctest/doctestTargets.cmake"
if grep -rl '"/usr' "$OUT/share/cmake" "$OUT/lib/cmake" >/dev/null; then
  echo "gpu_bundle: a CMake package file still names /usr: $(grep -rl '"/usr' "$OUT/share/cmake" "$OUT/lib/cmake")" >&2
  exit 1
fi

# The one thing a configure needs: cmake -C DIR/kiln-bundle.cmake ... (wherever DIR lies by then). Programs
# built so find the libraries through their build RPATH; OpenBLAS's own libgfortran/libquadmath need
# LD_LIBRARY_PATH=DIR/lib where the system lacks them (tools/gpu-check sets it).
cat >"$OUT/kiln-bundle.cmake" <<'EOF'
# Initial cache for building kiln against this bundle (made by tools/gpu-check --bundle).
get_filename_component(_kiln_bundle "${CMAKE_CURRENT_LIST_DIR}" ABSOLUTE)
set(CMAKE_PREFIX_PATH "${_kiln_bundle}" CACHE PATH "the kiln GPU bundle")
set(PKG_CONFIG_EXECUTABLE "${_kiln_bundle}/bin/pkg-config" CACHE FILEPATH "pkgconf from the kiln GPU bundle")
EOF

# What is in it, from which Debian packages.
{
  echo "kiln GPU bundle, made $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME") ($MA)"
  echo "use: put it (or its .tar.xz) next to the kiln checkout, or KILN_BUNDLE=DIR; then tools/gpu-check"
  for p in libturbojpeg0 libjpeg62-turbo zlib1g libpng16-16 libopenblas0-pthread libgfortran5 libquadmath0 libpkgconf3 \
           pkgconf-bin doctest-dev libcli11-dev nlohmann-json3-dev libstb-dev; do
    dpkg-query -W -f '${Package} ${Version}\n' "$p" 2>/dev/null || true
  done
} >"$OUT/MANIFEST"

if [ $TAR = 0 ]; then echo "gpu_bundle: $OUT ($(du -sh "$OUT" | cut -f1))"; exit 0; fi
tar -C "$(dirname "$OUT")" -cf - "$(basename "$OUT")" | xz -6 -T0 >"$OUT.tar.xz"
echo "gpu_bundle: $OUT ($(du -sh "$OUT" | cut -f1) unpacked), $OUT.tar.xz $(du -b "$OUT.tar.xz" | awk '{printf "%.1f MiB", $1 / 1048576}')"
