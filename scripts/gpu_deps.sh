#!/usr/bin/env bash
# Fills a folder (default .gpu-deps/ in the repository root; `--out DIR` or a first positional
# argument overrides) with the build dependencies that a GPU machine lacks, taken from this Debian
# 12 machine's packages: yaml-cpp, nlohmann_json, CLI11, the Boost headers Boost.Graph's two
# headers need, zlib and Gloo's headers (pip torch's ProcessGroupGloo.hpp includes <gloo/...>, but
# the wheel ships none). The GPU machine (no apt, no internet, no -dev packages) then configures
# with
#   cmake -S . -B build-gpu -DCMAKE_PREFIX_PATH="$PWD/.gpu-deps;<torch cmake prefix>" \
#         -DPARALLAX_BUILD_GUI=OFF -DPARALLAX_BUILD_TESTS=OFF
# The folder is a small relocatable prefix: include/, lib/ (libyaml-cpp.so*, libz.so) and CMake
# config files whose paths are all relative to their own location, so it works wherever it is
# copied. Nothing is installed here: packages are fetched with `apt-get download` and unpacked with
# `dpkg -x` into a temporary folder. Idempotent: the folder is built beside DIR and swapped in.
# At run time a binary built against it finds libyaml-cpp.so.0.7 through the build tree's RUNPATH
# (DIR/lib, as CMake sets it); moved or installed elsewhere, it needs LD_LIBRARY_PATH=DIR/lib.
# zlib at run time is the GPU machine's own libz.so.1.
set -euo pipefail

usage() {
  echo "usage: scripts/gpu_deps.sh [--out DIR | DIR]   (default: <repo>/.gpu-deps)" >&2
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$repo/.gpu-deps"
out_set=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { usage; exit 2; }; out="$2"; out_set=1; shift 2 ;;
    --out=*) out="${1#--out=}"; out_set=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "gpu_deps: unknown flag $1" >&2; usage; exit 2 ;;
    *) [ -z "$out_set" ] || { usage; exit 2; }; out="$1"; out_set=1; shift ;;
  esac
done
mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"

packages=(
  libyaml-cpp-dev libyaml-cpp0.7   # scenario files: headers, and the shared library they link to
  nlohmann-json3-dev               # JSON output and traces (header-only)
  libcli11-dev                     # the command line (header-only)
  libboost1.74-dev                 # Boost.Graph (header-only) and BoostConfig/boost_headers configs
  zlib1g-dev zlib1g                # gzipped traces and datasets: zlib.h, and libz.so's real file
  libgloo-dev                      # Gloo's headers, for pip torch's ProcessGroupGloo.hpp
)

# The package names above are Debian 12's (bookworm): elsewhere they may not exist or differ.
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}") || codename=""
if [ "$codename" != "bookworm" ]; then
  echo "gpu_deps: warning: this is not Debian 12 (bookworm) but '${codename:-unknown}'" >&2
fi
cxx="${CXX:-g++}"
for tool in apt-get dpkg-deb "$cxx"; do
  command -v "$tool" >/dev/null || { echo "gpu_deps: needs $tool" >&2; exit 1; }
done

# Everything is built in temporary folders: downloads and unpacked packages under $work, the new
# DIR in $stage beside it (same file system, so the final swap is two renames).
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-deps.XXXXXX")
stage="$out.new.$$"
trap 'rm -rf "$work" "$stage"' EXIT
mkdir -p "$work/debs" "$work/root" "$stage"

# apt-get download needs no root; as root, apt would rather download as the _apt user, who
# cannot write into our private temporary folder: tell it to stay root (no warning).
apt_opts=()
[ "$(id -u)" -ne 0 ] || apt_opts=(-o APT::Sandbox::User=root)
download() { (cd "$work/debs" && apt-get download -q "${apt_opts[@]}" "${packages[@]}" >&2); }
# Package lists may be stale on a fresh machine: refresh once if the first try fails.
if ! download; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "gpu_deps: apt-get update needs root (or sudo)" >&2; exit 1; }
    sudo="sudo"
  fi
  $sudo apt-get update -q >&2
  download
