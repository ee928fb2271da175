#!/usr/bin/env bash
# The README's two commands on a fresh, booted Debian 12 (issue 15: "a fresh 2-core machine
# runs make test in under 10 minutes, installs only what the README lists and enables no
# service").
#
#   bench/fresh_machine.sh [TARGETS]      as root; TARGETS defaults to "test demo"
#
# 1. debootstrap a bare Debian 12 (minbase plus systemd, python3-venv, make, git) into
#    ${FRESH_ROOT:-/srv/qpidd-fresh} (kept between runs: the tree is copied, never reused);
# 2. boot a copy with `systemd-nspawn -b`: systemd is PID 1, the host's network and cores;
#    a oneshot unit clones this repository (bind-mounted read-only) and runs `make TARGET`
#    for each target, timed, then powers the machine off;
# 3. print the times, how many packages each target added, and the units enabled and the
#    services running that were not before (both must be empty).
#
# Installs debootstrap and systemd-container on the host if missing (apt-get
# --no-install-recommends). The machine's /tmp is a directory on disk, as on a Debian
# install. The host's extra CA certificates (/usr/local/share/ca-certificates) are copied
# in, for a network behind a TLS proxy.
set -euo pipefail

targets="${1:-test demo}"
for target in $targets; do
    [[ "$target" =~ ^(test|demo)$ ]] || { echo "fresh_machine.sh: unknown target '$target' (test, demo)" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "fresh_machine.sh: run as root (debootstrap, systemd-nspawn)" >&2; exit 2; }

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
base=${FRESH_ROOT:-/srv/qpidd-fresh}
machine=$base.boot
scratch=$base.tmp

missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
if ((${#missing[@]})); then
    echo "fresh_machine.sh: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# The Debian mirror: FRESH_MIRROR, else the first one this host's apt uses.
mirror=${FRESH_MIRROR:-$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1 || true)}
[[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[[ -n $mirror ]] || { echo "fresh_machine.sh: no Debian mirror in this host's apt sources; set FRESH_MIRROR" >&2; exit 2; }

if [[ ! -x $base/usr/bin/make ]]; then
    echo "fresh_machine.sh: debootstrap bookworm into $base from $mirror"
    rm -rf "$base"
    debootstrap --variant=minbase --include=systemd,systemd-sysv,python3-venv,make,git,ca-certificates \
        bookworm "$base" "$mirror" >"$base.debootstrap.log" 2>&1
fi

rm -rf "$machine" "$scratch"
cp -a "$base" "$machine"
mkdir -m 1777 "$scratch"
echo fresh >"$machine/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 fresh\n::1 localhost ip6-localhost ip6-loopback\n' >"$machine/etc/hosts"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$machine/usr/local/share/ca-certificates/"
    chroot "$machine" update-ca-certificates >/dev/null
fi
mkdir -p "$machine/root/fresh"
cat >"$machine/root/fresh/run.sh" <<EOS
#!/bin/bash
exec > >(tee /dev/console /root/fresh/run.log) 2>&1
cd /root/fresh
echo "fresh: \$(date -u +%FT%TZ) nproc=\$(nproc) pid1=\$(cat /proc/1/comm)"
systemctl list-unit-files --state=enabled --no-legend | sort >enabled-before.txt
systemctl list-units --type=service --state=running --no-legend | sort >running-before.txt
dpkg-query -W -f '\${Package}\n' | sort >packages-before.txt
# git refuses a repository another user owns (the checkout of a developer using sudo):
# trust this one, for the clone only.
printf '[safe]\n\tdirectory = /mnt/repo\n\tdirectory = /mnt/repo/.git\n' >/root/fresh/gitconfig
GIT_CONFIG_GLOBAL=/root/fresh/gitconfig git clone -q /mnt/repo /root/qpid && git -C /root/qpid log --oneline -1
for target in $targets; do
    start=\$(date +%s)
    (cd /root/qpid && make \$target) >\$target.log 2>&1; rc=\$?
    echo "fresh: make \$target rc=\$rc in \$((\$(date +%s) - start)) s"
    tail -3 \$target.log
    dpkg-query -W -f '\${Package}\n' | sort >packages-after-\$target.txt
    echo "fresh: packages added by make \$target: \$(comm -13 packages-before.txt packages-after-\$target.txt | wc -l)"
done
systemctl list-unit-files --state=enabled --no-legend | sort >enabled-after.txt
systemctl list-units --type=service --state=running --no-legend | sort >running-after.txt
echo "fresh: units enabled since boot: \$(comm -13 enabled-before.txt enabled-after.txt | tr '\n' ' ')"
echo "fresh: services running since boot: \$(comm -13 running-before.txt running-after.txt | tr '\n' ' ')"
echo "fresh: done"
systemctl poweroff
EOS
chmod +x "$machine/root/fresh/run.sh"
cat >"$machine/etc/systemd/system/fresh-run.service" <<'EOS'
[Unit]
Description=The README's commands on a clean clone, once
Wants=network-online.target
After=network-online.target
[Service]
Type=oneshot
TimeoutStartSec=infinity
Environment=HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive
ExecStart=/root/fresh/run.sh
StandardOutput=journal+console
[Install]
WantedBy=multi-user.target
EOS
mkdir -p "$machine/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/fresh-run.service "$machine/etc/systemd/system/multi-user.target.wants/"

echo "fresh_machine.sh: booting $machine (make $targets; the log is $machine/root/fresh/run.log)"
# The host need not run systemd: --register=no --keep-unit need no bus. Writable /sys and
# /proc/sys, every capability and no seccomp filter: the tests make network namespaces,
# nftables rules and tmpfs mounts, as root on a real machine.
SYSTEMD_NSPAWN_API_VFS_WRITABLE=1 SYSTEMD_SECCOMP=0 timeout 3600 systemd-nspawn -q -D "$machine" -M qpidd-fresh \
    --register=no --keep-unit --capability=all --console=pipe \
    --bind-ro="$repo:/mnt/repo" --bind="$scratch:/tmp" -b >/dev/null 2>&1 || true
grep '^fresh:' "$machine/root/fresh/run.log"
