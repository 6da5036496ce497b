#!/usr/bin/env bash
# The Python suite (less slow and bench) on the newest CPython of Debian's
# stable release (trixie: 3.13), in a chroot of it. pyproject.toml allows
# any Python from 3.11, and the extension has code for 3.12 and 3.13 only
# (python/hurray/_shared.h, _hy_module.c) that the 3.11 suites never build.
# The chroot (build-next/SUITE, made by debootstrap once, about a minute,
# then kept) gets Debian's compiler, -dev packages and pythonX.Y, a venv
# with the test peers from PyPI (no torch: what needs it skips), and a copy
# of this tree as it is (git ls-files: committed or not), built there by
# pip install . with -Dwerror=true. Needs root (debootstrap, chroot, mount);
# everything runs in a mount namespace of its own, so no mount outlives it
# and `rm -rf build-next` never reaches the host's /dev or /proc.
# NEXT_SUITE and NEXT_PYTHON name another release (sid 3.14, say).
set -euo pipefail
cd "$(dirname "$0")/.."

suite=${NEXT_SUITE:-trixie}
python=${NEXT_PYTHON:-3.13}
root=$PWD/build-next/$suite
packages="gcc libc6-dev pkg-config libxxhash-dev libyajl-dev libcmocka-dev ca-certificates
  python$python-dev python$python-venv"
peers="meson-python meson ninja numpy ml_dtypes scipy safetensors gguf pytest hypothesis
  urllib3 fsspec xxhash"

skip() { # a machine that cannot run it: counted as skipped, not failed
  echo "test-python-next: $1; skipped" >&2
  echo "test-python-next: 0 passed, 0 failed, 1 skipped"
  exit 0
}
if [ "$(id -u)" -ne 0 ]; then
  # as scripts/bootstrap.sh does: sudo where there is one
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    exec sudo -n --preserve-env=NEXT_SUITE,NEXT_PYTHON,http_proxy,https_proxy,no_proxy,PIP_INDEX_URL,PIP_EXTRA_INDEX_URL "$0" "$@"
  fi
  skip "needs root (debootstrap, chroot, mount) or sudo"
fi
# A container without CAP_SYS_ADMIN (Docker's default) refuses the mount
# namespace and every mount.
unshare --mount --propagation private true 2>/dev/null ||
  skip "this machine refuses a mount namespace (a container without CAP_SYS_ADMIN?)"
command -v debootstrap >/dev/null || {
  echo "test-python-next: no debootstrap (scripts/bootstrap.sh --test installs it)" >&2
  exit 1
}
if [ ! -x "$root/usr/bin/python$python" ]; then
  rm -rf --one-file-system "$root"
  mkdir -p "$(dirname "$root")"
  echo "test-python-next: debootstrap $suite into $root"
  debootstrap --variant=minbase "$suite" "$root" http://deb.debian.org/debian >"$root.log" 2>&1 ||
    { tail -20 "$root.log" >&2; exit 1; }
fi
rm -rf "$root/src"
mkdir -p "$root/src"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -c | tar -x -C "$root/src"
cp /etc/resolv.conf "$root/etc/resolv.conf"

# In a mount namespace of its own; the host's certificate bundle too, for a
# machine whose PyPI traffic goes through a proxy with its own CA.
exec unshare --mount --propagation private bash -euo pipefail -c '
root=$1 python=$2 packages=$3 peers=$4
mount -t proc proc "$root/proc"
for d in dev dev/shm dev/pts; do mount --bind "/$d" "$root/$d"; done
bundle=/etc/ssl/certs/ca-certificates.crt
in_root() {
  chroot "$root" env -i HOME=/root PATH=/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    ${http_proxy:+http_proxy=$http_proxy} ${https_proxy:+https_proxy=$https_proxy} \
    ${no_proxy:+no_proxy=$no_proxy} ${PIP_INDEX_URL:+PIP_INDEX_URL=$PIP_INDEX_URL} \
    bash -euo pipefail -c "$1"
}
in_root "dpkg -s $(echo $packages) >/dev/null 2>&1 || {
  apt-get -o Acquire::Check-Valid-Until=false update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(echo $packages) >/dev/null; }"
[ -f "$bundle" ] && mkdir -p "$root/etc/ssl/certs" && cp "$bundle" "$root$bundle"
in_root "[ -x /venv/bin/python ] || python$python -m venv /venv
  pip install -q --disable-pip-version-check $(echo $peers)
  cd /src && pip install -q --disable-pip-version-check --no-build-isolation \
    -Csetup-args=-Dwerror=true -Cbuild-dir=/build-next .
  echo \"test-python-next: \$(python -VV | head -1), hurray built with -Dwerror=true\""
in_root "cd /src && python -m pytest -q -rs -p no:cacheprovider -m \"not slow and not bench\" tests/python"
' next "$root" "$python" "$packages" "$peers"
