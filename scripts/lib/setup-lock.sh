# Sourced by the scripts that install onto this machine (apt-get, rustup, pip, cargo install): two
# test runs at once on one machine (two clones, or a developer's run beside a landing run) must not
# run two package managers at once. dpkg refuses a second apt-get outright rather than waiting.
#
#   setup_lock     waits for the machine-wide setup lock; it is held until the script exits,
#   setup_unlock   or until this
#
# POSIX sh, so scripts/install-deps.sh can use it too.

setup_lock() {
    exec 8>"${TMPDIR:-/tmp}/alchemy-clickhouse-schema-setup.lock"
    flock 8
}

setup_unlock() {
    exec 8>&-
}