fi
for deb in "$work"/debs/*.deb; do
  dpkg-deb -x "$deb" "$work/root"
  dpkg-deb -f "$deb" Package Version | paste -sd' ' >> "$stage/PACKAGES"   # provenance
done
inc="$work/root/usr/include"

# --- Headers -------------------------------------------------------------------------------------
mkdir -p "$stage/include" "$stage/lib"
cp -a "$inc"/{yaml-cpp,nlohmann,CLI,gloo,zlib.h,zconf.h} "$stage/include/"

# Boost: only the headers that boost/graph/adjacency_list.hpp and depth_first_search.hpp pull in
# (the only Boost headers Parallax includes; add any new one to the probe below), 6 MiB of the
# 160 MiB. The closure is the union over C++17/20/23 with g++ and clang++ (when present), since
# Boost's headers pick others by compiler and __cplusplus; plus Boost.Config's files for the
# other compilers and standard library a Linux GPU machine might use (Intel, nvcc, libc++).
printf '#include <boost/graph/adjacency_list.hpp>\n#include <boost/graph/depth_first_search.hpp>\n' \
  > "$work/boost_probe.cpp"
compilers=("$cxx")
command -v clang++ >/dev/null && [ "$cxx" != clang++ ] && compilers+=(clang++)
for c in "${compilers[@]}"; do
  for std in c++17 c++20 c++23; do
    "$c" -std="$std" -M -I"$inc" "$work/boost_probe.cpp" 2>/dev/null || true
  done
done | tr ' \\' '\n\n' | grep "^$inc/boost/" | sed "s|^$inc/||" > "$work/boost_files" || true
[ -s "$work/boost_files" ] || { echo "gpu_deps: $cxx -M found no Boost headers" >&2; exit 1; }
printf 'boost/config/%s\n' compiler/intel.hpp compiler/common_edg.hpp compiler/nvcc.hpp stdlib/libcpp.hpp \
  >> "$work/boost_files"
sort -u "$work/boost_files" | (cd "$inc" && xargs cp --parents -t "$stage/include")
# A last check with the copy alone: the probe must compile against it.
"$cxx" -std=c++20 -fsyntax-only -w -I"$stage/include" "$work/boost_probe.cpp"

# --- Libraries -----------------------------------------------------------------------------------
# yaml-cpp: libyaml-cpp.so -> .so.0.7 (soname) -> .so.0.7.0 (Debian's relative links, kept).
yaml_real=$(basename "$(find "$work/root" -name 'libyaml-cpp.so.*.*.*' -type f)")   # libyaml-cpp.so.0.7.0
yaml_soname=$(echo "$yaml_real" | sed -E 's/(\.so\.[0-9]+\.[0-9]+)\..*$/\1/')   # libyaml-cpp.so.0.7
cp -a "$work"/root/usr/lib/*/libyaml-cpp.so* "$stage/lib/"
# zlib: Debian's libz.so is an absolute link to /lib/...; here a relative one to the real file.
# No libz.so.1 soname link: at run time the GPU machine's own libz.so.1 is the one loaded (one
# zlib per process, however many libraries want it), the copy here only serves the link.
z_real=$(find "$work/root" -name 'libz.so.1.*' -type f)   # .../libz.so.1.2.13
cp "$z_real" "$stage/lib/"
ln -s "$(basename "$z_real")" "$stage/lib/libz.so"

# --- CMake config files --------------------------------------------------------------------------
# nlohmann_json and CLI11: Debian's files compute their prefix from their own location (four
# levels up from share/cmake/<name>/<file>): kept as they are.
mkdir -p "$stage/share/cmake"
cp -a "$work/root/usr/share/cmake/nlohmann_json" "$work/root/usr/share/cmake/CLI11" "$stage/share/cmake/"

