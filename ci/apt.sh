# apt.sh - installing the Debian packages a ci/ script needs (sourced, not run): one
# implementation for start-engines.sh, start-registry.sh, build-test-image.sh and start-kube.sh.
#
# Needs log() and die() from the sourcing script. APT_LOG_DIR (default /tmp) holds the logs.

missing_pkgs() { # PKG... -> prints those that are not installed, one a line
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
    done
}

apt_install() { # PKG...: install the missing ones (one update, one install); starts no daemon
    local missing t0 made_policy=0 logs="${APT_LOG_DIR:-/tmp}"
    missing=$(missing_pkgs "$@" | tr '\n' ' ')
    [ -n "${missing// /}" ] || return 0
    t0=$(date +%s.%N)
    log "apt-get install --no-install-recommends $missing"
    # Without systemd, invoke-rc.d would start the packaged daemons: forbid that during the
    # install (the scripts run the binaries with their own configuration).
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        made_policy=1
    fi
    mkdir -p "$logs"
    local aptopts=(-y -q -o DPkg::Lock::Timeout=300 -o Dpkg::Use-Pty=0)
    DEBIAN_FRONTEND=noninteractive apt-get "${aptopts[@]}" update >"$logs/apt-update.log" 2>&1 \
        || { tail -20 "$logs/apt-update.log" >&2; die "apt-get update failed"; }
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get "${aptopts[@]}" install --no-install-recommends \
        $missing >"$logs/apt-install.log" 2>&1 \
        || { tail -30 "$logs/apt-install.log" >&2; die "apt-get install failed"; }
    [ "$made_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
    log "installed in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
}
