#!/usr/bin/env bash
# The host state the test lanes must leave as they found it, one item per
# line, for a before/after comparison (scripts/test.sh): the sysctls a
# node sets, the nftables ruleset (iptables-nft included), network links,
# mount points and top-level cgroup folders.
set -uo pipefail
for s in vm.overcommit_memory kernel.panic kernel.panic_on_oops net.ipv4.ip_forward \
         net.bridge.bridge-nf-call-iptables; do
  echo "sysctl $s=$(sysctl -n "$s" 2>/dev/null)"
done
nft list ruleset 2>/dev/null | sed 's/^/nft /'
ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print "link " $2}' | sort
# /run/netns itself is a bind mount iproute2 makes on the first `ip netns
# add` and never removes (it holds nothing once the namespaces are gone):
# the namespaces below it count, the folder's own mount does not.
awk '$2 != "/run/netns" {print "mount " $2}' /proc/self/mounts | sort
for c in /sys/fs/cgroup/*/; do
  find "$c" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | sed 's/^/cgroup /'
done | sort