# yaml-cpp: Debian's config lives in lib/<multiarch>/cmake and counts four levels to its prefix;
# a small one of our own instead, for lib/cmake/yaml-cpp. Debian's version file has no paths.
mkdir -p "$stage/lib/cmake/yaml-cpp"
cp "$work"/root/usr/lib/*/cmake/yaml-cpp/yaml-cpp-config-version.cmake "$stage/lib/cmake/yaml-cpp/"
cat > "$stage/lib/cmake/yaml-cpp/yaml-cpp-config.cmake" <<EOF
# yaml-cpp from Debian 12's libyaml-cpp-dev (scripts/gpu_deps.sh): relocatable, every path is
# relative to this file (<prefix>/lib/cmake/yaml-cpp). Target: yaml-cpp, as Debian's, and the
# yaml-cpp::yaml-cpp name of later releases.
get_filename_component(_yaml_cpp_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET yaml-cpp)
  add_library(yaml-cpp SHARED IMPORTED)
  set_target_properties(yaml-cpp PROPERTIES
    IMPORTED_LOCATION "\${_yaml_cpp_prefix}/lib/$yaml_real"
    IMPORTED_SONAME "$yaml_soname"
    INTERFACE_INCLUDE_DIRECTORIES "\${_yaml_cpp_prefix}/include")
endif()
if(NOT TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp::yaml-cpp INTERFACE IMPORTED)
  set_target_properties(yaml-cpp::yaml-cpp PROPERTIES INTERFACE_LINK_LIBRARIES yaml-cpp)
endif()
set(YAML_CPP_INCLUDE_DIR "\${_yaml_cpp_prefix}/include")
set(YAML_CPP_LIBRARY_DIR "\${_yaml_cpp_prefix}/lib")
set(YAML_CPP_LIBRARIES yaml-cpp)
unset(_yaml_cpp_prefix)
EOF

# Boost: Boost's own BoostConfig.cmake finds its components relative to itself (kept, with its
# version file); boost_headers' config counts three levels from lib/<multiarch>/cmake and
# carries Debian's build path: ours counts from lib/cmake. Targets: Boost::headers, Boost::boost.
boost_cmake=$(echo "$work"/root/usr/lib/*/cmake)
boost_ver=$(basename "$boost_cmake"/Boost-*)              # Boost-1.74.0
boost_ver=${boost_ver#Boost-}
mkdir -p "$stage/lib/cmake/Boost-$boost_ver" "$stage/lib/cmake/boost_headers-$boost_ver"
cp "$boost_cmake/Boost-$boost_ver"/{BoostConfig,BoostConfigVersion}.cmake "$stage/lib/cmake/Boost-$boost_ver/"
cp "$boost_cmake/boost_headers-$boost_ver/boost_headers-config-version.cmake" \
  "$stage/lib/cmake/boost_headers-$boost_ver/"
cat > "$stage/lib/cmake/boost_headers-$boost_ver/boost_headers-config.cmake" <<'EOF'
# Boost's header-only libraries, from Debian 12's libboost1.74-dev (scripts/gpu_deps.sh): only
# the headers Boost.Graph's adjacency_list.hpp and depth_first_search.hpp need. Relocatable: the
# include folder is relative to this file (<prefix>/lib/cmake/boost_headers-<version>).
if(TARGET Boost::headers)
  return()
endif()
get_filename_component(_boost_includedir "${CMAKE_CURRENT_LIST_DIR}/../../../include" ABSOLUTE)
add_library(Boost::headers INTERFACE IMPORTED)
set_target_properties(Boost::headers PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${_boost_includedir}"
  INTERFACE_COMPILE_DEFINITIONS "BOOST_ALL_NO_LIB")
unset(_boost_includedir)
mark_as_advanced(boost_headers_DIR)
EOF

# CMake 4 refuses cmake_minimum_required/cmake_policy(VERSION x) with x < 3.5, and warns below
# 3.10. A range min...max is judged by its max, so Debian's (2.6...3.19, 2.8.3...3.22) pass; still,
# every lower end under 3.10 is raised to 3.10 (a max is kept): for a range that changes nothing
# in any CMake >= 3.12, which applies the max, and a bare old version would otherwise be an error.
find "$stage" -name '*.cmake' -exec sed -E -i \
  's/(cmake_(policy|minimum_required)\( *VERSION +)([0-2]|3\.[0-9])(\.[0-9]+)*( |\)|\.\.\.)/\13.10\5/' {} +
if grep -rEn 'cmake_(policy|minimum_required)\( *VERSION +([0-2]\.|3\.[0-9]([^0-9]|$))' "$stage" --include='*.cmake' >&2; then
  echo "gpu_deps: a config file above still asks for CMake < 3.10" >&2; exit 1
fi
# Relocatable: no config file may name the machine's /usr or Debian's build folder.
if grep -rEn '"/(usr|build|lib)/' "$stage" --include='*.cmake' >&2; then
  echo "gpu_deps: a config file above hard-codes a path" >&2; exit 1
fi

# --- Swap in -------------------------------------------------------------------------------------
cat > "$stage/README" <<EOF
Build dependencies for a GPU machine without -dev packages, from Debian 12 (scripts/gpu_deps.sh;
PACKAGES lists the packages and versions). Relocatable prefix: give it to CMake with
  -DCMAKE_PREFIX_PATH="<this folder>;<torch cmake prefix>"
EOF
old="$out.old.$$"
if [ -e "$out" ]; then mv "$out" "$old"; fi
mv "$stage" "$out"
rm -rf "$old"

echo "gpu_deps: $out: $(du -sh --apparent-size "$out" | cut -f1)" \
     "($(find "$out" -type f | wc -l) files, $(du -sh "$out" | cut -f1) on disk)" >&2
echo "gpu_deps: use: cmake -S . -B build-gpu -DCMAKE_PREFIX_PATH=\"$out;\$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')\" -DPARALLAX_BUILD_GUI=OFF -DPARALLAX_BUILD_TESTS=OFF" >&2
