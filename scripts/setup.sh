# Sourced by scripts/run and scripts/test: checks what building ferroce needs and installs what
# is missing and can be installed from Debian's packages. Idempotent: when everything is there it
# installs nothing and only prints the versions. It never downloads a toolchain.
#
#   ferroce_setup          # build needs: a Rust toolchain (cargo, rustc) and a C toolchain
#   ferroce_setup test     # also rustfmt and clippy

# The Rust version the workspace declares (Cargo.toml: rust-version).
FERROCE_MIN_RUST="1.87"

ferroce_log() { printf 'ferroce setup: %s\n' "$*" >&2; }

# apt-get install the given Debian packages (as root, or through sudo).
ferroce_apt_install() {
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo="sudo"
        else
            ferroce_log "need root (or sudo) to run: apt-get install $*"
            return 1
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        ferroce_log "no apt-get on this machine: install $* with your package manager"
        return 1
    fi
    ferroce_log "installing $* (apt-get)"
    # Through env: sudo does not pass the caller's environment on.
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# True when version $1 >= version $2 (dotted numbers).
ferroce_version_ge() {
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

# DPDK for the dataplane crates (dataplane/dpdk-sys binds the system's DPDK 22.11 with bindgen):
# headers and pkg-config file, the PMD plugins, pkg-config, and clang/libclang for bindgen.
# Installs only what is missing. Hugepages and network namespaces are not set up here: the
# DPDK tests reserve/create what they need and release/remove it themselves.
ferroce_setup_dpdk() {
    local missing=()
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    pkg-config --exists libdpdk 2>/dev/null || missing+=(libdpdk-dev)
    compgen -G "/usr/lib/*/dpdk/pmds-*/librte_net_af_packet.so*" >/dev/null || missing+=(dpdk)
    command -v clang >/dev/null 2>&1 || missing+=(clang)
    compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null || missing+=(libclang-dev)
    if [ "${#missing[@]}" -gt 0 ]; then
        ferroce_apt_install "${missing[@]}" || return 1
    fi
    ferroce_log "DPDK $(pkg-config --modversion libdpdk), $(clang --version | head -n1)"
}

# The verbs shim's tests run the unmodified Debian verbs programs against it (ibverbs-utils,
# perftest, qperf, libfabric-bin, ucx-utils, python3-pyverbs for rdma-core's test suite) and check its struct layouts and the stub provider
# libraries against the system infiniband/*.h (libibverbs-dev; rdma-core provides the provider
# libraries whose symbols the stubs mirror).
# Installs only what is missing.
ferroce_setup_verbs() {
    local missing=()
    command -v ibv_devinfo >/dev/null 2>&1 || missing+=(ibverbs-utils)
    command -v ib_write_bw >/dev/null 2>&1 || missing+=(perftest)
    # qperf's UC and UD tests (verbs_apps.rs).
    command -v qperf >/dev/null 2>&1 || missing+=(qperf)
    [ -f /usr/include/infiniband/verbs.h ] || missing+=(libibverbs-dev)
    dpkg -s rdma-core >/dev/null 2>&1 || missing+=(rdma-core)
    # libfabric's fi_info/fi_pingpong and UCX's ucx_info over the shim (verbs_fabric.rs).
    command -v fi_info >/dev/null 2>&1 || missing+=(libfabric-bin)
    command -v ucx_info >/dev/null 2>&1 || missing+=(ucx-utils)
    # librdmacm.so.1 (rdmacm/) is built against rdma/rdma_cma.h (librdmacm-dev, bindgen); its
    # tests run rping, ucmatose, rdma_server/rdma_client (rdmacm-utils) over it.
    [ -f /usr/include/rdma/rdma_cma.h ] || missing+=(librdmacm-dev)
    command -v rping >/dev/null 2>&1 || missing+=(rdmacm-utils)
    # rdma-core's own python test suite over the shim (pyverbs.rs): Debian's pyverbs, for the
    # system python (/usr/bin/python3; a pyenv python earlier on PATH does not see it).
    /usr/bin/python3 -c 'import pyverbs.device' >/dev/null 2>&1 || missing+=(python3-pyverbs)
    if [ "${#missing[@]}" -gt 0 ]; then
        ferroce_apt_install "${missing[@]}" || return 1
    fi
}

# The device nodes UCX looks for (docs/verbs-devices.md): it skips a verbs device unless
# /dev/infiniband/<dev_name> is a character device it may read and write. The shim has no kernel
# driver and never opens them, so each is a link to /dev/null, named as the shim names its
# devices (verbs-shim/src/device.rs: ferroce_uverbs0 for ferroce0, ferroce_uverbs1 for
# ferroce0_rocev2; never a real HCA's uverbsN). Creates only what is missing.
ferroce_setup_verbs_nodes() {
    local sudo="" n
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo="sudo"
        else
            ferroce_log "need root (or sudo) to create /dev/infiniband/ferroce_uverbs0 and 1 (UCX over the shim)"
            return 1
        fi
    fi
    for n in ferroce_uverbs0 ferroce_uverbs1; do
        [ -c "/dev/infiniband/$n" ] && continue
        $sudo mkdir -p /dev/infiniband || return 1
        $sudo ln -sfn /dev/null "/dev/infiniband/$n" || return 1
        ferroce_log "created /dev/infiniband/$n -> /dev/null (UCX's device check)"
    done
}

# tshark for the Wireshark dissector (spec/wireshark/ferroce.lua) and its test
# (tests/tests/dissector.rs). wireshark-common asks whether non-root users may capture; the
# answer ("no", Debian's default) is given to debconf first, so the install never waits on it.
# Installs only when tshark is missing.
ferroce_setup_tshark() {
    command -v tshark >/dev/null 2>&1 && return 0
    local sudo=""
    if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    fi
    if { [ "$(id -u)" -eq 0 ] || [ -n "$sudo" ]; } && command -v debconf-set-selections >/dev/null 2>&1; then
        echo "wireshark-common wireshark-common/install-setuid boolean false" |
            $sudo debconf-set-selections
    fi
    ferroce_apt_install tshark
}

ferroce_setup() {
    local want_tests="${1:-}"

    # rustup installs into ~/.cargo/bin, which a non-login shell may not have on PATH.
    local cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$cargo_bin/cargo" ]; then
        export PATH="$cargo_bin:$PATH"
    fi

    # C compiler and linker: rustc links through cc; the fuzz targets' libFuzzer (built by the
    # libfuzzer-sys crate, scripts/fuzz) needs the C++ compiler too.
    if ! command -v cc >/dev/null 2>&1 || ! command -v make >/dev/null 2>&1 ||
        ! command -v c++ >/dev/null 2>&1; then
        ferroce_apt_install build-essential
    fi

    # The workspace's dataplane crates need the system DPDK.
    ferroce_setup_dpdk || return 1

    # The verbs shim's tests need the Debian verbs programs and headers.
    ferroce_setup_verbs || return 1
    ferroce_setup_verbs_nodes || return 1

    # The dissector test runs tshark.
    ferroce_setup_tshark || return 1

    if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
        cat >&2 <<MSG
ferroce setup: no Rust toolchain (cargo, rustc) found.
  ferroce needs Rust >= $FERROCE_MIN_RUST. Install it with rustup (https://rustup.rs), or, as a
  fallback, Debian's packages:  apt-get install cargo rustc
  (Debian 12's own rustc is 1.63, older than $FERROCE_MIN_RUST: that fallback cannot build this
  workspace.)
  These scripts do not download toolchains themselves.
MSG
        return 1
    fi

    local rust_version
    rust_version="$(rustc --version | awk '{print $2}')"
    if ! ferroce_version_ge "${rust_version%%-*}" "$FERROCE_MIN_RUST"; then
        ferroce_log "rustc $rust_version is older than the $FERROCE_MIN_RUST this workspace needs"
        ferroce_log "update it (e.g. rustup update stable) and run this script again"
        return 1
    fi

    if [ "$want_tests" = "test" ]; then
        local missing=()
        cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
        cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)
        if [ "${#missing[@]}" -gt 0 ]; then
            ferroce_log "missing Rust components: ${missing[*]}"
            if command -v rustup >/dev/null 2>&1; then
                ferroce_log "install them with: rustup component add ${missing[*]}"
            else
                ferroce_log "install them with your toolchain (Debian: apt-get install rustfmt rust-clippy)"
            fi
            return 1
        fi
    fi

    ferroce_log "$(cargo --version), $(rustc --version), $(cc --version | head -n1)"
}
