#!/usr/bin/env bash
# Checks the systemd units: `systemd-analyze verify` on the system and user units (ExecStart pointed
# at the built nielsd, which verify requires to exist), and the system service's offline security
# exposure must stay at or below 2.0.
# Usage: verify_units.sh SOURCE_DIR NIELSD_BINARY_DIR
set -euo pipefail
src=$1
bindir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/system" "$work/user" "$work/xdg"
chmod 700 "$work/xdg"
sed "s|@NIELSD_UNIT_BINDIR@|$bindir|g" "$src/systemd/nielsd.service.in" >"$work/system/nielsd.service"
cp "$src/systemd/nielsd.socket" "$work/system/"
sed "s|@NIELSD_UNIT_BINDIR@|$bindir|g" "$src/systemd/user/nielsd.service.in" >"$work/user/nielsd.service"
cp "$src/systemd/user/nielsd.socket" "$work/user/"

# verify prints problems but does not always fail on them: any output is a failure.
out=$(systemd-analyze verify --man=no "$work/system/nielsd.service" "$work/system/nielsd.socket" 2>&1) || {
  echo "$out"; echo "system units: systemd-analyze verify failed"; exit 1; }
[ -z "$out" ] || { echo "$out"; echo "system units: systemd-analyze verify reported problems"; exit 1; }
out=$(XDG_RUNTIME_DIR="$work/xdg" systemd-analyze verify --user --man=no \
  "$work/user/nielsd.service" "$work/user/nielsd.socket" 2>&1) || {
  echo "$out"; echo "user units: systemd-analyze verify failed"; exit 1; }
[ -z "$out" ] || { echo "$out"; echo "user units: systemd-analyze verify reported problems"; exit 1; }

# PrivateUsers= would make every other user's peer uid the overflow uid (shared sessions).
if grep -Eq '^[[:space:]]*PrivateUsers=' "$work/system/nielsd.service" "$work/user/nielsd.service"; then
  echo "a unit sets PrivateUsers=: peers' uids would collapse to the overflow uid"; exit 1
fi
for key in LimitNOFILE TasksMax; do
  grep -q "^$key=" "$work/system/nielsd.service" || { echo "system unit: no $key="; exit 1; }
done

line=$(systemd-analyze security --offline=true "$work/system/nielsd.service" 2>&1 | grep "Overall exposure level")
echo "$line"
exposure=$(echo "$line" | sed -E 's/.*: ([0-9]+\.[0-9]+).*/\1/')
awk -v e="$exposure" 'BEGIN { exit !(e <= 2.0) }' || { echo "exposure $exposure > 2.0"; exit 1; }
echo "units OK"
