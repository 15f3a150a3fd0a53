#!/usr/bin/env bash
# Installs the Debian packages Parallax builds with (and, with --bench, those its benchmarks
# compare against; with --fuzz, clang for the fuzz targets; with --browser, Chromium). Idempotent and quick when they are present: it only calls apt-get for what is
# missing. Run as root, or with sudo available.
set -euo pipefail

packages=(
  cmake g++ make           # build
  libyaml-cpp-dev          # scenario files, with line/column marks
  nlohmann-json3-dev       # JSON output and traces
  libcli11-dev             # the command line
  libboost-graph-dev       # schedule validation, critical paths
  zlib1g-dev               # gzipped traces and datasets
  catch2                   # tests (v2)
  libtorch-dev             # the executor's compute (CPU LibTorch 1.13) and c10d
  libopenblas0-pthread     # LibTorch's BLAS: without it Debian's reference BLAS makes matmuls ~5x slower
  libgloo-dev              # ProcessGroupGloo's headers
  dataset-fashion-mnist    # real data for the MLP
  qt6-base-dev             # parallax-gui: Qt6 Widgets (and Qt Test)
  qt6-charts-dev           # parallax-gui: metrics charts
  libqt6opengl6-dev        # Qt Charts' CMake config needs Qt6OpenGL
  libxkbcommon-dev         # Qt6Gui's CMake config needs XKB
  fonts-dejavu-core        # text in headless (offscreen) screenshots
  iproute2                 # the multi-host test: two network namespaces joined by veth
)

# --bench: also what the benchmarks compare against: PyTorch's own DDP (Debian's python3-torch)
#   and torch.distributed.pipelining (pip's torch in .venv-torch, as --torch).
# --fuzz: clang and its libFuzzer/sanitizer runtimes, for bench/fuzz.sh.
# --browser: headless Chromium, which the HTML report's test opens the report in.
# --torch: also pip's torch (TORCH_VERSION, default the pinned one below, with CUDA) in the
#   repository's .venv-torch, for the LibTorch 2.x build: cmake -DPARALLAX_TORCH=python.
torch=0
for flag in "$@"; do
  case "$flag" in
    --bench) packages+=(python3-torch); torch=1 ;;
    --fuzz) packages+=(clang libclang-rt-14-dev) ;;
    --browser) packages+=(chromium) ;;
    --torch) torch=1 ;;
    *) echo "setup: unknown flag $flag (known: --bench, --fuzz, --browser, --torch)" >&2; exit 2 ;;
  esac
done

# pip torch 2.x into .venv-torch (about 6 GB with its CUDA libraries; quick when it is there).
# pip holds the 2.7 GB of wheels beside what it unpacks, so it needs about 9 GB free while it
# installs; pip keeps no cache (that would be 2.7 GB more, kept), and its temporary files go beside
# the venv, not in /tmp, which may be a small tmpfs. A CI run once ended in "No space left on device"
# halfway through pip; now a short disk is named before pip starts.
torch_needs_gb=9
install_torch() {
  local repo venv want free_gb tmp
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  venv="$repo/.venv-torch"
  want=${TORCH_VERSION:-2.11.0}
  if [ -x "$venv/bin/python3" ] && [ "$("$venv/bin/python3" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)" = "$want" ]; then
    echo "setup: torch $want present in .venv-torch" >&2
    return
  fi
  free_gb=$(df -P -k "$repo" | awk 'NR == 2 { printf "%d", $4 / 1048576 }')
  if [ "$free_gb" -lt "$torch_needs_gb" ]; then
    echo "setup: pip's torch $want with its CUDA libraries needs about $torch_needs_gb GB free while it installs;" \
      "$repo has $free_gb GB free (df -h $repo)" >&2
    exit 1
  fi
  python3 -m venv "$venv" >&2 || { echo "setup: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
  echo "setup: pip install torch==$want into .venv-torch ($free_gb GB free)" >&2
  tmp="$venv/pip-tmp"
  mkdir -p "$tmp"
  TMPDIR="$tmp" "$venv/bin/python3" -m pip install -q --no-cache-dir "torch==$want" >&2
  rm -rf "$tmp"
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present" >&2
  [ $torch -eq 0 ] || install_torch
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Package lists may be stale on a fresh machine: refresh once if the first try fails.
if ! $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; then
  $sudo apt-get update -q >&2
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
[ $torch -eq 0 ] || install_torch
