#!/bin/sh
# Install Debian packages for their tools only: `make test` and `make demo` call this
# (as root, or through sudo) with the packages that are missing.
#
#   deploy/system-packages.sh PACKAGE...
#
# - apt-get install --no-install-recommends: the packages and their dependencies, nothing
#   recommended;
# - no service starts during the install: a policy-rc.d that refuses (exit 101) is put in
#   place for the install when the machine has none (Docker images have one);
# - no service stays enabled: every unit the install enabled (a new link in a .wants or
#   .requires directory under /etc/systemd/system, such as cluster-glue's logd.service or
#   pacemaker-remote's pacemaker_remote.service) is disabled again with
#   deb-systemd-helper, which also records it so that an upgrade does not enable it; the
#   install's new alias links to it (Alias=) go too.
#
# It prints what it installed and what it disabled.
set -eu
[ "$#" -gt 0 ] || exit 0

links() {
    find /etc/systemd/system \( -path '*.wants/*' -o -path '*.requires/*' \) 2>/dev/null | sort
}
# An enabled unit's aliases (Alias= in its [Install]) are links at the top of
# /etc/systemd/system: `systemctl is-enabled` says "enabled" while one is left
# (pacemaker_remote.service's pacemaker-remote.service on a bare Debian 12).
aliases() {
    find /etc/systemd/system -maxdepth 1 -type l 2>/dev/null | sort
}

before=$(mktemp)
links >"$before"
before_aliases=$(mktemp)
aliases >"$before_aliases"
policy=/usr/sbin/policy-rc.d
own_policy=
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# deploy/system-packages.sh: start no service while installing\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=yes
fi
cleanup() {
    if [ -n "$own_policy" ]; then rm -f "$policy"; fi
    rm -f "$before" "$before_aliases"
}
trap cleanup EXIT

echo "installing (no recommends, no service enabled): $*"
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"

links | comm -13 "$before" - | xargs -r -n1 basename | sort -u | while read -r unit; do
    if command -v deb-systemd-helper >/dev/null 2>&1; then
        deb-systemd-helper disable "$unit" >/dev/null 2>&1 || true
    fi
    # whatever deb-systemd-helper left (or without it): the new links themselves
    links | comm -13 "$before" - | grep "/$unit\$" | xargs -r rm -f
    aliases | comm -13 "$before_aliases" - | while read -r alias; do
        if [ "$(basename "$(readlink "$alias")")" = "$unit" ]; then rm -f "$alias"; fi
    done
    echo "disabled $unit (installed for its tools only; the tests start what they need)"
done
